"""The lab end to end: booted Debian hosts over real SSH, boards, disks, reboot, teardown."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nodegate.lab import config, lab

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
    assert sh("node1", "ip -4 -o addr show dev eth0").split()[3] == "10.77.7.11/24"
    # nothing but the lab /24: no default route, no resolver
    assert sh("node1", "ip route") == "10.77.7.0/24 dev eth0 proto kernel scope link src 10.77.7.11"


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
    subprocess.run([*lab.ssh_argv(config.node(1)), "systemctl reboot"], capture_output=True,
                   timeout=30, check=False)
    lab._wait_one(config.node(1), __import__("time").monotonic() + 60)
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
    assert "570.124.06-1" in sh("node2", "apt-cache madison nvidia-driver-570-server")
    assert sh("node2", state) == "fabric_state=1", sh("node2", f"cat {config.node(2).dir}/boots 2>/dev/null; grep -c gpu $NODEGATE_SIM_DIR/state; ls -la $NODEGATE_SIM_DIR")  # no FM yet
    sh("node2", f"{apt} nvidia-driver-570-server=570.124.06-1 libnvidia-ml1=570.124.06-1 "
                "nvidia-fabricmanager-570=570.133.20-1 mdadm xfsprogs >/dev/null")
    assert sh("node2", "systemctl start nvidia-fabricmanager || echo refused") == "refused"
    sh("node2", f"{apt} nvidia-driver-570-server=570.133.20-1 libnvidia-ml1=570.133.20-1 "
                ">/dev/null && apt-mark hold libnvidia-ml1 >/dev/null")
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
                                      "print(u.urlopen('http://10.77.7.1:8080/wheels/').read()"
                                      ".decode())\" | grep -o 'nodegate-[0-9.]*' | head -1")


def test_status_lists_every_host(lab_up: object) -> None:
    rows = {r.name: r for r in lab.status()}
    assert set(rows) == {"slurmctl", "node1", "node2"}
    assert all(r.state == "running" for r in rows.values())


def test_pyinfra_sees_the_lab_site(lab_up: object) -> None:
    env = {**os.environ, "NODEGATE_SITE": "lab"}
    proc = subprocess.run([str(Path(sys.executable).parent / "pyinfra"), "inventory.py",
                           "debug-inventory"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for name in ("[node1]", "[node2]", "[slurmctl]"):
        assert name in proc.stdout + proc.stderr


def test_pyinfra_runs_over_ssh(lab_up: object) -> None:
    env = {**os.environ, "NODEGATE_SITE": "lab"}
    proc = subprocess.run([str(Path(sys.executable).parent / "pyinfra"), "-y", "inventory.py",
                           "exec", "--", "cat", "/etc/hostname"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-2000:]


def test_down_leaves_nothing(lab_up: object) -> None:
    """Last in the module: everything the lab made in the kernel is gone afterwards."""
    assert lab.down() == []
    assert not (ROOT / "inventory" / "lab.yaml").exists()
    assert not any((config.lab_dir() / "hosts").glob("*"))
