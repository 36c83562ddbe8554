"""How the md and NVMe files share one VM (tests/shared_md_vm.py), with no VM booted: one boot
for the group in its order, a reset (never a new boot) for the NVMe file after the md file, a
new VM for the md file after the NVMe file, down after the last file of the group."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from nodegate_lab import lock, mdvm
from tests import parallel, shared_md_vm
from tests.conftest import ROOT

MD, NVME = (ROOT / f for f in parallel.LAB_GROUPS[shared_md_vm.GROUP])
OTHER = ROOT / "tests/roles/test_softroce_vm.py"


class FakeVMs:
    """Stands for mdvm's up/down/running: counts boots and downs, no qemu."""

    def __init__(self) -> None:
        self.boots = 0
        self.downs = 0
        self.up: mdvm.VM | None = None

    def boot(self, directory: Path, **_: Any) -> mdvm.VM:
        self.boots += 1
        self.up = mdvm.VM(dir=directory, kernel="k", accel="tcg", accel_why="test",
                          boot_s=1.0)
        return self.up

    def down(self, directory: Path | None = None) -> bool:
        self.downs += self.up is not None
        self.up = None
        return True


@pytest.fixture
def vms(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeVMs]:
    fake = FakeVMs()
    monkeypatch.setattr(shared_md_vm, "VM_DIR", tmp_path / "vm")
    monkeypatch.setattr(mdvm, "up", fake.boot)
    monkeypatch.setattr(mdvm, "down", fake.down)
    monkeypatch.setattr(mdvm, "build", lambda: tmp_path / "image.tar")
    monkeypatch.setattr(mdvm, "running", lambda vm: vm is fake.up)
    monkeypatch.setattr(lock, "vm_exclusive",
                        lambda *a, **k: contextlib.nullcontext())
    yield fake
    shared_md_vm.down()


def request(path: Path, order: list[Path]) -> pytest.FixtureRequest:
    items = [SimpleNamespace(path=p) for p in order]
    return cast(pytest.FixtureRequest, SimpleNamespace(path=path,
                                                       session=SimpleNamespace(items=items)))


def test_the_group_in_its_order_boots_once_and_resets_the_disks(vms: FakeVMs) -> None:
    order = [MD, MD, NVME, NVME, OTHER]
    resets: list[mdvm.VM] = []
    with shared_md_vm.shared(request(MD, order)) as first:
        pass
    assert vms.downs == 0 and vms.up is first  # the NVMe file comes later: kept up
    with shared_md_vm.shared(request(NVME, order), reset=resets.append) as second:
        assert second is first and resets == [first]
    assert (vms.boots, vms.downs) == (1, 1)  # down after the group's last file


def test_a_file_run_alone_boots_and_takes_down_without_a_reset(vms: FakeVMs) -> None:
    resets: list[mdvm.VM] = []
    with shared_md_vm.shared(request(NVME, [NVME, OTHER]), reset=resets.append):
        pass
    assert (vms.boots, vms.downs, resets) == (1, 1, [])


def test_the_md_file_after_the_nvme_file_gets_a_new_vm(vms: FakeVMs) -> None:
    order = [NVME, MD]
    with shared_md_vm.shared(request(NVME, order), reset=lambda vm: None) as first:
        pass
    with shared_md_vm.shared(request(MD, order)) as second:
        assert second is not first and vms.downs == 1
    assert (vms.boots, vms.downs) == (2, 2)


def test_a_vm_that_died_is_booted_again(vms: FakeVMs) -> None:
    order = [MD, NVME]
    with shared_md_vm.shared(request(MD, order)):
        vms.up = None  # qemu gone
    with shared_md_vm.shared(request(NVME, order), reset=lambda vm: None) as vm:
        assert vms.up is vm
    assert vms.boots == 2
