"""gpudirect_rdma: the host check verifies the mode the profile declares.

dmabuf needs the open kernel modules and a kernel built with DMA-BUF; peermem needs the module
loaded; none is not judged. What cannot be read is ERROR, never PASS.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import pytest

from nodegate.judge.host import judge_host
from nodegate.probes.host import HostProbe
from nodegate.profiles import list_profiles, resolve_profile
from nodegate.profiles.gpudirect import gpudirect
from nodegate.results import CheckResult, Verdict

OPEN = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.133.20  Release Build\n"
PROPRIETARY = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.230.02  Release Build\n"
RELEASE = "6.8.0-45-generic"
PEERMEM = "nvidia_peermem 16384 0 - Live 0x0\nnvidia 8990720 130 nvidia_peermem, Live 0x0\n"


class Modinfo(HostProbe):
    """The tree's files are real; ``modinfo -F license nvidia`` answers from a value."""

    def __init__(self, root: Path, license_: str | None = None) -> None:
        super().__init__(root, run_commands=False)
        self.license = license_

    def _command(self, argv: list[str], timeout_s: float = 10.0) -> str | None:
        return self.license if argv[:3] == ["modinfo", "-F", "license"] else None


def _tree(root: Path, files: dict[str, str | bytes]) -> Path:
    base = {"proc/modules": "nvidia 8990720 130 - Live 0x0\n", "proc/cmdline": "iommu=pt",
            "proc/sys/kernel/osrelease": f"{RELEASE}\n"}
    for rel, content in {**base, **files}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return root


def _judge(probe: HostProbe, profile: str = "xe9680-h100",
           **overrides: Any) -> CheckResult:
    prof = resolve_profile(profile, host_overrides=overrides or None)
    return next(r for r in judge_host(probe, prof, []) if r.check == "gpudirect_rdma")


def test_dmabuf_passes_with_open_modules_and_a_dma_buf_kernel(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"proc/driver/nvidia/version": OPEN,
                            f"boot/config-{RELEASE}": "CONFIG_DMA_SHARED_BUFFER=y\n"})
    result = _judge(HostProbe(root, run_commands=False))
    assert result.verdict == Verdict.PASS, result
    assert result.evidence["mode"] == "dmabuf"
    assert result.evidence["mode_source"].startswith("datasheet: NVIDIA")
    assert "nvidia_peermem" not in (root / "proc/modules").read_text()  # peermem not needed


def test_dmabuf_fails_on_the_proprietary_modules(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"proc/driver/nvidia/version": PROPRIETARY,
                            f"boot/config-{RELEASE}": "CONFIG_DMA_SHARED_BUFFER=y\n"})
    result = _judge(HostProbe(root, run_commands=False))
    assert result.verdict == Verdict.FAIL
    assert "proprietary" in result.measured and "open ones" in result.evidence["hint"]


def test_dmabuf_fails_on_a_kernel_without_dma_buf(tmp_path: Path) -> None:
    config = "CONFIG_MODULES=y\n# CONFIG_DMA_SHARED_BUFFER is not set\n"
    root = _tree(tmp_path, {"proc/driver/nvidia/version": OPEN,
                            f"boot/config-{RELEASE}": config})
    result = _judge(HostProbe(root, run_commands=False))
    assert result.verdict == Verdict.FAIL
    assert "CONFIG_DMA_SHARED_BUFFER=unset" in result.measured


def test_dmabuf_reads_proc_config_gz_and_modinfo(tmp_path: Path) -> None:
    """No /boot config, no /proc/driver/nvidia/version: the fallbacks answer."""
    root = _tree(tmp_path, {"proc/config.gz": gzip.compress(b"CONFIG_DMA_SHARED_BUFFER=y\n")})
    assert _judge(Modinfo(root, "Dual MIT/GPL")).verdict == Verdict.PASS
    assert _judge(Modinfo(root, "NVIDIA")).verdict == Verdict.FAIL


@pytest.mark.parametrize("missing", ["config", "flavour", "both"])
def test_dmabuf_unreadable_is_an_error(tmp_path: Path, missing: str) -> None:
    files: dict[str, str | bytes] = {}
    if missing == "config":
        files["proc/driver/nvidia/version"] = OPEN
    if missing == "flavour":
        files[f"boot/config-{RELEASE}"] = "CONFIG_DMA_SHARED_BUFFER=y\n"
    result = _judge(HostProbe(_tree(tmp_path, files), run_commands=False))
    assert result.verdict == Verdict.ERROR
    reason = result.evidence["reason"]
    assert ("kernel config" in reason) == (missing in ("config", "both"))
    assert ("flavour" in reason) == (missing in ("flavour", "both"))


def test_peermem_mode_needs_the_module(tmp_path: Path) -> None:
    root = _tree(tmp_path, {})
    declared = {"host": {"gpudirect": {"mode": "peermem", "source": "policy: test"}}}
    missing = _judge(HostProbe(root, run_commands=False), **declared)
    assert missing.verdict == Verdict.FAIL and "modules-load.d" in missing.evidence["hint"]
    (root / "proc/modules").write_text(PEERMEM)
    assert _judge(HostProbe(root, run_commands=False), **declared).verdict == Verdict.PASS


def test_shipped_a100_profile_is_peermem(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"proc/modules": PEERMEM, "proc/driver/nvidia/version": PROPRIETARY})
    result = _judge(HostProbe(root, run_commands=False), "hgx-a100-80gb")
    assert result.verdict == Verdict.PASS and result.evidence["mode"] == "peermem"


def test_none_mode_skips_with_a_reason(tmp_path: Path) -> None:
    result = _judge(HostProbe(_tree(tmp_path, {}), run_commands=False), "sim-h100-hgx")
    assert result.verdict == Verdict.SKIP
    assert "declares no GPUDirect RDMA" in result.evidence["reason"]


def test_default_mode_without_the_key() -> None:
    """A site profile without host.gpudirect gets NVIDIA's recommendation for its modules."""
    base = {"host": {"infiniband": True}, "driver": {"kernel_modules": "open"}}
    assert gpudirect(base).mode == "dmabuf" and not gpudirect(base).declared
    assert gpudirect({**base, "driver": {"kernel_modules": "proprietary"}}).mode == "peermem"
    assert gpudirect({"host": {"infiniband": False}}).mode == "none"


@pytest.mark.parametrize("name", [n for n, _ in list_profiles()])
def test_every_shipped_profile_declares_a_workable_mode(name: str) -> None:
    data = resolve_profile(name).data
    mode = gpudirect(data)
    assert mode.declared, f"{name}: host.gpudirect not declared"
    assert mode.source.split(":")[0] in ("datasheet", "policy")
    if mode.mode == "dmabuf":
        assert data["driver"]["kernel_modules"] == "open", name
    if data["host"]["infiniband"]:
        assert mode.mode != "none", name


def test_an_undeclared_mode_is_rejected_by_the_schema() -> None:
    from nodegate.errors import ConfigError

    with pytest.raises(ConfigError):
        resolve_profile("xe9680-h100",
                        host_overrides={"host": {"gpudirect": {"mode": "rdma",
                                                               "source": "policy: x"}}})
    with pytest.raises(ConfigError):
        resolve_profile("xe9680-h100", host_overrides={"host": {"gpudirect": {"mode": "none"}}})
