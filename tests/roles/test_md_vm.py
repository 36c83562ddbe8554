"""The nvme role's real mdadm RAID0 path, end-to-end on a kernel that has md.

The lab's containers share this machine's kernel, which has no md, so there the role runs the
single-disk layout. Here ``nodegate_lab.mdvm`` boots Debian 12's own kernel under qemu (KVM
when /dev/kvm works, else TCG) with two emulated NVMe disks; the real role runs over SSH
(``pyinfra -y inventory.py roles/nvme.py``, the VM's site file), testinfra reads the result,
a second deploy must change nothing, and after a reboot from the VM's own /boot (the
initramfs the role rebuilt) the array is back under its name and mounted, the sentinel intact.

The tests share one VM and run in file order (deploy, checks, redeploy, reboot, an array
stopped and assembled again); tests/storage/test_nvme_vm.py then takes the same VM
(tests/shared_md_vm.py), so a run boots it once for both files.
"""

from __future__ import annotations

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

from nodegate_lab import mdvm
from tests import shared_md_vm

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
ARRAY = "/dev/md/nodegate0"
MOUNT = "/raid"
CHUNK_KIB = 512  # roles/defaults.py nvme_chunk_kib
TOOLS = ("qemu-system-x86_64", "mmdebstrap", "mkfs.ext4", "debugfs", "setpriv", "ssh",
         "ssh-keygen", "chroot")
MISSING = [t for t in TOOLS if shutil.which(t) is None]
SENTINEL = f"{MOUNT}/nodegate-md-sentinel"

pytestmark = [
    pytest.mark.lab, pytest.mark.slow, pytest.mark.timeout(3600),
    pytest.mark.skipif(os.geteuid() != 0, reason="the md VM needs root (mmdebstrap, chroot)"),
    pytest.mark.skipif(bool(MISSING), reason=f"missing {', '.join(MISSING)}: install "
                       "lab/src/nodegate_lab/host-packages.txt (scripts/setup-host.sh)"),
]

TIMES: dict[str, float] = {}
TOKEN = uuid.uuid4().hex


def pyinfra(vm: mdvm.VM) -> subprocess.CompletedProcess[str]:
    """``pyinfra -y -vv inventory.py roles/nvme.py`` on the VM's site (-vv prints every
    command it runs, so the output shows whether ``mdadm --create`` ran)."""
    env = dict(os.environ, NODEGATE_SITE=str(vm.site_file))
    return subprocess.run([str(VENV_BIN / "pyinfra"), "-y", "-vv", "inventory.py",
                           "roles/nvme.py"], cwd=ROOT, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=900,
                          check=False)


def totals(out: str) -> tuple[int, int, int]:
    """(success, error, no change) of pyinfra's ``Grand total`` row ("-" is 0)."""
    match = re.search(r"Grand total\s+\d+\s+(\S+)\s+(\S+)\s+(\S+)", out)
    assert match, out[-3000:]
    s, e, n = (0 if v == "-" else int(v) for v in match.groups())
    return s, e, n


def _timed(name: str, started: float) -> None:
    TIMES[name] = round(time.monotonic() - started, 1)


@pytest.fixture(scope="module")
def vm(request: pytest.FixtureRequest) -> Iterator[mdvm.VM]:
    """The group's shared VM (tests/shared_md_vm.py), one no test has touched: this file goes
    first in the group, and after another file a new VM boots."""
    started = time.monotonic()
    try:
        with shared_md_vm.shared(request) as machine:
            yield machine
    finally:
        TIMES["total"] = round(time.monotonic() - started, 1)
        print(f"\nmd VM timings (s): {TIMES}; shared VM: {shared_md_vm.TIMES}")


@pytest.fixture(scope="module")
def first_deploy(vm: mdvm.VM) -> subprocess.CompletedProcess[str]:
    started = time.monotonic()
    result = pyinfra(vm)
    _timed("first deploy", started)
    assert result.returncode == 0, result.stdout[-5000:]
    return result


def node(vm: mdvm.VM) -> Any:
    """testinfra over the VM's key and known_hosts (strict), no ssh control socket."""
    import testinfra

    config = vm.dir / "ssh_config"
    config.write_text(f"Host {mdvm.HOSTNAME}\n  HostName 127.0.0.1\n  Port {vm.port}\n"
                      f"  User root\n  IdentityFile {vm.key}\n  IdentitiesOnly yes\n"
                      f"  UserKnownHostsFile {vm.known_hosts}\n  StrictHostKeyChecking yes\n"
                      "  BatchMode yes\n  ControlMaster no\n")
    return testinfra.get_host(f"ssh://{mdvm.HOSTNAME}", ssh_config=str(config),
                              controlpersist=0, timeout=30)


def members(h: Any, vm: mdvm.VM) -> list[str]:
    """Kernel names (nvme0n1...) of the by-id disks in the site file."""
    return [h.check_output(f"readlink -f {d}").removeprefix("/dev/") for d in vm.disk_ids]


def assert_array_active(h: Any, vm: mdvm.VM) -> str:
    """/proc/mdstat: our array active raid0 over both disks; returns its kernel name."""
    kernel = h.check_output(f"readlink -f {ARRAY}").removeprefix("/dev/")
    mdstat = h.file("/proc/mdstat").content_string
    line = re.search(rf"^{kernel} : (.*)$", mdstat, re.M)
    assert line, mdstat
    assert line.group(1).startswith("active raid0 "), mdstat
    found = sorted(re.findall(r"(\w+)\[\d+\]", line.group(1)))
    assert found == sorted(members(h, vm)), mdstat
    return str(kernel)


def md_uuid(h: Any) -> str:
    export = h.check_output(f"mdadm --detail --export {ARRAY}")
    match = re.search(r"^MD_UUID=(\S+)$", export, re.M)
    assert match, export
    return match.group(1)


def test_first_deploy_creates_the_array(first_deploy: subprocess.CompletedProcess[str]) -> None:
    out = first_deploy.stdout
    success, error, _ = totals(out)
    assert error == 0 and success > 0, out[-3000:]
    assert "mdadm --create" in out  # what the second run must not contain
    assert "mkfs.xfs" in out and "update-initramfs -u" in out


def test_array_filesystem_and_mount(first_deploy: Any, vm: mdvm.VM) -> None:
    h = node(vm)
    kernel = assert_array_active(h, vm)
    uuid_ = md_uuid(h)
    # mdadm.conf names the array by UUID; without it the array comes back as md127
    conf = h.file("/etc/mdadm/mdadm.conf").content_string
    assert re.search(rf"^ARRAY {re.escape(ARRAY)} .*UUID={uuid_}", conf, re.M), conf
    # the initramfs in /boot (what the next boot loads) carries mdadm and that mdadm.conf
    initrd = f"/boot/initrd.img-{vm.kernel}"
    listing = h.check_output(f"lsinitramfs {initrd}")
    assert re.search(r"sbin/mdadm$", listing, re.M) and "raid0.ko" in listing
    unpacked = h.check_output(
        f"d=$(mktemp -d); unmkinitramfs {initrd} $d >/dev/null && "
        "cat $(find $d -path '*etc/mdadm/mdadm.conf'); rm -rf $d")
    assert re.search(rf"^ARRAY {re.escape(ARRAY)} .*UUID={uuid_}", unpacked, re.M), unpacked
    # xfs striped like the array: su = chunk (512 KiB = 128 4-KiB blocks), sw = 2 disks
    info = h.check_output(f"xfs_info {MOUNT}")
    geometry = re.search(r"sunit=(\d+)\s+swidth=(\d+) blks", info)
    assert geometry, info
    bsize = int(re.search(r"^data\s+=\s+bsize=(\d+)", info, re.M).group(1))  # type: ignore[union-attr]
    sunit, swidth = int(geometry.group(1)), int(geometry.group(2))
    assert sunit * bsize == CHUNK_KIB * 1024 and swidth == 2 * sunit, info
    # mounted by the file system's UUID through the systemd mount unit, noatime,nofail
    fs_uuid = h.check_output(f"blkid -s UUID -o value {ARRAY}")
    unit = h.file("/etc/systemd/system/raid.mount").content_string
    assert f"\nWhat=/dev/disk/by-uuid/{fs_uuid}\n" in unit, unit
    options = re.search(r"^Options=(\S+)$", unit, re.M)
    assert options and {"noatime", "nofail"} <= set(options.group(1).split(",")), unit
    assert h.service("raid.mount").is_enabled and h.service("raid.mount").is_running
    mount = h.mount_point(MOUNT)
    assert mount.exists and mount.filesystem == "xfs" and "noatime" in mount.options
    assert h.check_output(f"findmnt -no SOURCE {MOUNT}") == f"/dev/{kernel}"
    assert h.service("fstrim.timer").is_enabled and h.service("fstrim.timer").is_running


def test_second_deploy_changes_nothing_and_keeps_the_sentinel(first_deploy: Any,
                                                             vm: mdvm.VM) -> None:
    h = node(vm)
    h.check_output(f"echo {TOKEN} > {SENTINEL} && sync")
    started = time.monotonic()
    again = pyinfra(vm)
    _timed("second deploy", started)
    assert again.returncode == 0, again.stdout[-5000:]
    print("\n".join(line for line in again.stdout.splitlines() if "total" in line.lower()))
    assert totals(again.stdout)[:2] == (0, 0), again.stdout[-5000:]
    assert "mdadm --create" not in again.stdout and "mkfs" not in again.stdout
    assert h.file(SENTINEL).content_string.strip() == TOKEN


def test_reboot_brings_the_array_back_by_name_and_mounted(first_deploy: Any,
                                                          vm: mdvm.VM) -> None:
    h = node(vm)
    if not h.file(SENTINEL).exists:  # run alone: the sentinel test did not write it
        h.check_output(f"echo {TOKEN} > {SENTINEL} && sync")
    before = md_uuid(h)
    boot_id = h.check_output("cat /proc/sys/kernel/random/boot_id")
    started = time.monotonic()
    mdvm.reboot(vm, tie_to_parent=True)
    _timed(f"reboot ({vm.accel})", started)
    h = node(vm)
    assert h.check_output("cat /proc/sys/kernel/random/boot_id") != boot_id
    assert h.check_output("systemctl is-system-running --wait || true") in ("running",
                                                                          "degraded")
    kernel = assert_array_active(h, vm)
    assert md_uuid(h) == before
    # under its configured name: /dev/md/nodegate0, name <host>:nodegate0, never a stray
    # /dev/md/<host>:nodegate0 or a bare md127 without the link
    scan = h.check_output("mdadm --detail --scan")
    assert re.search(rf"^ARRAY {re.escape(ARRAY)} .*UUID={before}", scan, re.M), scan
    assert h.check_output("ls /dev/md") == "nodegate0", h.check_output("ls -l /dev/md")
    detail = h.check_output(f"mdadm --detail {ARRAY}")
    assert re.search(rf"Name : {mdvm.HOSTNAME}:nodegate0\b", detail), detail
    assert h.service("raid.mount").is_running
    assert h.check_output(f"findmnt -no SOURCE {MOUNT}") == f"/dev/{kernel}"
    assert h.file(SENTINEL).content_string.strip() == TOKEN
    # who assembled it (the console of this boot): udev in the initramfs, with the initramfs's
    # mdadm.conf, when the nvme driver is loaded there in time; else udev in the root
    console = vm.console_log.read_text(errors="replace").rsplit("===== nodegate-mdvm boot", 1)[-1]
    md_at = console.find(f"{kernel}: detected capacity change")
    stage = "initramfs" if 0 <= md_at < console.find("Running /scripts/init-bottom") else "root"
    print(f"\nafter reboot: {scan}; {kernel}, assembled in the {stage}; "
          f"{h.check_output(f'findmnt -no OPTIONS {MOUNT}')}")
    # and the role still finds nothing to do on the rebooted node
    third = pyinfra(vm)
    assert third.returncode == 0, third.stdout[-5000:]
    assert totals(third.stdout)[:2] == (0, 0), third.stdout[-5000:]
    assert "mdadm --create" not in third.stdout and "--assemble" not in third.stdout


def test_a_stopped_array_is_assembled_never_recreated(first_deploy: Any, vm: mdvm.VM) -> None:
    """Superblocks on every member, no array assembled (as after a boot without mdadm.conf):
    the role runs ``mdadm --assemble``, keeps the file system and mounts it again."""
    h = node(vm)
    before = md_uuid(h)
    h.check_output(f"echo {TOKEN} > {SENTINEL} && sync && systemctl stop raid.mount && "
                   f"mdadm --stop {ARRAY}")
    assert not h.file(ARRAY).exists and not h.mount_point(MOUNT).exists
    again = pyinfra(vm)
    assert again.returncode == 0, again.stdout[-5000:]
    assert re.search(r">>> sh -c 'mdadm --assemble /dev/md/nodegate0 ", again.stdout), \
        again.stdout[-5000:]
    assert "mdadm --create" not in again.stdout and "mkfs" not in again.stdout
    assert_array_active(h, vm)
    assert md_uuid(h) == before
    assert len(re.findall(r"^ARRAY ", h.file("/etc/mdadm/mdadm.conf").content_string,
                          re.M)) == 1
    assert h.service("raid.mount").is_running
    assert h.file(SENTINEL).content_string.strip() == TOKEN
