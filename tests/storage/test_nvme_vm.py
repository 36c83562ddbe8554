"""The storage checks on real tools: nvme-cli and fio in the md VM, on QEMU's emulated NVMe.

``nodegate_lab.mdvm`` boots Debian 12 under qemu with two emulated NVMe controllers (QEMU's
``-device nvme``), which answer real ``nvme smart-log`` / ``id-ctrl`` / ``list``. The probes
run the guest's nvme-cli and fio over SSH (the runner is the only seam), the judge decides
here. Then a disk leaves the PCI bus in the middle of a run (sysfs ``remove``): it is ERROR
on that device, the other device is still judged, and the fio run on the array it belonged
to is ERROR, never a figure. The VM is the md file's, shared (tests/shared_md_vm.py): this
file runs after it, its disks blanked first, because it pulls disks. Figures from here are emulated, not hardware
(docs/dev/benchmarks.md).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from nodegate.battery import storage
from nodegate.profiles import Profile
from nodegate.results import CheckResult, Verdict
from nodegate_lab import mdvm
from tests import shared_md_vm

TOOLS = ("qemu-system-x86_64", "mmdebstrap", "mkfs.ext4", "debugfs", "ssh", "ssh-keygen")
MISSING = [t for t in TOOLS if shutil.which(t) is None]
MOUNT = "/raid"
SOURCE = "policy: vm test"

pytestmark = [
    pytest.mark.lab, pytest.mark.slow, pytest.mark.timeout(2400),
    pytest.mark.skipif(os.geteuid() != 0, reason="the md VM needs root (mmdebstrap, chroot)"),
    pytest.mark.skipif(bool(MISSING), reason=f"missing {', '.join(MISSING)}"),
]


def vm_profile(**nvme: Any) -> Profile:
    return Profile(name="mdvm", layers=[], data={
        "name": "mdvm",
        "nvme": {"devices": 2, "raid_level": 0, "mountpoint": MOUNT, "filesystem": "xfs",
                 "mount_options": ["noatime"], "smart": True, **nvme},
        "thresholds": {
            "nvme_media_errors_max": {"max": 0, "unit": "count", "source": SOURCE},
            "nvme_percentage_used_max": {"max": 90, "unit": "%", "source": SOURCE},
            "nvme_unsafe_shutdowns_growth_max": {"max": 0, "unit": "count", "source": SOURCE},
        }})


def runner(vm: mdvm.VM, hook: Any = None) -> Any:
    def run(argv: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([*mdvm.ssh_argv(vm), shlex.join(argv)], capture_output=True,
                              text=True, timeout=timeout_s, check=False)
        if hook is not None:
            hook(argv)
        return proc
    return run


def by(results: list[CheckResult], check: str) -> dict[str, CheckResult]:
    return {r.entity: r for r in results if r.check == check}


@pytest.fixture(scope="module")
def vm(request: pytest.FixtureRequest) -> Iterator[mdvm.VM]:
    """The group's shared VM (tests/shared_md_vm.py): after the md file its disks are blanked
    again; run alone, this file boots it."""
    with shared_md_vm.shared(request, reset=shared_md_vm.blank_disks) as machine:
        yield machine


def test_smart_health_of_emulated_drives(vm: mdvm.VM, tmp_path: Any) -> None:
    results = storage.run_nvme_health(vm_profile(), report_dir=tmp_path, run=runner(vm))
    print("\n".join(f"{r.check}[{r.entity}] {r.verdict.value} {r.measured!r}" for r in results))
    warning = by(results, "nvme_critical_warning")
    assert set(warning) == {"nvme0", "nvme1"}
    assert {r.verdict for r in warning.values()} == {Verdict.PASS}
    assert by(results, "nvme_temperature")["nvme0"].verdict == Verdict.PASS  # vs WCTEMP
    assert {r.verdict for r in by(results, "nvme_firmware").values()} == {Verdict.PASS}
    assert set(by(results, "nvme_namespace_size")) == {"nvme0n1", "nvme1n1"}
    assert not [r for r in results if r.verdict in (Verdict.ERROR, Verdict.FAIL)]


def test_fio_on_the_array_then_a_disk_leaves_mid_run(vm: mdvm.VM, tmp_path: Any) -> None:
    mdvm.ssh(vm, "set -e; mdadm --create /dev/md/ngfio --run --level=0 --raid-devices=2 "
                 "/dev/nvme0n1 /dev/nvme1n1; mkfs.xfs -q -f /dev/md/ngfio; "
                 f"mkdir -p {MOUNT}; mount /dev/md/ngfio {MOUNT}", timeout=300)
    profile = vm_profile(fio={"runtime_s": 5, "size_mib": 256})
    started = time.monotonic()
    results = storage.run_fio(profile, run=runner(vm))
    took = time.monotonic() - started
    for r in results:
        print(f"{r.check}[{r.entity}] {r.verdict.value} {r.measured} {r.unit} "
              f"{r.evidence.get('fio_version')} ({took:.0f} s for all three)")
    assert [r.check for r in results] == ["nvme_seq_read", "nvme_seq_write", "nvme_rand_read"]
    assert all(r.verdict == Verdict.SKIP and r.measured > 0 for r in results)  # no floor

    # a disk leaves the bus while fio reads the array: ERROR on the array, no figure
    def pull_disk() -> None:
        time.sleep(3)
        mdvm.ssh(vm, "echo 1 > /sys/class/nvme/nvme1/device/remove", timeout=120)

    puller = threading.Thread(target=pull_disk)
    puller.start()
    during = storage.run_fio(vm_profile(fio={"runtime_s": 8, "size_mib": 256}),
                             run=runner(vm))
    puller.join()
    print("\n".join(f"{r.check}[{r.entity}] {r.verdict.value} {r.evidence.get('reason')}"
                    for r in during))
    assert during[0].verdict == Verdict.ERROR and during[0].measured is None


def test_a_disk_leaves_between_list_and_smart_log(vm: mdvm.VM, tmp_path: Any) -> None:
    """ERROR on that device, the other still judged. The disk pulled by the test before is
    back first (PCI rescan): re-probed, its block device may be named by another number."""
    mdvm.ssh(vm, "echo 1 > /sys/bus/pci/rescan; udevadm settle --timeout=30", timeout=180)
    listed = storage.run_nvme_health(vm_profile(), report_dir=tmp_path, run=runner(vm))
    serials = {r.entity: r.evidence["serial"] for r in listed
               if r.check == "nvme_critical_warning"}
    assert len(serials) == 2, serials
    gone = sorted(serials)[-1]  # the re-probed disk (its block device name may have moved)

    def after_list(argv: list[str]) -> None:
        if argv[:2] == ["nvme", "list"]:  # leave the bus between list and smart-log
            mdvm.ssh(vm, "for c in /sys/class/nvme/*; do [ \"$(tr -d ' ' < $c/serial)\" = "
                         f"{serials[gone]} ] && echo 1 > $c/device/remove; done; true",
                     timeout=120)

    health = storage.run_nvme_health(vm_profile(), report_dir=tmp_path,
                                     run=runner(vm, after_list))
    print("\n".join(f"{r.check}[{r.entity}] {r.verdict.value} {r.evidence.get('reason', '')}"
                    for r in health))
    lost = [r for r in health if r.entity == gone]
    assert lost and {r.verdict for r in lost} == {Verdict.ERROR}
    kept = [r for r in health if r.entity.startswith("nvme0")]
    assert kept and all(r.verdict == Verdict.PASS for r in kept)
