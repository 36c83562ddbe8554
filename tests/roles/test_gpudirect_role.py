"""nvidia_driver and GPUDirect RDMA: peermem loaded now and at boot only when declared."""

from __future__ import annotations

from pathlib import Path

from roles.nvidia_driver import PEERMEM_CONF, nvidia_driver
from tests.roles.harness import run
from tests.roles.scenarios import converged_facts, converged_files, host_data

TEMPLATE = Path(__file__).resolve().parents[2] / "templates/nvidia_driver/nvidia-peermem.conf"


def _modprobes(commands: list[str]) -> list[str]:
    """peermem's modprobes (the driver's own ``modprobe nvidia`` before persistenced aside)."""
    return [c for c in commands if c.startswith("modprobe") and "peermem" in c]


def test_peermem_profile_loads_the_module_now_and_at_boot() -> None:
    result = run(nvidia_driver, data=host_data("hgx-a100-80gb"))
    assert result.error is None
    conf = result.uploads[PEERMEM_CONF]
    assert [x for x in conf.splitlines() if x and not x.startswith("#")] == ["nvidia-peermem"]
    assert _modprobes(result.commands) == ["modprobe -a nvidia_peermem"]
    probes = [c for c in result.commands if c.startswith("modprobe")]
    assert probes == ["modprobe nvidia", "modprobe -a nvidia_peermem"]  # the driver first


def test_peermem_converged_with_the_module_loaded_is_a_noop() -> None:
    facts = {**converged_facts("ubuntu22"),
             "server.KernelModules": {"nvidia_peermem": {}, "nvidia": {}}}
    files = {**converged_files("ubuntu22"), PEERMEM_CONF: TEMPLATE.read_text()}
    data = host_data(nvidia_driver_gpudirect="peermem")  # converged facts are the 570 driver
    result = run(nvidia_driver, data=data, facts=facts, files=files, converged=True)
    assert result.error is None
    assert not any(PEERMEM_CONF in c or c.startswith("modprobe") for c in result.commands)
    assert any("nvidia_peermem is loaded" in n for n in result.noops)


def test_dmabuf_profile_removes_a_stale_boot_entry_and_loads_nothing() -> None:
    result = run(nvidia_driver, data=host_data("xe9680-h100"),
                 files={PEERMEM_CONF: "nvidia-peermem\n"})
    assert result.error is None
    assert f"rm -f {PEERMEM_CONF}" in result.commands
    assert PEERMEM_CONF not in result.uploads and not _modprobes(result.commands)
    clean = run(nvidia_driver, data=host_data("xe9680-h100"))
    assert not any(PEERMEM_CONF in c for c in clean.commands)


def test_the_knob_overrides_the_profile() -> None:
    result = run(nvidia_driver, data=host_data("xe9680-h100", nvidia_driver_gpudirect="peermem"))
    assert PEERMEM_CONF in result.uploads and _modprobes(result.commands)
    bad = run(nvidia_driver, data=host_data("xe9680-h100", nvidia_driver_gpudirect="rdma"))
    assert bad.error and "nvidia_driver_gpudirect must be one of" in bad.error


def test_dmabuf_with_proprietary_modules_stops_the_host() -> None:
    result = run(nvidia_driver, data=host_data("xe9680-h100",
                                               nvidia_driver_kernel_modules="proprietary"))
    assert result.error and "DMA-BUF needs the open kernel modules" in result.error
    assert not any("install" in c for c in result.commands)


def test_a_driver_upgrade_defers_peermem_to_the_next_boot() -> None:
    facts = {"kernel.LoadedModuleVersions": {"nvidia": "535.183.01"}}
    result = run(nvidia_driver, data=host_data("hgx-a100-80gb", nvidia_driver_drained=True),
                 facts=facts)
    assert result.error is None
    assert PEERMEM_CONF in result.uploads and not _modprobes(result.commands)
    assert any("next boot" in n for n in result.noops)


def test_in_a_container_peermem_is_the_hosts() -> None:
    result = run(nvidia_driver, data=host_data("hgx-a100-80gb"),
                 facts={"virt.Container": "systemd-nspawn"})
    assert result.error is None
    assert PEERMEM_CONF not in result.uploads and not _modprobes(result.commands)
    assert any("nvidia-peermem belongs to the host" in n for n in result.noops)
