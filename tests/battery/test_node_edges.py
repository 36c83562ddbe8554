"""The node side at its edges: one node identity, a full report disk still drains,
a counter that cannot go back, every path through the one reader, names that are not text,
no orphan NVML reader.

Each runs the real CLI as a process on the simulated H100 board (``nodegate sim run``); the
gate's Slurm is a stateful fake ``scontrol`` on PATH that records every update, as the
suite fakes Slurm elsewhere (a real slurmctld is in tests/cluster).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT

PY = sys.executable
SICK = "h100-hgx+ecc-dbe@gpu0"
HEALTHY = "h100-hgx"
PROFILE = "sim-h100-hgx"

#: ``scontrol show node -o NAME`` / ``update NodeName=NAME State=... Reason=...`` over a
#: JSON state file; a node other than the one it knows is "not found", as Slurm says.
FAKE_SCONTROL = r'''#!{py}
import json, sys
from pathlib import Path
state_file = Path({state!r})
state = json.loads(state_file.read_text())
args = sys.argv[1:]
if args[:2] == ["show", "node"]:
    name = args[-1]
    if name != state["node"]:
        print(f"Node {{name}} not found", file=sys.stderr)
        sys.exit(1)
    flags = "+DRAIN" if state["drained"] else ""
    reason = f" Reason={{state['reason']}} [root@2026-12-07T10:00:00]" if state["reason"] else ""
    print(f"NodeName={{name}} Arch=x86_64 State=IDLE{{flags}} Partitions=gpu{{reason}}")
elif args[:1] == ["update"]:
    fields = dict(a.split("=", 1) for a in args[1:])
    if fields["NodeName"] != state["node"]:
        sys.exit(1)
    if fields.get("State") == "DRAIN":
        state["drained"], state["reason"] = True, fields.get("Reason", "")
    elif fields.get("State") == "RESUME":
        state["drained"], state["reason"] = False, ""
    state["updates"].append(args[1:])
    state_file.write_text(json.dumps(state))
else:
    sys.exit(2)
'''


class FakeSlurm:
    """A one-node Slurm whose scontrol is the script above."""

    def __init__(self, folder: Path, node: str) -> None:
        self.bin = folder / "bin"
        self.bin.mkdir(parents=True, exist_ok=True)
        self.state = folder / "slurm-state.json"
        self.state.write_text(json.dumps({"node": node, "drained": False, "reason": "",
                                          "updates": []}))
        script = self.bin / "scontrol"
        script.write_text(FAKE_SCONTROL.format(py=PY, state=str(self.state)))
        script.chmod(0o755)

    def drained(self) -> tuple[bool, str]:
        data = json.loads(self.state.read_text())
        return data["drained"], data["reason"]


def env_for(folder: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SLURMD_NODENAME",
                                                            "NODEGATE_NODE_NAME")}
    path = f"{folder / 'bin'}{os.pathsep}{Path(PY).parent}{os.pathsep}{env['PATH']}"
    return {**env, "PATH": path, "NODEGATE_LOCK_FILE": str(folder / "battery.lock"),
            "NODEGATE_PROFILE": PROFILE, "NODEGATE_TEXTFILE_DIR": str(folder / "textfile"),
            **extra}


def nodegate(*argv: str, env: dict[str, str], spec: str | None = None,
             prefix: tuple[str, ...] = (), timeout: float = 120
             ) -> subprocess.CompletedProcess[str]:
    cmd = [PY, "-m", "nodegate.cli", *argv]
    if spec is not None:
        cmd = [PY, "-m", "nodegate.cli", "sim", "run", spec, "--", *cmd]
    return subprocess.run([*prefix, *cmd], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=timeout, check=False)


def health(report_dir: Path, env: dict[str, str], spec: str = SICK, *extra: str,
           prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return nodegate("health", "--profile", PROFILE, "--checks", "gpu", "--report-dir",
                    str(report_dir), "--no-textfile", "--quiet", *extra, env=env, spec=spec,
                    prefix=prefix)


def _uts_prefix(hostname: str) -> tuple[str, ...]:
    """Run under a host name of our own (a UTS namespace), or skip where that is not allowed."""
    probe = subprocess.run(["unshare", "--uts", "sh", "-c", f"hostname {hostname}"],
                           capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"cannot set a host name in a UTS namespace: {probe.stderr!r}")
    return ("unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', hostname)


# --- 1. one node, two names ----------------------------------------------------------------


def test_an_fqdn_host_known_to_slurm_by_its_short_name_is_drained(tmp_path: Path) -> None:
    """The cron gate (``nodegate health; nodegate gate --node gpu-b01``) on a host whose
    uname is ``gpu-b01.dc1.example.net``: main said "no report for node gpu-b01", exit 2,
    and the node with an ECC DBE stayed in service."""
    prefix = _uts_prefix("gpu-b01.dc1.example.net")
    slurm = FakeSlurm(tmp_path, "gpu-b01")
    env = env_for(tmp_path)
    reports = tmp_path / "reports"
    done = health(reports, env, prefix=prefix)
    assert done.returncode == 1, done.stderr
    written = json.loads((reports / "quick-latest.json").read_text())
    assert written["labels"]["host"] == "gpu-b01.dc1.example.net"
    assert written["machine_id"]
    gate = nodegate("gate", "--node", "gpu-b01", "--report-dir", str(reports), env=env,
                    prefix=prefix)
    assert gate.returncode == 0, gate.stderr
    assert slurm.drained() == (True, "nodegate: quick failed ecc_uncorrectable[gpu0]") or \
        slurm.drained()[0], gate.stderr
    assert "judged as this node's by its machine id" in gate.stderr


def test_the_slurm_name_is_in_the_report(tmp_path: Path) -> None:
    env = env_for(tmp_path, SLURMD_NODENAME="gpu-b01")
    done = health(tmp_path / "r", env)
    assert done.returncode == 1, done.stderr
    written = json.loads((tmp_path / "r" / "quick-latest.json").read_text())
    assert written["node"] == "gpu-b01"
    assert written["labels"]["slurm_node"] == "gpu-b01"
    assert written["labels"]["host"] == os.uname().nodename


def test_the_healthcheck_gate_passes_the_slurm_name_to_health(tmp_path: Path) -> None:
    slurm = FakeSlurm(tmp_path, "gpu-b01")
    env = env_for(tmp_path, SLURMD_NODENAME="gpu-b01")
    reports = tmp_path / "reports"
    gate = nodegate("gate", "--healthcheck", "--report-dir", str(reports), env=env,
                    spec=SICK)
    assert gate.returncode == 0, gate.stderr
    assert slurm.drained()[0], gate.stderr
    written = json.loads((reports / "quick-latest.json").read_text())
    assert written["labels"]["slurm_node"] == "gpu-b01"


# --- 2. a full report disk still drains ------------------------------------------------------


@pytest.fixture
def small_fs(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A 2 MiB tmpfs mounted by the test (unmounted after), or a skip where mount is not
    permitted."""
    folder = tmp_path / "reports"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(folder)],
                             capture_output=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr!r}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def _fill(folder: Path) -> None:
    with (folder / "filler").open("wb") as handle:
        try:
            while True:
                handle.write(b"\0" * 65536)
                handle.flush()
        except OSError:
            pass
    for i in range(64):  # the last blocks, a few bytes at a time
        try:
            (folder / f"crumb{i}").write_bytes(b"x" * 4096)
        except OSError:
            break


def test_a_fail_on_a_full_report_disk_exits_1_naming_the_disk(small_fs: Path,
                                                               tmp_path: Path) -> None:
    env = env_for(tmp_path)
    assert health(small_fs, env, HEALTHY).returncode == 0
    _fill(small_fs)
    done = health(small_fs, env)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert str(small_fs) in done.stderr and "could not be written" in done.stderr


def test_the_healthcheck_gate_drains_a_sick_node_whose_report_disk_is_full(
        small_fs: Path, tmp_path: Path) -> None:
    slurm = FakeSlurm(tmp_path, "n1")
    env = env_for(tmp_path, SLURMD_NODENAME="n1")
    assert health(small_fs, env, HEALTHY).returncode == 0  # the last report: a PASS
    _fill(small_fs)
    gate = nodegate("gate", "--healthcheck", "--report-dir", str(small_fs), env=env,
                    spec=SICK)
    assert gate.returncode == 0, gate.stderr
    drained, reason = slurm.drained()
    assert drained, gate.stderr
    assert "ecc" in reason, reason


def test_the_cron_gate_drains_a_node_whose_report_disk_is_full(small_fs: Path,
                                                               tmp_path: Path) -> None:
    slurm = FakeSlurm(tmp_path, "n1")
    env = env_for(tmp_path, SLURMD_NODENAME="n1")
    assert health(small_fs, env, HEALTHY).returncode == 0
    _fill(small_fs)
    gate = nodegate("gate", "--node", "n1", "--report-dir", str(small_fs), env=env)
    assert gate.returncode == 0, gate.stderr
    drained, reason = slurm.drained()
    assert drained and "disk full" in reason, (reason, gate.stderr)


# --- 3. a counter that cannot go back ------------------------------------------------------


def test_a_counter_set_back_does_not_number_a_fail_below_a_pass(tmp_path: Path) -> None:
    slurm = FakeSlurm(tmp_path, "n1")
    env = env_for(tmp_path, SLURMD_NODENAME="n1")
    reports = tmp_path / "reports"
    for _ in range(3):
        assert health(reports, env, HEALTHY).returncode == 0
    passed = json.loads((reports / "quick-latest.json").read_text())["sequence"]
    (reports / ".sequence").write_text("1\n")  # restored from a backup
    assert health(reports, env).returncode == 1
    failed = json.loads((reports / "quick-latest.json").read_text())["sequence"]
    assert failed > passed
    gate = nodegate("gate", "--node", "n1", "--report-dir", str(reports), env=env)
    assert gate.returncode == 0, gate.stderr
    assert slurm.drained()[0], gate.stderr


def test_the_gate_orders_one_boots_reports_by_boot_time(tmp_path: Path) -> None:
    """A lower-sequence report of the same boot that finished later (a counter set back on
    a nodegate that still trusted it) is the newer one: its FAIL drains."""
    slurm = FakeSlurm(tmp_path, "n1")
    env = env_for(tmp_path, SLURMD_NODENAME="n1")
    reports = tmp_path / "reports"
    assert nodegate("validate", "--level", "standard", "--profile", PROFILE, "--checks",
                    "gpu", "--report-dir", str(reports), "--no-textfile", "--quiet",
                    env=env, spec=HEALTHY).returncode in (0, 1)
    assert health(reports, env).returncode == 1
    latest = reports / "quick-latest.json"
    data = json.loads(latest.read_text())
    standard = json.loads((reports / "standard-latest.json").read_text())
    standard["boot_id"] = data["boot_id"]  # each simulated run has a boot of its own
    assert data["boottime_s"] > standard["boottime_s"]
    data["sequence"] = 1  # as main numbered it after `.sequence` went back to 0
    standard["sequence"] = 5
    for path, value in ((latest, data), (reports / "standard-latest.json", standard)):
        path.unlink()
        path.write_text(json.dumps(value))
        summary = path.with_name(path.name[:-5] + ".summary.json")
        summary.unlink(missing_ok=True)
    gate = nodegate("gate", "--node", "n1", "--report-dir", str(reports), env=env)
    assert gate.returncode == 0, gate.stderr
    assert slurm.drained()[0], gate.stderr
    assert "sequence counter went back" in gate.stderr


# --- 4. every path through the one reader ---------------------------------------------------


@pytest.mark.parametrize("variable", ["NODEGATE_BOOT_ID_FILE", "NODEGATE_MACHINE_ID_FILE"])
@pytest.mark.parametrize("what", ["fifo", "binary"])
def test_an_id_file_that_is_no_file_is_a_clear_error(tmp_path: Path, variable: str,
                                                      what: str) -> None:
    path = tmp_path / "id"
    if what == "fifo":
        os.mkfifo(path)
    else:
        path.write_bytes(os.urandom(1024 * 1024))
    env = env_for(tmp_path)
    cmd = [PY, "-m", "nodegate.cli", "sim", "run", SICK, "--", "sh", "-c",
           f'{variable}={path} exec "$0" "$@"', PY, "-m", "nodegate.cli", "health",
           "--profile", PROFILE, "--checks", "gpu", "--report-dir", str(tmp_path / "r"),
           "--no-textfile", "--quiet"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=60, check=False)
    # bad input (2) before the board is judged; the machine id is read where the report is
    # numbered, after the FAIL was judged: that verdict's 1, the report unwritten
    assert done.returncode == (2 if variable == "NODEGATE_BOOT_ID_FILE" else 1), done.stderr
    assert "Traceback" not in done.stderr and str(path) in done.stderr
    assert variable in done.stderr


def test_a_fifo_lock_file_is_refused_naming_it(tmp_path: Path) -> None:
    lock = tmp_path / "lock"
    os.mkfifo(lock)
    done = health(tmp_path / "r", env_for(tmp_path, NODEGATE_LOCK_FILE=str(lock)))
    assert done.returncode == 3, done.stderr
    assert "internal error" not in done.stderr
    assert str(lock) in done.stderr and "FIFO" in done.stderr


def test_a_fifo_node_wiring_file_is_error_not_skip(tmp_path: Path) -> None:
    from nodegate.battery.power import STATIC_CHECKS, run_static
    from nodegate.profiles.installed import select_profile
    from nodegate.results import Verdict

    node_file = tmp_path / "node.json"
    os.mkfifo(node_file)
    mp = pytest.MonkeyPatch()
    mp.setenv("NODEGATE_NODE_FILE", str(node_file))
    try:
        results = run_static(select_profile(PROFILE))
    finally:
        mp.undo()
    assert [r.check for r in results] == list(STATIC_CHECKS)
    assert {r.verdict for r in results} == {Verdict.ERROR}
    assert "FIFO" in results[0].evidence["reason"]


def test_a_fifo_at_the_fleet_cache_path_is_not_waited_on(tmp_path: Path) -> None:
    from nodegate.fleet.read import SummaryCache

    path = tmp_path / "cache.marshal"
    os.mkfifo(path)
    started = time.monotonic()
    assert SummaryCache(path).load() == {}
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("variable", ["NODEGATE_REPORT_DIR", "NODEGATE_TEXTFILE_DIR",
                                      "NODEGATE_LOCK_FILE", "NODEGATE_REMEDIATION_DIR",
                                      "NODEGATE_CACHE_DIR"])
def test_an_empty_path_variable_is_unset(variable: str, monkeypatch: pytest.MonkeyPatch
                                         ) -> None:
    from nodegate.battery_lock import default_lock_path
    from nodegate.paths import cache_dir
    from nodegate.remediation.state import default_state_dir
    from nodegate.report.outputs import default_report_dir, default_textfile_dir

    read = {"NODEGATE_REPORT_DIR": default_report_dir,
            "NODEGATE_TEXTFILE_DIR": default_textfile_dir,
            "NODEGATE_LOCK_FILE": default_lock_path,
            "NODEGATE_REMEDIATION_DIR": default_state_dir,
            "NODEGATE_CACHE_DIR": cache_dir}[variable]
    monkeypatch.delenv(variable, raising=False)
    unset = read()
    monkeypatch.setenv(variable, "")
    assert read() == unset
    assert str(read()) not in ("", ".")


# --- 5. names that are not text ------------------------------------------------------------


def test_a_node_name_that_is_not_text_is_replaced_and_said(tmp_path: Path) -> None:
    env = env_for(tmp_path)
    argv = [PY, "-m", "nodegate.cli", "sim", "run", SICK, "--", PY, "-m", "nodegate.cli",
            "health", "--profile", PROFILE, "--checks", "gpu", "--report-dir",
            str(tmp_path / "r"), "--no-textfile", "--quiet",
            b"--node-name=n\xff\x1b[2J1".decode("utf-8", "surrogateescape")]
    done = subprocess.run([os.fsencode(a) for a in argv], capture_output=True, env=env,
                          cwd=ROOT, timeout=120, check=False)
    assert done.returncode == 1, done.stderr
    written = json.loads((tmp_path / "r" / "quick-latest.json").read_text())
    assert written["node"] == "n??[2J1"
    assert "not printable" in written["labels"]["names"]


def test_the_text_fleet_view_escapes_names(tmp_path: Path) -> None:
    """A report written elsewhere (an older nodegate, a hostile file on the bastion) whose
    node name holds an ANSI sequence and a newline: printed escaped, no forged row."""
    env = env_for(tmp_path)
    reports = tmp_path / "r"
    assert health(reports, env).returncode == 1
    forged = "n1\x1b[2J\nFAKE: every node PASS"
    latest = reports / "quick-latest.json"
    data = json.loads(latest.read_text())
    data["node"] = forged
    data["labels"] = {**data.get("labels", {}), "slurm_node": forged}
    for path in reports.glob("*.json"):
        path.unlink()
    (reports / "quick-20261207T000000Z.json").write_text(json.dumps(data))
    view = nodegate("report", str(reports), "--no-cache", env=env)
    assert "FAKE" in view.stdout, view.stderr  # the name is shown ...
    assert "\x1b" not in view.stdout  # ... escaped
    assert not any(line.startswith("FAKE") for line in view.stdout.splitlines())


# --- 6. no orphans -------------------------------------------------------------------------


def _descendants(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[3]) == pid:  # process group of the run
            out.append(int(entry.name))
    return out


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_killing_health_during_a_hung_nvml_read_leaves_no_process(tmp_path: Path,
                                                                   sig: int) -> None:
    env = env_for(tmp_path)
    # the sim runner execs nothing: health runs as its child; all in one new process group
    proc = subprocess.Popen(
        [PY, "-m", "nodegate.cli", "sim", "run", "h100-hgx+nvml-hang@gpu0", "--", PY, "-m",
         "nodegate.cli", "health", "--profile", PROFILE, "--checks", "gpu", "--report-dir",
         str(tmp_path / "r"), "--no-textfile", "--nvml-timeout", "60"],
        env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        health_pid = None
        while time.monotonic() < deadline:  # health and its forked reader both running
            group = _descendants(proc.pid)
            cmdlines = {p: _cmdline(p) for p in group}
            runs = [p for p, c in cmdlines.items() if "health" in c and p != proc.pid]
            if len(runs) >= 2:
                health_pid = min(runs)
                break
            time.sleep(0.2)
        assert health_pid is not None, "health never forked its NVML reader"
        time.sleep(1.0)
        os.kill(health_pid, sig)
        proc.wait(timeout=30)
        end = time.monotonic() + 10
        while _descendants(proc.pid) and time.monotonic() < end:
            time.sleep(0.1)
        assert _descendants(proc.pid) == [], [_cmdline(p) for p in _descendants(proc.pid)]
        if sig == signal.SIGTERM:
            err = proc.stderr.read().decode() if proc.stderr else ""
            assert "terminated by SIGTERM" in err, err
            assert proc.returncode == 3, err
    finally:
        for pid in _descendants(proc.pid):
            os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""
