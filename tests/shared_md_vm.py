"""One md VM for the test files that use it (the ``md-vm`` group of tests/parallel.py):
built and booted once per pytest process, handed from file to file, taken down after the
group's last selected file.

Why: under TCG (no usable KVM on CI machines) every boot of the Debian guest costs a minute
or more of emulated CPU, and the md file and the NVMe file each booted their own VM of the
same image. Now the md file (the real role, a real reboot) goes first and the NVMe file
(smart-log, fio, disks pulled from the bus) takes the same VM after it, its disks blanked
again (``blank_disks``); run alone, either file boots the VM itself.

Plain module state rather than a session fixture: a fixture shared by two directories would
have to live in the root conftest, and a session fixture stays up to the end of the run on
that worker; here the VM goes as soon as no later test of the group is left to run.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from nodegate_lab import lock, mdvm
from tests import parallel

GROUP = "md-vm"
#: The shared VM's directory (the md test's, as before); one user at a time (lock.vm_exclusive).
VM_DIR = mdvm.vm_dir().with_name(mdvm.vm_dir().name + "-test")
#: Seconds: image build, first boot, blanking the disks for the next file, time up.
TIMES: dict[str, float] = {}
ROOT = Path(__file__).resolve().parent.parent


@dataclass
class _Shared:
    vm: mdvm.VM | None = None
    held: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    users: list[str] = field(default_factory=list)  # files that used the running VM
    up_since: float = 0.0


_STATE = _Shared()


def _relpath(path: Path) -> str:
    return os.path.relpath(str(path), str(ROOT))


def _boot() -> mdvm.VM:
    """The lock, a clean VM dir, the image (cached) and one boot; the VM dies with this
    process (``tie_to_parent``), the next run's ``down`` removes what a killed run left."""
    started = time.monotonic()
    _STATE.held.enter_context(lock.vm_exclusive(VM_DIR, wait_s=1800))
    try:
        mdvm.down(VM_DIR)  # a VM dir left by an earlier, killed run
        cached = mdvm.tarball_path().is_file()
        mdvm.build()
        TIMES["image build" + (" (cached)" if cached else " (cold)")] = round(
            time.monotonic() - started, 1)
        machine = mdvm.up(VM_DIR, tie_to_parent=True)
    except BaseException:
        _STATE.held.close()
        raise
    TIMES[f"first boot ({machine.accel}: {machine.accel_why})"] = machine.boot_s
    _STATE.vm, _STATE.users, _STATE.up_since = machine, [], started
    return machine


def down() -> None:
    """Take the shared VM down (its console kept as ``mdvm.last_console_log()``), release
    the lock and print the timings; nothing when none is up."""
    if _STATE.vm is None:
        return
    try:
        mdvm.down(VM_DIR)
        assert not VM_DIR.exists()
    finally:
        TIMES["up, total"] = round(time.monotonic() - _STATE.up_since, 1)
        print(f"\nshared md VM, used by {_STATE.users} (s): {TIMES}; serial console: "
              f"{mdvm.last_console_log()}")
        _STATE.vm, _STATE.users = None, []
        _STATE.held.close()


def blank_disks(vm: mdvm.VM, mountpoint: str = "/raid") -> None:
    """Undo what the nvme role leaves on the disks: its mount unit gone (a unit naming a
    file system that no longer exists would make systemd unmount the next one mounted
    there), arrays stopped, superblocks zeroed and signatures wiped, no ARRAY line in
    mdadm.conf. The disks are then as a fresh VM has them; the root keeps the rest."""
    disks = " ".join(shlex.quote(d) for d in vm.disk_ids)
    mdvm.ssh(vm, f"set -e; u=$(systemd-escape -p --suffix=mount {shlex.quote(mountpoint)}); "
                 "if [ -e /etc/systemd/system/$u ]; then systemctl disable --now $u; "
                 "rm /etc/systemd/system/$u; systemctl daemon-reload; fi; "
                 "mdadm --stop --scan || true; "
                 f"for d in {disks}; do mdadm --zero-superblock \"$d\" || true; "
                 "wipefs -aq \"$d\"; done; "
                 "sed -i '/^ARRAY /d' /etc/mdadm/mdadm.conf; udevadm settle --timeout=30; "
                 f"! grep -q '^md' /proc/mdstat && ! mountpoint -q {shlex.quote(mountpoint)}",
             timeout=300)


def _later_users(request: pytest.FixtureRequest) -> bool:
    """Does a test of another group file come after this file's last test in this run's
    items? (Under ``--dist loadgroup`` the whole group runs on this worker, in this order.)"""
    files = parallel.LAB_GROUPS[GROUP]
    items = request.session.items
    mine = [n for n, item in enumerate(items) if item.path == request.path]
    last = mine[-1] if mine else -1
    return any(_relpath(item.path) in files and item.path != request.path
               for item in items[last + 1:])


@contextlib.contextmanager
def shared(request: pytest.FixtureRequest,
           reset: Callable[[mdvm.VM], None] | None = None) -> Iterator[mdvm.VM]:
    """The shared VM for one test file (a module fixture's ``request``), booted if none is up.

    ``reset`` puts a VM another file has used into the state this file needs (the NVMe
    file: ``blank_disks``); None means the file needs a VM no test has touched (the md
    file: its first deploy must create the array), so after another file a new one boots.
    After the file: down when no later test of the group is left in this run."""
    vm = _STATE.vm
    if vm is not None and not mdvm.running(vm):
        down()  # died under the previous file: boot again rather than fail here
        vm = None
    if vm is not None and _STATE.users and reset is None:
        down()
        vm = None
    if vm is None:
        vm = _boot()
    elif _STATE.users and reset is not None:
        started = time.monotonic()
        reset(vm)
        TIMES[f"reset for {_relpath(request.path)}"] = round(time.monotonic() - started, 1)
    _STATE.users.append(_relpath(request.path))
    try:
        yield vm
    finally:
        if not _later_users(request) or not mdvm.running(vm):
            down()
