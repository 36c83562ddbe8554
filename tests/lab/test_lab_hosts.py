"""The lab end to end: booted Debian hosts over real SSH, boards, disks, reboot, teardown."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nodegate_lab import cgroups, config, hosts, lab, sitefile

pytestmark = [pytest.mark.lab, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def sh(name: str, command: str) -> str:
    member = config.CONTROLLER if name == config.CONTROLLER.name else config.node(int(name[4:]))
    proc = subprocess.run([*lab.ssh_argv(member), command], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_systemd_is_running_on_every_host(lab_up: object) -> None:
    for name in ("node1", "node2", "slurmctl"):
        assert sh(name, "systemctl is-system-running --wait") == "running", \
            sh(name, "systemctl --failed --no-legend || true")


def test_hosts_have_their_own_identity(lab_up: object) -> None:
    ids = {sh(n, "cat /etc/machine-id") for n in ("node1", "node2", "slurmctl")}
    assert len(ids) == 3
    assert sh("node2", "hostname") == "node2"
    n1 = config.node(1).address
    assert sh("node1", "ip -4 -o addr show dev eth0").split()[3] == f"{n1}/24"
    # nothing but the lab /24: no default route, no resolver
    assert sh("node1", "ip route") == \
        f"{config.SUBNET_PREFIX}.0/24 dev eth0 proto kernel scope link src {n1}"


def test_each_node_sees_its_own_board(lab_up: object) -> None:
    probe = ("python3 -c \"import ctypes; l=ctypes.CDLL('libnvidia-ml.so.1'); "
             "c=ctypes.c_uint(); assert l.nvmlInit_v2()==0; l.nvmlDeviceGetCount_v2(ctypes.byref(c)); "
             "print(c.value)\"")
    assert sh("node1", probe) == "8"
    assert sh("node2", probe) == "7"  # gpu-missing@gpu2 from --fault
    assert "NVRM" in sh("node1", "cat $NODEGATE_KERNEL_LOG")


def test_virtual_nvme_disks_are_usable_block_devices(lab_up: object) -> None:
    links = sh("node1", "ls /dev/disk/by-id/").split()
    assert len(links) == config.DISKS_PER_NODE and all(x.startswith("nvme-") for x in links)
    dev = f"/dev/disk/by-id/{links[0]}"
    out = sh("node1", f"test -b $(readlink -f {dev}) && echo lab-data | dd of={dev} "
                      f"oflag=direct bs=4096 conv=sync 2>/dev/null && "
                      f"dd if={dev} bs=4096 count=1 iflag=direct 2>/dev/null | head -c 8")
    assert out == "lab-data"


def test_reboot_restarts_the_host_with_a_new_boot_id(lab_up: object) -> None:
    before = sh("node1", "cat /proc/sys/kernel/random/boot_id")
    board_before = sh("node1", "cat $NODEGATE_BOOT_ID_FILE")
    boots = config.node(1).dir / "boots"
    assert boots.read_text().strip() == "1"
    subprocess.run([*lab.ssh_argv(config.node(1)), "systemctl reboot"], capture_output=True,
                   timeout=30, check=False)
    # `systemctl reboot` returns before the host goes down: until its supervisor starts the
    # next boot, the old sshd still answers (and then refuses, while it stops)
    deadline = time.monotonic() + 120
    while boots.read_text().strip() == "1" and time.monotonic() < deadline:
        time.sleep(0.2)
    lab._wait_one(config.node(1), deadline)
    assert sh("node1", "cat /proc/sys/kernel/random/boot_id") != before
    assert sh("node1", "cat $NODEGATE_BOOT_ID_FILE") != board_before
    assert (config.node(1).dir / "boots").read_text().strip() == "2"


def test_up_again_changes_nothing(lab_up: object) -> None:
    boot_ids = {n: sh(n, "cat /proc/sys/kernel/random/boot_id") for n in ("node1", "node2")}
    again = lab.up(2, ["node2:gpu-missing@gpu2"])
    assert again.started == []
    assert {n: sh(n, "cat /proc/sys/kernel/random/boot_id") for n in boot_ids} == boot_ids


def test_mirror_serves_pinnable_nvidia_packages_and_fabric_manager(lab_up: object) -> None:
    """Real apt against the lab mirror: versions, a refused FM mismatch, a hold, an upgrade."""
    apt = "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq"
    state = "grep -m1 fabric_state $NODEGATE_SIM_DIR/state"
    sh("node2", "apt-get update -qq")
    assert "570.124.06-1" in sh("node2", "apt-cache madison nvidia-driver")
    assert sh("node2", state) == "fabric_state=1"  # no fabric manager yet: fabric not started
    # libnvidia-ml1 needs nvidia-alternative at its exact version (Debian 12's graph)
    sh("node2", f"{apt} libnvidia-ml1=570.124.06-1 nvidia-alternative=570.124.06-1 "
                "nvidia-legacy-check=570.124.06-1 "
                "nvidia-fabricmanager-570=570.133.20-1 mdadm xfsprogs >/dev/null")
    assert sh("node2", "systemctl start nvidia-fabricmanager || echo refused") == "refused"
    sh("node2", f"{apt} libnvidia-ml1=570.133.20-1 nvidia-alternative=570.133.20-1 "
                "nvidia-legacy-check=570.133.20-1 >/dev/null && apt-mark hold libnvidia-ml1 "
                ">/dev/null")
    sh("node2", "systemctl start nvidia-fabricmanager")
    assert sh("node2", f"sleep 1.5; {state}") == "fabric_state=3"
    sh("node2", "systemctl stop nvidia-fabricmanager")
    assert sh("node2", state) == "fabric_state=1"
    assert sh("node2", "apt-mark showhold") == "libnvidia-ml1"
    dev = sh("node2", "ls /dev/disk/by-id/ | head -1")
    out = sh("node2", f"mkfs.xfs -q -f /dev/disk/by-id/{dev} && mount /dev/disk/by-id/{dev} /mnt"
                      " && stat -f -c %T /mnt && umount /mnt")
    assert out == "xfs"
    assert "nodegate-" in sh("node2", "python3 -c \"import urllib.request as u; "
                                      f"print(u.urlopen('http://{config.HOST_ADDRESS}:8080/wheels/').read()"
                                      ".decode())\" | grep -o 'nodegate-[0-9.]*' | head -1")


def _sinfo(node: str) -> str:
    return sh("slurmctl", f"sinfo -h -N -n {node} -o '%T|%G|%E'")


def _wait_sinfo(node: str, wanted: str, timeout_s: float = 30.0) -> str:
    deadline = time.monotonic() + timeout_s
    state = _sinfo(node)
    while state != wanted and time.monotonic() < deadline:
        time.sleep(0.5)
        state = _sinfo(node)
    return state


def test_sinfo_on_the_controller_lists_the_nodes_drained_until_validated(lab_up: object) -> None:
    """slurmd runs on every node from boot; each starts drained with nodegate's reason."""
    assert sh("slurmctl", "systemctl is-active slurmctld munge") == "active\nactive"
    assert sh("slurmctl", "sinfo -h -N -o %N").split() == ["node1", "node2"]
    for node in ("node1", "node2"):
        assert sh(node, "systemctl is-active slurmd munge") == "active\nactive"
        # "drained" without "*": the node's slurmd registered (responding), gres from mknod
        assert _wait_sinfo(node, "drained|gpu:8|nodegate: not validated") == \
            "drained|gpu:8|nodegate: not validated"


def test_lab_shell_runs_sinfo_from_the_root_namespace(lab_up: object) -> None:
    proc = subprocess.run([sys.executable, "-m", "nodegate_lab", "shell", "slurmctl",
                           "--", "sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["node1", "drained", "node2", "drained"]


def test_scontrol_on_a_node_reads_and_resumes_it(lab_up: object) -> None:
    """What ``nodegate gate`` does on the node: read its state, lift nodegate's drain."""
    line = sh("node1", "scontrol show node node1 -o")
    assert "State=IDLE+DRAIN" in line and "Reason=nodegate: not validated" in line
    sh("node1", "scontrol update NodeName=node1 State=RESUME")
    assert _wait_sinfo("node1", "idle|gpu:8|none") == "idle|gpu:8|none"
    # a re-run of the Slurm roles (as `lab up` runs them) drains only nodes new to slurm.conf:
    # node1 stays resumed
    lab._deploy_slurm(sitefile.site_path(), [config.node(1), config.node(2)])
    assert _sinfo("node1") == "idle|gpu:8|none"
    sh("node1", "scontrol update NodeName=node1 State=DRAIN 'Reason=nodegate: not validated'")
    assert _sinfo("node1").startswith("drained|")


def _power_read(*args: str) -> list[dict[str, object]]:
    from nodegate_lab import services

    env = {**os.environ, **services.lab_secrets()}
    proc = subprocess.run([sys.executable, "-m", "nodegate.cli", "power", "read", "--json",
                           *args], env=env, capture_output=True, text=True, timeout=90,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return __import__("json").loads(proc.stdout)  # type: ignore[no-any-return]


def _value(device: dict[str, object], entity: str, quantity: str) -> object:
    readings = device["readings"]
    assert isinstance(readings, list)
    return next(r["value"] for r in readings
                if r["entity"] == entity and r["quantity"] == quantity)


def test_pdu_serves_the_real_apc_recording(lab_up: object) -> None:
    [pdu] = _power_read("--pdu", f"snmp://{config.PDU_ADDRESS}:{config.PDU_PORT}"
                        "?community=env:NODEGATE_LAB_PDU_COMMUNITY",
                        "--model", "apc-rpdu2")
    assert pdu["up"] is True, pdu["error"]
    assert float(_value(pdu, "outlet1", "power")) >= 0  # type: ignore[arg-type]
    assert float(_value(pdu, "device", "power")) > 0  # type: ignore[arg-type]


def _bmc_power(*names: str) -> list[float]:
    from nodegate_lab import services

    args: list[str] = []
    for name in names:
        args += ["--bmc", f"https://root@{config.node(int(name[4:])).bmc_address}:8443"]
    devices = _power_read(*args, "--bmc-password", "env:NODEGATE_LAB_BMC_PASSWORD",
                          "--ca-bundle", str(services.bmc_ca_path()))  # TLS verified
    assert all(d["up"] is True for d in devices), [d["error"] for d in devices]
    return [float(_value(d, "node", "power")) for d in devices]  # type: ignore[arg-type]


def test_each_node_has_a_redfish_bmc_following_its_board(
        lab_up: object, monkeypatch: pytest.MonkeyPatch) -> None:
    from nodegate.sim import runtime

    # base 1200 W + the simulated GPUs' draw read through NVML: node2 has one GPU fewer
    p1, p2 = _bmc_power("node1", "node2")
    assert p1 > 1200 and 1200 < p2 < p1
    # load node1's board (what a burn-in on node1 does): its BMC's node power rises
    monkeypatch.setenv(runtime.ENV_SIM_DIR, str(config.node(1).dir / "board"))
    for gpu in range(8):
        runtime.set_load(gpu, 100)
    try:
        deadline = time.monotonic() + 20
        loaded = p1
        while loaded < p1 + 1000 and time.monotonic() < deadline:
            time.sleep(1)
            [loaded] = _bmc_power("node1")
        assert loaded > p1 + 1000, (p1, loaded)
        [other] = _bmc_power("node2")
        assert other < p2 + 50  # node2's board is not loaded
    finally:
        for gpu in range(8):
            runtime.clear_load(gpu)


def test_status_lists_every_host(lab_up: object) -> None:
    from nodegate_lab import services

    rows = {r.name: r for r in lab.status()}
    assert set(rows) == {"slurmctl", "node1", "node2"}
    assert all(r.state == "running" for r in rows.values())
    assert "slurmctld + munge active" in rows["slurmctl"].detail
    assert "2 nodes" in rows["slurmctl"].detail
    svc = {s.name: s.state for s in services.status([config.node(1), config.node(2)])}
    assert svc == {"mirror": "running", "pdu": "running", "bmc-node1": "running",
                   "bmc-node2": "running"}


def test_site_file_describes_the_lab(lab_up: object) -> None:
    from nodegate.site import load_site

    site = load_site(str(sitefile.site_path()))
    assert [h.name for h in site.gpu_nodes()] == ["node1", "node2"]
    node1 = site.hosts["node1"].data
    assert node1["pdus"][0]["outlets"] == [1] and node1["bmc"]["url"].startswith("https://")
    assert node1["pdus"][0]["model"] == "apc-rpdu2"
    assert node1["bmc"]["verify_tls"] is True and Path(node1["bmc"]["ca_bundle"]).is_file()
    # the CA is at the same path on the node (a poller there verifies with it too)
    assert sh("node1", f"test -s {node1['bmc']['ca_bundle']} && echo ok") == "ok"
    assert node1["sim_scenario"] == "h100-hgx"
    assert site.hosts["node2"].data["sim_scenario"] == "h100-hgx+gpu-missing@gpu2"
    assert node1["nvme"]["devices"][0].startswith("/dev/disk/by-id/nvme-")


def test_pyinfra_sees_the_lab_site(lab_up: object) -> None:
    env = {**os.environ, "NODEGATE_SITE": "lab" if config.INSTANCE == 0 else
           str(sitefile.site_path())}
    proc = subprocess.run([str(Path(sys.executable).parent / "pyinfra"), "inventory.py",
                           "debug-inventory"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for name in ("[node1]", "[node2]", "[slurmctl]"):
        assert name in proc.stdout + proc.stderr


RACE = """printf '[Service]\\nType=oneshot\\nExecStart=/bin/true\\n' \\
    > /run/systemd/system/nodegate-race.service
systemctl daemon-reload; f=0
for i in $(seq 30); do systemctl reset-failed nodegate-race.service 2>/dev/null
  systemctl start nodegate-race.service 2>/dev/null || f=$((f+1)); done
rm -f /run/systemd/system/nodegate-race.service; systemctl daemon-reload; echo $f"""


def test_hosts_keep_their_unit_cgroups_apart(lab_up: object) -> None:
    """Before the per-host cgroups, every nspawn started in the root cgroup, so all guests shared
    one cgroup tree and a unit running on one host was visible (and removable) on another."""
    find = "find /sys/fs/cgroup -maxdepth 3 -type d -name slurmctld.service"
    assert sh("slurmctl", find)
    for name in ("node1", "node2"):
        assert sh(name, find) == "", f"{name} sees the controller's slurmctld cgroup"
    for index in (1, 2):
        member = config.node(index)
        pid = hosts.nspawn_pid(member)
        assert pid is not None
        assert f":/{cgroups.host_group(member.name)}/" in Path(f"/proc/{pid}/cgroup").read_text()


def test_the_same_oneshot_started_on_every_host_at_once_never_fails(lab_up: object) -> None:
    """The race itself, forced: 30 starts of one short oneshot on all hosts concurrently
    (before the fix: 219/CGROUP "Failed to attach to cgroup", 16-30 of 30 failed)."""
    procs = {name: subprocess.Popen([*lab.ssh_argv(member), RACE], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
             for name, member in (("node1", config.node(1)), ("node2", config.node(2)),
                                  ("slurmctl", config.CONTROLLER))}
    failed = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err
        failed[name] = int(out.strip().splitlines()[-1])
    assert failed == {"node1": 0, "node2": 0, "slurmctl": 0}


def test_pyinfra_runs_over_ssh(lab_up: object) -> None:
    env = {**os.environ, "NODEGATE_SITE": "lab" if config.INSTANCE == 0 else
           str(sitefile.site_path())}
    proc = subprocess.run([str(Path(sys.executable).parent / "pyinfra"), "-y", "inventory.py",
                           "exec", "--", "cat", "/etc/hostname"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-2000:]


def test_down_leaves_nothing(lab_up: object) -> None:
    """Last in the module: everything the lab made in the kernel is gone afterwards."""
    assert lab.down() == []
    assert lab.leftovers() == []
    assert not sitefile.site_path().exists()
    assert not list((config.lab_dir() / "services").glob("*.pid"))
    # and as the kernel's own tools see it
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True,
                           check=True).stdout
    assert not [ln for ln in links.splitlines()
                if config.owns_link(ln.split(":")[1].strip().split("@")[0])]
    assert config.NS_PREFIX not in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                                  text=True, check=True).stdout
    # with a trailing slash: /var/lib/nodegate-lab must not match another instance's -lab2
    assert f"{config.lab_dir()}/" not in subprocess.run(["losetup", "-l"], capture_output=True,
                                                       text=True, check=True).stdout
    assert f"{config.lab_dir()}/" not in Path("/proc/mounts").read_text()
    assert not any((config.lab_dir() / "hosts").glob("*"))
