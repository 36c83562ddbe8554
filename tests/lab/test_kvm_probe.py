"""The VMs' KVM-or-TCG decision (``nodegate_lab.mdvm.kvm_usable``), with no VM booted.

On CI machines /dev/kvm is missing, or opens and never runs a guest (a nested hypervisor):
no probe at all in the first case, one bounded probe per host boot in the second, whose
answer every later VM of the run reuses; where KVM works the answer is still KVM.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodegate.errors import CannotRunError
from nodegate_lab import mdvm


class Probe:
    """Stands for ``kvm_runs`` (the qemu boot): counts calls, answers as told."""

    def __init__(self, usable: bool, why: str) -> None:
        self.answer = (usable, why)
        self.calls = 0

    def __call__(self, kernel: Path, work: Path) -> tuple[bool, str]:
        self.calls += 1
        return self.answer


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A /dev/kvm node, a host boot id, a guest kernel and a cache, all under tmp_path."""
    monkeypatch.setenv("NODEGATE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("NODEGATE_MDVM_ACCEL", raising=False)
    device = tmp_path / "kvm"
    device.write_text("")
    boot_id = tmp_path / "boot_id"
    boot_id.write_text("boot-1\n")
    monkeypatch.setattr(mdvm, "KVM_DEVICE", device)
    monkeypatch.setattr(mdvm, "HOST_BOOT_ID", boot_id)
    monkeypatch.setattr(mdvm, "kvm_opens", lambda: True)
    (tmp_path / "vmlinuz").write_bytes(b"guest kernel 6.1.0")
    return tmp_path


def use(monkeypatch: pytest.MonkeyPatch, usable: bool, why: str) -> Probe:
    probe = Probe(usable, why)
    monkeypatch.setattr(mdvm, "kvm_runs", probe)
    return probe


def test_no_usable_dev_kvm_is_tcg_without_any_probe(host: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mdvm, "kvm_opens", lambda: False)
    probe = use(monkeypatch, True, "never asked")
    for _ in range(3):  # the md VM and the Soft-RoCE pair
        assert mdvm.accelerator(host / "vmlinuz", host) == ("tcg", mdvm.KVM_MISSING)
    assert probe.calls == 0
    assert not mdvm.kvm_probe_cache().exists()


def test_a_dev_kvm_that_never_runs_the_guest_is_probed_once_per_run(
        host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    why = "/dev/kvm opens but the kernel did not run to its panic within 30 s"
    probe = use(monkeypatch, False, why)
    assert mdvm.accelerator(host / "vmlinuz", host) == ("tcg", why)
    for _ in range(2):  # the next VMs of the run (other VM dirs, same kernel) reuse it
        accel, kept = mdvm.accelerator(host / "vmlinuz", host / "other-vm")
        assert accel == "tcg" and kept.startswith(why) and "kept for this boot" in kept
    assert probe.calls == 1


def test_where_kvm_works_it_is_still_kvm_probed_once(host: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    probe = use(monkeypatch, True, "KVM runs the guest kernel")
    assert mdvm.accelerator(host / "vmlinuz", host) == ("kvm", "KVM runs the guest kernel")
    assert mdvm.accelerator(host / "vmlinuz", host)[0] == "kvm"
    assert probe.calls == 1


@pytest.mark.parametrize("change", ["host reboot", "new /dev/kvm node", "other kernel"])
def test_the_answer_holds_only_for_the_same_boot_device_and_kernel(
        host: Path, monkeypatch: pytest.MonkeyPatch, change: str) -> None:
    probe = use(monkeypatch, False, "no")
    mdvm.accelerator(host / "vmlinuz", host)
    if change == "host reboot":
        (host / "boot_id").write_text("boot-2\n")
    elif change == "new /dev/kvm node":  # the module reloaded: a new inode
        (host / "kvm").unlink()
        (host / "kvm").write_text("")
        (host / "spacer").write_text("")  # keep the old inode number from being reused
    else:
        (host / "vmlinuz").write_bytes(b"guest kernel 6.1.0-51")
    probe.answer = (True, "KVM runs the guest kernel")
    assert mdvm.accelerator(host / "vmlinuz", host) == ("kvm", "KVM runs the guest kernel")
    assert probe.calls == 2


def test_kvm_asked_for_probes_afresh_and_fails_loudly(host: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    probe = use(monkeypatch, True, "KVM runs the guest kernel")
    mdvm.accelerator(host / "vmlinuz", host)
    probe.answer = (False, "/dev/kvm opens but qemu -accel kvm failed (1): no MSR")
    with pytest.raises(CannotRunError, match="KVM asked for: /dev/kvm opens but qemu"):
        mdvm.accelerator(host / "vmlinuz", host, "kvm")
    assert probe.calls == 2
    monkeypatch.setenv("NODEGATE_MDVM_ACCEL", "tcg")
    assert mdvm.accelerator(host / "vmlinuz", host) == ("tcg", "TCG asked for")
    assert probe.calls == 2


@pytest.mark.parametrize("kept", ["{not json", json.dumps({"identity": None}), "[]",
                                  json.dumps({"identity": {}, "usable": "yes"})])
def test_an_unreadable_cache_means_a_new_probe(host: Path, monkeypatch: pytest.MonkeyPatch,
                                               kept: str) -> None:
    probe = use(monkeypatch, False, "no")
    mdvm.kvm_probe_cache().parent.mkdir(parents=True)
    mdvm.kvm_probe_cache().write_text(kept)
    assert mdvm.accelerator(host / "vmlinuz", host) == ("tcg", "no")
    assert probe.calls == 1
    assert json.loads(mdvm.kvm_probe_cache().read_text())["usable"] is False


def test_without_a_host_boot_id_nothing_is_kept(host: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    (host / "boot_id").unlink()
    probe = use(monkeypatch, False, "no")
    mdvm.accelerator(host / "vmlinuz", host)
    mdvm.accelerator(host / "vmlinuz", host)
    assert probe.calls == 2 and not mdvm.kvm_probe_cache().exists()
