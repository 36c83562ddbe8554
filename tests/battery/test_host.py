"""Host checks on a captured-shape filesystem tree (proc, sys, etc) built per test."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nodegate.judge.host import judge_host
from nodegate.probes.host import HostProbe
from nodegate.profiles import resolve_profile
from nodegate.results import Verdict

MDSTAT = """Personalities : [raid0]
md0 : active raid0 nvme1n1[1] nvme0n1[0] nvme2n1[2] nvme3n1[3] nvme4n1[4] nvme5n1[5] nvme6n1[6] nvme7n1[7]
      30004846592 blocks super 1.2 512k chunks

unused devices: <none>
"""
MOUNTS = """/dev/sda2 / ext4 rw,relatime 0 0
/dev/md0 /raid xfs rw,noatime,attr2,inode64,logbufs=8,logbsize=32k,sunit=1024,swidth=8192,noquota 0 0
"""
MODULES = """nvidia_peermem 16384 0 - Live 0x0000000000000000
nvidia_uvm 1531904 4 - Live 0x0000000000000000
nvidia 8990720 130 nvidia_uvm,nvidia_peermem, Live 0x0000000000000000
"""


def _config_space(acs_control: int) -> bytes:
    data = bytearray(4096)
    data[0:4] = (0x1234_10DE).to_bytes(4, "little")
    # extended capability list: AER at 0x100 -> ACS at 0x148 -> end
    data[0x100:0x104] = (0x0001 | (1 << 16) | (0x148 << 20)).to_bytes(4, "little")
    data[0x148:0x14C] = (0x000D | (1 << 16) | (0 << 20)).to_bytes(4, "little")
    data[0x14E:0x150] = acs_control.to_bytes(2, "little")
    return bytes(data)


class FakeSystemd(HostProbe):
    """The tree's files are real; only systemctl/dpkg answers come from a table."""

    def __init__(self, root: Path, services: dict[str, str], packages: dict[str, str]) -> None:
        super().__init__(root, run_commands=False)
        self.services, self.packages = services, packages

    def service_state(self, unit: str) -> str | None:
        return self.services.get(unit, "inactive")

    def package_version(self, package: str) -> str | None:
        return self.packages.get(package)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    files = {
        "proc/modules": MODULES,
        "proc/cmdline": "BOOT_IMAGE=/vmlinuz root=UUID=x ro iommu=pt",
        "proc/mdstat": MDSTAT,
        "proc/mounts": MOUNTS,
        "sys/module/nvidia/version": "570.133.20\n",
        "etc/nccl.conf": "NCCL_SOCKET_IFNAME=bond0\nNCCL_IB_HCA=mlx5_0,mlx5_1\n",
        # GPUDirect RDMA over DMA-BUF (the profile's mode): open modules, a DMA-BUF kernel
        "proc/driver/nvidia/version": "NVRM version: NVIDIA UNIX Open Kernel Module for "
                                      "x86_64  570.133.20  Release Build\n",
        "proc/sys/kernel/osrelease": "5.15.0-126-generic\n",
        "boot/config-5.15.0-126-generic": "CONFIG_DMA_SHARED_BUFFER=y\n",
    }
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    # a GPU behind two switch ports: /sys/devices/pci0000:17/0000:17:01.0/0000:18:00.0/0000:19:00.0
    dev = tmp_path / "sys/devices/pci0000:17/0000:17:01.0/0000:18:00.0/0000:19:00.0"
    dev.mkdir(parents=True)
    (dev.parent / "config").write_bytes(_config_space(0x0000))
    (dev.parent.parent / "config").write_bytes(_config_space(0x001D))  # ACS still on
    links = tmp_path / "sys/bus/pci/devices"
    links.mkdir(parents=True)
    os.symlink(dev, links / "0000:19:00.0")
    for bridge in (dev.parent, dev.parent.parent):
        os.symlink(bridge, links / bridge.name)
    return tmp_path


def test_host_checks_on_tree(tree: Path) -> None:
    probe = FakeSystemd(
        tree,
        services={"nvidia-persistenced": "active", "nvidia-fabricmanager": "active"},
        packages={"nvidia-fabricmanager-570": "570.133.20-1"},
    )
    profile = resolve_profile("xe9680-h100")
    results = {(r.check, r.entity): r for r in judge_host(probe, profile, ["00000000:19:00.0"])}
    assert results[("nouveau_absent", "node")].verdict == Verdict.PASS
    assert results[("nvidia_module", "node")].verdict == Verdict.PASS
    assert results[("fabricmanager_service", "node")].verdict == Verdict.PASS
    assert results[("persistenced_service", "node")].verdict == Verdict.PASS
    assert results[("gpudirect_rdma", "node")].verdict == Verdict.PASS
    assert results[("iommu_mode", "node")].verdict == Verdict.PASS
    assert results[("pcie_acs", "0000:18:00.0")].verdict == Verdict.PASS
    acs = results[("pcie_acs", "0000:17:01.0")]
    assert acs.verdict == Verdict.FAIL and acs.measured == "0x001d"
    assert results[("nccl_conf", "node")].verdict == Verdict.PASS
    assert results[("nvme_array", "md0")].verdict == Verdict.PASS
    assert results[("nvme_mount", "/raid")].verdict == Verdict.PASS  # nofail is userspace-only


def test_host_faults(tree: Path) -> None:
    (tree / "proc/modules").write_text(MODULES + "nouveau 2000000 0 - Live 0x0\n")
    (tree / "sys/module/nvidia/version").write_text("570.86.10\n")
    (tree / "etc/nccl.conf").write_text("NCCL_SOCKET_IFNAME=bond0\n")
    (tree / "proc/mounts").write_text(MOUNTS.replace("noatime", "relatime"))
    (tree / "proc/mdstat").write_text(MDSTAT.replace(" nvme7n1[7]", ""))
    probe = FakeSystemd(tree, services={"nvidia-fabricmanager": "active"},
                        packages={"nvidia-fabricmanager-570": "570.124.06-1"})
    profile = resolve_profile("xe9680-h100")
    results = {(r.check, r.entity): r for r in judge_host(probe, profile, [])}
    failing = {key for key, r in results.items() if r.verdict == Verdict.FAIL}
    assert failing == {
        ("nouveau_absent", "node"), ("nvidia_module", "node"),
        ("persistenced_service", "node"), ("fabricmanager_service", "node"),
        ("nccl_conf", "node"), ("nvme_array", "md0"), ("nvme_mount", "/raid"),
    }
    assert results[("nccl_conf", "node")].evidence["missing"] == ["NCCL_IB_HCA"]


def test_container_and_single_disk_layout(tree: Path) -> None:
    (tree / "run/systemd").mkdir(parents=True)
    (tree / "run/systemd/container").write_text("systemd-nspawn\n")
    (tree / "proc/modules").write_text("")
    (tree / "proc/mdstat").write_text("Personalities :\nunused devices: <none>\n")
    (tree / "proc/mounts").write_text("/dev/loop3 /raid xfs rw,noatime,attr2 0 0\n")
    probe = FakeSystemd(tree, services={"nvidia-persistenced": "active",
                                        "nvidia-fabricmanager": "active"},
                        packages={"nvidia-fabricmanager-570": "570.133.20-1"})
    profile = resolve_profile("xe9680-h100", host_overrides={"nvme": {"devices": 1}})
    results = {(r.check, r.entity): r for r in judge_host(probe, profile, [])}
    assert results[("nvidia_module", "node")].verdict == Verdict.SKIP
    assert "container" in results[("nvidia_module", "node")].evidence["reason"]
    assert not any(check == "nvme_array" for check, _ in results)
    assert results[("nvme_mount", "/raid")].verdict == Verdict.PASS


@pytest.mark.parametrize(("cmdline", "mode"), [
    ("intel_iommu=on iommu=pt", "pt"),
    ("iommu=pt intel_iommu=on", "pt"),             # order must not matter
    ("amd_iommu=on iommu=pt", "pt"),
    ("iommu=pt amd_iommu=on", "pt"),
    ("iommu.passthrough=1 intel_iommu=on", "pt"),
    ("intel_iommu=on", "on"),
    ("amd_iommu=on", "on"),
    ("intel_iommu=on,sm_on", "on"),
    ("iommu=pt iommu=nopt intel_iommu=on", "on"),  # a later iommu= overrides an earlier one
    ("intel_iommu=on intel_iommu=off iommu=pt", "off"),
    ("intel_iommu=off intel_iommu=on iommu=pt", "pt"),
    ("iommu=off intel_iommu=on", "off"),
    ("ro quiet", "default"),
])
def test_iommu_mode_follows_kernel_parsing(tree: Path, cmdline: str, mode: str) -> None:
    (tree / "proc/cmdline").write_text(f"BOOT_IMAGE=/vmlinuz root=UUID=x {cmdline}\n")
    probe = FakeSystemd(tree, services={}, packages={})
    results = {r.check: r for r in judge_host(probe, resolve_profile("xe9680-h100"), [])}
    iommu = results["iommu_mode"]
    assert iommu.measured == mode
    assert iommu.verdict == (Verdict.PASS if mode == "pt" else Verdict.FAIL)


def test_acs_unreadable_config_space_is_an_error(tree: Path) -> None:
    """A non-root reader sees 64 bytes of config space: ACS unknown, never "no ACS"."""
    bridge = tree / "sys/devices/pci0000:17/0000:17:01.0"
    (bridge / "config").write_bytes(_config_space(0x0000)[:64])
    probe = FakeSystemd(tree, services={}, packages={})
    results = {(r.check, r.entity): r for r in judge_host(
        probe, resolve_profile("xe9680-h100"), ["00000000:19:00.0"])}
    unreadable = results[("pcie_acs", "0000:17:01.0")]
    assert unreadable.verdict == Verdict.ERROR
    assert "64 bytes" in unreadable.evidence["reason"]
    assert results[("pcie_acs", "0000:18:00.0")].verdict == Verdict.PASS
    (bridge / "config").unlink()                     # gone: the read itself fails
    again = {(r.check, r.entity): r for r in judge_host(
        probe, resolve_profile("xe9680-h100"), ["00000000:19:00.0"])}
    assert again[("pcie_acs", "0000:17:01.0")].verdict == Verdict.ERROR


def test_acs_without_the_capability_is_not_judged_but_a_missing_gpu_is(tree: Path) -> None:
    bridge = tree / "sys/devices/pci0000:17/0000:17:01.0"
    (bridge / "config").write_bytes(_config_space(0x0000)[:256])  # no extended space: no ACS
    probe = FakeSystemd(tree, services={}, packages={})
    results = {(r.check, r.entity): r for r in judge_host(
        probe, resolve_profile("xe9680-h100"), ["00000000:19:00.0", "00000000:9a:00.0"])}
    assert ("pcie_acs", "0000:17:01.0") not in results
    missing = results[("pcie_acs", "0000:9a:00.0")]
    assert missing.verdict == Verdict.ERROR and "not found" in missing.evidence["reason"]
