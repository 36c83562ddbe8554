"""End-to-end on the embedded lab over real SSH.

The session fixture brings the lab up when it is down (``nodegate-lab up --nodes 2 --fault
node2:foreign-process@gpu0``), holds /tmp/nodegate-lab-in-use while it runs on the default
lab (instance 0), deploys once, and every test reads the real nodes (testinfra over the lab's
SSH key and known_hosts).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodegate_lab import config as lab_config
from nodegate_lab import deploys, services, sitefile

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
MARKER = Path("/tmp/nodegate-lab-in-use")
NODES = ("node1", "node2")
BUSY = "node2"  # foreign-process@gpu0: a simulated GPU process
# NODEGATE_LAB_INSTANCE=N runs these on lab N: its site file and lab.env (lab_dir()/...)
SITE = sitefile.site_path()
ENV_FILE = services.env_file()
pytestmark = [
    pytest.mark.lab, pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("systemd-nspawn") is None,
                       reason="the lab needs root and systemd-nspawn"),
]


def _lab(*args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(VENV_BIN / "nodegate-lab"), *args], cwd=ROOT, text=True,
                          capture_output=True, timeout=timeout, check=False)


def pyinfra_env() -> dict[str, str]:
    """The lab's site and credentials (``set -a; . lab.env``: the BMC/PDU ``*_env`` secrets
    pdu_monitor pushes to the node; without them it refuses the hosts)."""
    env = dict(os.environ, NODEGATE_SITE=str(SITE) if lab_config.INSTANCE else "lab")
    if ENV_FILE.is_file():
        for line in ENV_FILE.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep and not key.startswith("#"):
                env[key.strip()] = value.strip().strip("'\"")
    return env


def pyinfra(*args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    """``pyinfra -y inventory.py ARGS`` with the lab's credentials in the environment."""
    env = pyinfra_env()
    yes = [] if "--dry" in args else ["-y"]  # -y skips the plan a dry run exists to show
    return subprocess.run([str(VENV_BIN / "pyinfra"), *yes, "inventory.py", *args], cwd=ROOT,
                          env=env, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=timeout, check=False)


def totals(out: str) -> tuple[int, int, int]:
    """(success, error, no change) of pyinfra's ``Grand total`` row ("-" is 0)."""
    match = re.search(r"Grand total\s+\d+\s+(\S+)\s+(\S+)\s+(\S+)", out)
    assert match, out[-3000:]
    s, e, n = (0 if v == "-" else int(v) for v in match.groups())
    return s, e, n


def shell(node: str, command: str) -> str:
    result = _lab("shell", node, "--", command, timeout=60)
    assert result.returncode == 0, (node, command, result.stdout, result.stderr)
    return result.stdout


def _lab_ready() -> bool:
    status = _lab("status", timeout=60).stdout
    return SITE.is_file() and all(re.search(rf"^{n}\s+node\s+\S+\s+running", status, re.M)
                                  for n in NODES) and "foreign-process@gpu0" in status


@pytest.fixture(scope="session")
def lab() -> Iterator[None]:
    # the marker guards the default lab only (tests/lab/conftest.py reads it for instance 0):
    # a run on another NODEGATE_LAB_INSTANCE must not make the default lab's users wait
    default_lab = lab_config.INSTANCE == 0
    ours = default_lab and not MARKER.exists()
    if default_lab:
        MARKER.touch()
    try:
        if not _lab_ready():
            up = _lab("up", "--nodes", "2", "--fault", f"{BUSY}:foreign-process@gpu0")
            assert up.returncode == 0, up.stdout + up.stderr
        yield
    finally:
        if ours:
            MARKER.unlink(missing_ok=True)


@pytest.fixture(scope="session")
def deployed(lab: None) -> subprocess.CompletedProcess[str]:
    first = pyinfra("deploy.py")
    assert first.returncode == 0, first.stdout[-4000:]
    return first


@pytest.fixture(scope="session")
def ssh_config(tmp_path_factory: pytest.TempPathFactory, lab: None) -> Path:
    import yaml

    site = yaml.safe_load(SITE.read_text())
    d = site["defaults"]
    lines = []
    for name, entry in site["hosts"].items():
        lines += [f"Host {name}", f"  HostName {entry['address']}", f"  User {d['ssh_user']}",
                  f"  IdentityFile {d['ssh_key']}", f"  UserKnownHostsFile {d['ssh_known_hosts_file']}",
                  "  StrictHostKeyChecking yes", "  BatchMode yes"]
    path = tmp_path_factory.mktemp("ssh") / "config"
    path.write_text("\n".join(lines) + "\n")
    return path


def node(ssh_config: Path, name: str) -> Any:
    import testinfra

    return testinfra.get_host(f"ssh://{name}", ssh_config=str(ssh_config))


def test_full_deploy_then_second_run_changes_nothing_but_runs_the_gate(deployed: Any) -> None:
    """A rerun on converged nodes: no role operation and no join changes anything; the gate's
    battery runs again on each node, an action pyinfra counts as that operation's change."""
    again = pyinfra("deploy.py")
    assert again.returncode == 0, again.stdout[-4000:]
    success, error, unchanged = totals(again.stdout)
    changed = deploys.changed_operations(again.stdout)
    assert deploys.role_changes(again.stdout) == {}, changed
    assert [(name.rpartition("| ")[2], hosts) for name, hosts in changed.items()] == [
        ("gate: nodegate health", len(NODES))], changed
    assert (success, error) == (len(NODES), 0), again.stdout[-4000:]
    assert unchanged > 0


def test_nodes_run_the_build_the_lab_pinned(deployed: Any) -> None:
    """The site pins the mirror's nodegate build (``<release>+src.<digest of the tree>``) and
    the agent installed exactly it: an edited tree is a new version, never pip's no-op."""
    import yaml

    pin = yaml.safe_load(SITE.read_text())["defaults"]["data"]["agent_package"]
    assert re.fullmatch(r"nodegate==\d+\.\d+\.\d+\+src\.[0-9a-f]{12}", pin), pin
    for name in NODES:
        version = shell(name, "/opt/nodegate/venv/bin/nodegate version").strip()
        assert version == f"nodegate {pin.partition('==')[2]}", (name, version)


@pytest.mark.parametrize("name", NODES)
def test_testinfra_checks_of_the_result(deployed: Any, ssh_config: Path, name: str) -> None:
    h = node(ssh_config, name)
    held = set(h.check_output("apt-mark showhold").split())
    # libnvidia-ml1 comes in as a dependency the role never names: held all the same
    for pkg in ("nvidia-driver", "nvidia-kernel-open-dkms", "nvidia-persistenced",
                "nvidia-fabricmanager-570", "libnvidia-nscq-570", "libnvidia-ml1"):
        assert h.package(pkg).version.startswith("570.133.20-"), pkg
        assert pkg in held, pkg
    for pkg in ("libnccl2", "libnccl-dev"):
        assert h.package(pkg).version == "2.26.2-1+cuda12.8"
        assert pkg in held
    assert h.service("nvidia-persistenced").is_running
    assert h.service("nvidia-persistenced").is_enabled
    assert h.service("nvidia-fabricmanager").is_running
    assert h.service("nvidia-fabricmanager").is_enabled
    conf = h.file("/etc/nccl.conf").content_string
    # the lab board's sysfs shows the XE9680's eight rails: NCCL_IB_HCA from them, exact match
    rails = ",".join(f"mlx5_{i}:1" for i in range(8))
    assert re.findall(r"^NCCL_\w+=.*$", conf, re.M) == ["NCCL_SOCKET_IFNAME=eth0",
                                                         f"NCCL_IB_HCA=={rails}"]
    assert not re.search(r"^NCCL_DEBUG", conf, re.M)
    mount = h.mount_point("/raid")
    assert mount.exists and mount.filesystem == "xfs"
    assert "noatime" in mount.options
    unit = h.file("/etc/systemd/system/raid.mount").content_string
    assert re.search(r"^What=(UUID=|/dev/disk/by-uuid/)[0-9a-f-]{36}$", unit, re.M)
    assert "nofail" in unit
    # systemd is the lab's init: the agent's schedule is its timer (docs/roles.md)
    assert h.service("nodegate-health.timer").is_enabled
    assert h.service("nodegate-health.timer").is_running
    assert not h.file("/etc/cron.d/nodegate-health").exists
    unit = h.file("/etc/systemd/system/nodegate-health.service").content_string
    assert re.search(r"^ExecStart=/opt/nodegate/venv/bin/nodegate health", unit, re.M)
    profile = json.loads(h.file("/etc/nodegate/profile.json").content_string)
    assert profile["driver"]["version"] == "570.133.20"
    health = h.run("/opt/nodegate/venv/bin/nodegate health --profile /etc/nodegate/profile.json "
                   "--checks gpu,log --no-textfile --quiet --color never")
    assert health.rc == 0, health.stdout + health.stderr


def test_sentinel_on_the_nvme_filesystem_survives_a_redeploy(deployed: Any,
                                                            ssh_config: Path) -> None:
    token = uuid.uuid4().hex
    for name in NODES:
        shell(name, f"echo {token} > /raid/nodegate-sentinel && sync")
    again = pyinfra("deploy.py")
    assert again.returncode == 0
    for name in NODES:
        assert node(ssh_config, name).file("/raid/nodegate-sentinel").content_string.strip() \
            == token


def test_driver_upgrade_refused_with_a_gpu_process(deployed: Any, ssh_config: Path) -> None:
    # the lab drains nodes until they join; a drained node may change its driver, so resume
    _lab("shell", "slurmctl", "--",
              f"scontrol update nodename={BUSY} state=resume", timeout=60)
    run = pyinfra("deploy/upgrade_driver.py", "--limit", BUSY,
                  "--data", "nvidia_driver_version=580.65.06",
                  "--data", "nvidia_driver_branch=580")
    out = run.stdout
    assert run.returncode != 0
    assert "refused" in out and "GPU process" in out and "Drain the node first" in out
    assert node(ssh_config, BUSY).package("nvidia-driver").version.startswith("570.133.20-")


def test_dry_run_changes_nothing(deployed: Any, ssh_config: Path) -> None:
    shell("node1", "rm -f /etc/nccl.conf")
    dry = pyinfra("deploy.py", "--dry")
    assert dry.returncode == 0, dry.stdout[-3000:]
    assert "nccl: /etc/nccl.conf" in dry.stdout
    assert not node(ssh_config, "node1").file("/etc/nccl.conf").exists
    assert pyinfra("deploy.py").returncode == 0
    assert node(ssh_config, "node1").file("/etc/nccl.conf").exists


def test_power_poller_runs_and_the_scheduled_check_passes_the_power_group(deployed: Any) -> None:
    """pdu_monitor on the lab: the poller is active and writes its textfile; the agent's timer
    service (which loads the poller's EnvironmentFile) runs the power group, and it passes."""
    assert shell("node1", "systemctl is-active nodegate-power-poller").strip() == "active"
    shell("node1", "test -s /var/lib/node_exporter/textfile_collector/nodegate_power.prom")
    wiring = json.loads(shell("node1", "cat /etc/nodegate/node.json"))
    assert wiring["outlets"] == ["lab-pdu.outlet1"] and wiring["circuits"] == 1
    report = "/var/lib/nodegate/reports/quick-latest.json"
    # the timer's own service, as the timer starts it (a oneshot: start returns when done)
    shell("node1", f"rm -f {report}; systemctl start nodegate-health.service")
    results = {r["check"]: r["verdict"]
               for r in json.loads(shell("node1", f"cat {report}"))["results"]}
    for check in ("psu_count", "psu_redundancy", "inlet_temp"):
        assert results.get(check) == "PASS", (check, results)


# --- the bring-up under faults (docs/reliability.md, 11b) -------------------------------------


def _edit_site(edit: Any) -> str:
    """Apply ``edit`` to the lab's site mapping; returns the original text to put back."""
    import yaml

    original = SITE.read_text()
    site = yaml.safe_load(original)
    edit(site)
    SITE.write_text(yaml.safe_dump(site, sort_keys=False))
    return original


def test_the_schedule_runs_on_a_node_without_cron(deployed: Any) -> None:
    """The lab's nodes have no cron daemon (a minimal image): the deploy left the systemd
    timer enabled and active, its service loading, and its first run seen; choosing cron
    installs and enables the daemon instead, and its first run is seen too."""
    # node2 never gets cron here (node1 does below, and keeps the package)
    assert "ii " not in shell("node2", "dpkg -l cron 2>/dev/null | grep '^.. *cron ' || true")
    for name in NODES:
        assert shell(name, "systemctl is-enabled nodegate-health.timer; systemctl is-active "
                           "nodegate-health.timer").split() == ["enabled", "active"]
        assert shell(name, "cat /var/lib/nodegate/schedule-first-run").strip() == \
            "systemd-timer"
        assert shell(name, "systemctl show -p LoadState --value nodegate-health.service"
                     ).strip() == "loaded"
    try:
        cron = pyinfra("roles/agent.py", "--limit", "node1", "--data", "agent_schedule=cron",
                       "--data", "agent_interval_min=5")
        assert cron.returncode == 0, cron.stdout[-4000:]
        assert "agent: the schedule runs (cron enabled and active, first run seen)" in cron.stdout
        assert shell("node1", "dpkg-query -W -f '${Status}' cron").strip() == \
            "install ok installed"
        assert shell("node1", "systemctl is-enabled cron; systemctl is-active cron"
                     ).split() == ["enabled", "active"]
        assert shell("node1", "cat /var/lib/nodegate/schedule-first-run").strip() == "cron"
        assert shell("node1", "test -e /etc/systemd/system/nodegate-health.timer || echo gone"
                     ).strip() == "gone"
    finally:
        back = pyinfra("roles/agent.py", "--limit", "node1")
        assert back.returncode == 0, back.stdout[-4000:]
    assert shell("node1", "cat /var/lib/nodegate/schedule-first-run").strip() == "systemd-timer"


def test_a_slurm_name_typo_leaves_the_cluster_alone_and_fails_that_host(deployed: Any) -> None:
    """node2's slurm.node_name mistyped in a full Slurm run: slurm.conf is byte for byte as it
    was, slurmctld is not restarted, and node2 fails naming the typo and the node it hit; in
    a --limit run of node2 the node refuses the name itself, its schedule untouched."""
    conf = shell("slurmctl", "cat /etc/slurm/slurm.conf")
    since = shell("slurmctl", "systemctl show -p ActiveEnterTimestampMonotonic --value "
                              "slurmctld").strip()

    def typo(site: dict[str, Any]) -> None:
        site["hosts"]["node2"]["slurm"]["node_name"] = "node02"

    unit = "/etc/systemd/system/nodegate-health.service"
    schedule = shell("node2", f"cat {unit}")
    original = _edit_site(typo)
    try:
        run = pyinfra("deploy/slurm.py")
        # a --limit run has no controller: the node's own roles refuse the name
        limited = pyinfra("deploy.py", "--limit", "node2")
    finally:
        SITE.write_text(original)
    assert limited.returncode == 1, limited.stdout[-4000:]
    assert "node2: nodegate refused: slurm.node_name 'node02' is not this host's name " \
        "'node2'" in limited.stdout, limited.stdout[-4000:]
    assert shell("node2", f"cat {unit}") == schedule  # its gate still names node2
    assert run.returncode == 1, run.stdout[-4000:]
    assert re.search(r"node2: nodegate refused: Slurm node name 'node02' is new to Slurm, but "
                     r"\S+ is node 'node2' in slurm.conf", run.stdout), run.stdout[-4000:]
    assert shell("slurmctl", "cat /etc/slurm/slurm.conf") == conf
    assert shell("slurmctl", "systemctl show -p ActiveEnterTimestampMonotonic --value "
                             "slurmctld").strip() == since
    assert "node02" not in shell("slurmctl", "sinfo -h -N -o %N").split()


def test_sigint_mid_deploy_exits_3_and_the_rerun_converges(deployed: Any) -> None:
    """Ctrl-C while operations execute: exit 3 (pyinfra alone says 0), naming what each host
    had in flight; the same command again converges."""
    import signal

    proc = subprocess.Popen([str(VENV_BIN / "pyinfra"), "-y", "inventory.py", "deploy.py",
                             "--limit", "node1"], cwd=ROOT, text=True, env=pyinfra_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    seen: list[str] = []
    for line in proc.stdout:
        seen.append(line)
        if "Starting operation" in line:
            time.sleep(1)
            proc.send_signal(signal.SIGINT)
            break
    rest, _ = proc.communicate(timeout=300)
    out = "".join(seen) + rest
    assert proc.returncode == 3, out[-3000:]
    assert "nodegate: error: interrupted" in out and "(exit 3)" in out, out[-3000:]
    assert "Exiting upon user request" not in out
    again = pyinfra("deploy.py", "--limit", "node1")
    assert again.returncode == 0, again.stdout[-4000:]


def test_a_wrong_bmc_address_fails_that_host_at_bring_up(deployed: Any) -> None:
    """node2's site entry points at node1's BMC: pdu_monitor's verify reads its Redfish
    Systems (HostName node1) and fails node2 naming it; put back, it passes again."""
    import yaml

    site = yaml.safe_load(SITE.read_text())
    node1_bmc = site["hosts"]["node1"]["bmc"]["url"]

    def wrong(data: dict[str, Any]) -> None:
        data["hosts"]["node2"]["bmc"]["url"] = node1_bmc

    original = _edit_site(wrong)
    try:
        run = pyinfra("roles/pdu_monitor.py", "--limit", "node2")
    finally:
        SITE.write_text(original)
    assert run.returncode == 1, run.stdout[-4000:]
    assert "FAIL node2-bmc: manages HostName node1, not node2" in run.stdout, run.stdout[-4000:]
    back = pyinfra("roles/pdu_monitor.py", "--limit", "node2")
    assert back.returncode == 0, back.stdout[-4000:]
    assert json.loads(shell("node2", "cat /etc/nodegate/power-verified.json"))["bmcs"]


def test_a_silent_link_drop_fails_that_host_within_the_bound(deployed: Any,
                                                             ssh_config: Path) -> None:
    """node2's link goes down without a RST (its veth on the lab bridge: a pulled cable)
    while operations execute: with keepalives every 5 s and 3 unanswered allowed, node2 fails
    naming the lost connection and its operation, node1 finishes, and the run ends; the link
    back, the same command converges."""
    veth, ns = lab_config.node(2).veth, lab_config.BRIDGE_NS
    for name in NODES:
        shell(name, "rm -f /etc/nccl.conf")
    bound = ["--data", "ssh_keepalive_s=5", "--data", "ssh_keepalive_count=3"]
    # one role, not the whole bring-up: the waves are the same, the test is cheaper
    proc = subprocess.Popen([str(VENV_BIN / "pyinfra"), "-y", "inventory.py", "roles/nccl.py",
                             "--limit", "gpu_nodes", *bound], cwd=ROOT, text=True, env=pyinfra_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    seen: list[str] = []
    dropped = lost = None
    try:
        for line in proc.stdout:  # every line, timed: the failure must come within the bound
            seen.append(line)
            if dropped is None and "Starting operation" in line:
                subprocess.run(["ip", "netns", "exec", ns, "ip", "link", "set", veth, "down"],
                               check=True, timeout=30)
                dropped = time.monotonic()
            if lost is None and "connection to node2 lost during" in line:
                lost = time.monotonic()
        proc.wait(timeout=900)
    finally:
        subprocess.run(["ip", "netns", "exec", ns, "ip", "link", "set", veth, "up"],
                       check=False, timeout=30)
    out = "".join(seen)
    assert proc.returncode == 1, out[-4000:]
    assert re.search(r"connection to node2 lost during .*\(", out), out[-4000:]
    assert "Traceback" not in out and "Grand total" in out, out[-4000:]
    assert not re.search(r"\[node1\].*Error", out), out[-4000:]
    assert node(ssh_config, "node1").file("/etc/nccl.conf").exists
    # 15 s of unanswered keepalives, plus the operation's own time: not TCP's 15 minutes
    assert dropped is not None and lost is not None and lost - dropped < 90, (dropped, lost)
    again = pyinfra("roles/nccl.py", "--limit", "gpu_nodes")
    assert again.returncode == 0, again.stdout[-4000:]
    assert node(ssh_config, "node2").file("/etc/nccl.conf").exists


# last: it stops node2 mid-run and may leave the lab needing a fresh `lab up`
def test_node_stopped_mid_deploy_fails_alone(deployed: Any, ssh_config: Path) -> None:
    """node2's sshd goes away while operations execute: paramiko's EOFError fails node2 only
    (nodegate.pyinfra_compat; unpatched, pyinfra 3.10 aborted every host) and node1 finishes."""
    for name in NODES:
        shell(name, "rm -f /etc/nccl.conf /etc/nodegate/profile.json")
    env_run = subprocess.Popen(
        [str(VENV_BIN / "pyinfra"), "-y", "inventory.py", "deploy.py"], cwd=ROOT, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        env=pyinfra_env())
    # stop node2 once the run is executing operations (not on a timer: under load the
    # preparation phase can outlast any fixed delay)
    assert env_run.stdout is not None
    seen: list[str] = []
    for line in env_run.stdout:
        seen.append(line)
        if "Starting operation" in line:
            _lab("shell", "node2", "--", "systemctl poweroff --no-block", timeout=30)
            break
    rest, _ = env_run.communicate(timeout=600)
    out = "".join(seen) + rest
    try:
        assert env_run.returncode != 0, out[-3000:]
        h1 = node(ssh_config, "node1")
        assert h1.file("/etc/nccl.conf").exists and h1.file("/etc/nodegate/profile.json").exists, \
            out[-6000:]
        assert re.search(r"\[node2\].*(Error|Disconnected|failed|lost)", out, re.I), out[-3000:]
        assert "exception occurred" not in out and "Traceback" not in out, out[-3000:]
        assert "Grand total" in out, out[-3000:]  # the run went on to the end for node1
        assert not re.search(r"\[node1\].*Error", out), out[-3000:]
    finally:
        up = _lab("up", "--nodes", "2", "--fault", f"{BUSY}:foreign-process@gpu0")
        assert up.returncode == 0, up.stdout + up.stderr
        assert pyinfra("deploy.py").returncode == 0


def _slurm_state(name: str) -> tuple[str, str]:
    """(state, reason) of a node from the lab's slurmctld."""
    out = shell("slurmctl", f"sinfo -h -N -n {name} -o '%T|%E'").strip().splitlines()[0]
    state, _, reason = out.partition("|")
    return state, reason


def test_a_node_whose_nvml_library_is_gone_is_drained(deployed: Any) -> None:
    """NVML down is a result: the driver's libnvidia-ml.so.1 gone from node1 ->
    ``nodegate health`` writes a report with gpu_reachable[node] ERROR and exits 1, and
    ``nodegate gate`` drains the node (not "stale; no change" on the previous PASS)."""
    lib = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
    health = ("/opt/nodegate/venv/bin/nodegate health --quiet --color never --checks gpu,log "
              "--no-textfile --profile /etc/nodegate/profile.json")
    gate = "/opt/nodegate/venv/bin/nodegate gate --node node1"
    shell("node1", f"{health} && {gate}")  # a passing report first, node in service
    shell("slurmctl", "scontrol update NodeName=node1 State=RESUME || true")
    shell("node1", f"mv {lib} {lib}.nodegate-test")
    try:
        # the lab's board env puts the simulator on LD_LIBRARY_PATH too: empty it
        out = shell("node1", f"LD_LIBRARY_PATH= {health}; echo rc=$?")
        assert "rc=1" in out, out
        report = json.loads(shell("node1", "cat /var/lib/nodegate/reports/quick-latest.json"))
        errors = [(r["check"], r["entity"]) for r in report["results"] if r["verdict"] == "ERROR"]
        assert errors == [("gpu_reachable", "node")], report["results"]
        shell("node1", gate)
        state, reason = _slurm_state("node1")
        assert "drain" in state and reason == "nodegate: gpu_reachable[node]", (state, reason)
    finally:
        shell("node1", f"[ -e {lib}.nodegate-test ] && mv {lib}.nodegate-test {lib} || true")
        shell("node1", f"{health}; {gate}")  # the passing health check lifts its own drain
    # the controller may mark the node not responding ("idle*") until its next ping of slurmd
    deadline = time.monotonic() + 90
    while (state := _slurm_state("node1")[0]) not in ("idle", "mixed", "allocated") \
            and time.monotonic() < deadline:
        time.sleep(3)
    assert state in ("idle", "mixed", "allocated"), state
