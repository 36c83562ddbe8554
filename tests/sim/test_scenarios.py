"""Every shipped scenario read back through the real pynvml matches its YAML."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml
import pytest

from nodegate.sim import build, runtime, scenario

NvmlRun = Callable[..., Any]

DUMP = """
out["driver"] = n.nvmlSystemGetDriverVersion()
out["nvml"] = n.nvmlSystemGetNVMLVersion()
out["cuda"] = n.nvmlSystemGetCudaDriverVersion()
out["gpus"] = []
for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    pci = n.nvmlDeviceGetPciInfo(h)
    mem = n.nvmlDeviceGetMemoryInfo(h, version=n.nvmlMemory_v2)
    g = {
        "name": n.nvmlDeviceGetName(h), "uuid": n.nvmlDeviceGetUUID(h),
        "serial": n.nvmlDeviceGetSerial(h), "bus_id": pci.busId,
        "bus_legacy": pci.busIdLegacy, "pci_device_id": pci.pciDeviceId,
        "subsys": pci.pciSubSystemId, "vbios": n.nvmlDeviceGetVbiosVersion(h),
        "inforom": n.nvmlDeviceGetInforomImageVersion(h),
        "part": n.nvmlDeviceGetBoardPartNumber(h), "total_mib": mem.total // 2**20,
        "reserved_mib": mem.reserved // 2**20,
        "temp": n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU),
        "slowdown": n.nvmlDeviceGetTemperatureThreshold(h, n.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
        "shutdown": n.nvmlDeviceGetTemperatureThreshold(h, n.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN),
        "mem_max": n.nvmlDeviceGetTemperatureThreshold(h, n.NVML_TEMPERATURE_THRESHOLD_MEM_MAX),
        "enforced": n.nvmlDeviceGetEnforcedPowerLimit(h),
        "limit": n.nvmlDeviceGetPowerManagementLimit(h),
        "default_limit": n.nvmlDeviceGetPowerManagementDefaultLimit(h),
        "power": n.nvmlDeviceGetPowerUsage(h),
        "energy": n.nvmlDeviceGetTotalEnergyConsumption(h),
        "max_sm": n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM),
        "max_mem": n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_MEM),
        "gen": n.nvmlDeviceGetCurrPcieLinkGeneration(h),
        "max_gen": n.nvmlDeviceGetMaxPcieLinkGeneration(h),
        "width": n.nvmlDeviceGetCurrPcieLinkWidth(h),
        "max_width": n.nvmlDeviceGetMaxPcieLinkWidth(h),
        "replays": n.nvmlDeviceGetPcieReplayCounter(h),
        "ecc": n.nvmlDeviceGetEccMode(h),
        "dbe_vol": n.nvmlDeviceGetTotalEccErrors(h, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                                 n.NVML_VOLATILE_ECC),
        "sbe_agg": n.nvmlDeviceGetTotalEccErrors(h, n.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                                                 n.NVML_AGGREGATE_ECC),
        "remap": list(n.nvmlDeviceGetRemappedRows(h)),
        "retired": err(n.nvmlDeviceGetRetiredPages, h, 1),
        "persistence": n.nvmlDeviceGetPersistenceMode(h),
        "mig": n.nvmlDeviceGetMigMode(h), "compute_mode": n.nvmlDeviceGetComputeMode(h),
        "procs": len(n.nvmlDeviceGetComputeRunningProcesses(h)),
        "reasons": n.nvmlDeviceGetCurrentClocksEventReasons(h),
        "util": n.nvmlDeviceGetUtilizationRates(h).gpu,
        "arch": n.nvmlDeviceGetArchitecture(h),
        "cc": list(n.nvmlDeviceGetCudaComputeCapability(h)),
        "numa": n.nvmlDeviceGetNumaNodeId(h),
        "by_uuid": n.nvmlDeviceGetIndex(n.nvmlDeviceGetHandleByUUID(n.nvmlDeviceGetUUID(h))),
        "by_bus": n.nvmlDeviceGetIndex(n.nvmlDeviceGetHandleByPciBusId(pci.busIdLegacy)),
    }
    links = []
    g["nvlink_error"] = err(n.nvmlDeviceGetNvLinkState, h, 0)
    if g["nvlink_error"] is None:
        for link in range(n.NVML_NVLINK_MAX_LINKS):
            e = err(n.nvmlDeviceGetNvLinkState, h, link)
            if e:
                g["beyond_last_link"] = e
                break
            remote = n.nvmlDeviceGetNvLinkRemotePciInfo(h, link)
            links.append([n.nvmlDeviceGetNvLinkState(h, link),
                          n.nvmlDeviceGetNvLinkVersion(h, link),
                          n.nvmlDeviceGetNvLinkRemoteDeviceType(h, link),
                          remote.busId, n.nvmlDeviceGetNvLinkCapability(h, link, 0)])
    g["links"] = links
    if links:
        speed = n.nvmlDeviceGetFieldValues(h, [n.NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON])[0]
        g["link_speed"] = speed.value.uiVal
    fi = n.c_nvmlGpuFabricInfo_v2_t()
    g["fabric_error"] = err(n.nvmlDeviceGetGpuFabricInfoV, h, n.byref(fi))
    g["fabric"] = [fi.state, fi.status] if g["fabric_error"] is None else None
    out["gpus"].append(g)
"""


@pytest.mark.parametrize("name", ["h100-hgx", "a100-hgx", "h200-hgx", "h200-single", "b200-hgx",
                                  "b300-hgx"])
def test_readback_matches_yaml(name: str, nvml: NvmlRun) -> None:
    board = runtime.resolve_spec(name)
    got = nvml(name, DUMP)
    system = board["system"]
    assert got["driver"] == system["driver_version"]
    assert got["nvml"] == system["nvml_version"]
    assert got["cuda"] == system["cuda_driver_version"]
    assert len(got["gpus"]) == len(board["gpus"])
    for i, (g, want) in enumerate(zip(got["gpus"], board["gpus"], strict=True)):
        _check_identity(g, want, i)
        _check_memory_thermal_power(g, want)
        _check_pcie_and_state(g, want)
        _check_nvlink_and_fabric(g, want, board)


def _check_identity(g: dict[str, Any], want: dict[str, Any], i: int) -> None:
    dom, bus, dev, fn = scenario.parse_bus_id(want["pci_bus_id"])
    assert g["name"] == want["name"]
    assert g["uuid"] == want["uuid"] and g["serial"] == want["serial"]
    assert g["bus_id"] == f"{dom:08X}:{bus:02X}:{dev:02X}.{fn}"
    assert g["bus_legacy"] == want["pci_bus_id"].upper()
    assert g["by_uuid"] == i and g["by_bus"] == i
    assert g["pci_device_id"] == (want["pci_device_id"] << 16) | 0x10DE
    assert g["subsys"] == want["pci_subsystem_id"]
    assert g["vbios"] == want["vbios_version"]
    assert g["inforom"] == want["inforom"]["image"]
    assert g["part"] == want["board_part_number"]
    assert g["arch"] == {"blackwell": pynvml.NVML_DEVICE_ARCH_BLACKWELL, "hopper": 9,
                         "ampere": 7}[want["architecture"]]
    assert g["cc"] == want["cuda_compute_capability"]
    assert g["numa"] == want["numa_node"]


def _check_memory_thermal_power(g: dict[str, Any], want: dict[str, Any]) -> None:
    assert g["total_mib"] == want["memory"]["total_mib"]
    assert g["reserved_mib"] == want["memory"]["reserved_mib"]
    assert g["temp"] == round(want["temperature"]["idle_c"])
    assert g["slowdown"] == want["temperature"]["slowdown_c"]
    assert g["shutdown"] == want["temperature"]["shutdown_c"]
    assert g["mem_max"] == want["temperature"]["memory_max_c"]
    limit_mw = want["power"]["limit_w"] * 1000
    assert g["enforced"] == g["limit"] == g["default_limit"] == limit_mw
    assert abs(g["power"] - want["power"]["idle_w"] * 1000) < 1000
    assert g["energy"] > 0
    assert g["max_sm"] == want["clocks"]["sm_max_mhz"]
    assert g["max_mem"] == want["clocks"]["memory_max_mhz"]


def _check_pcie_and_state(g: dict[str, Any], want: dict[str, Any]) -> None:
    # idle: the current gen trained down to idle_gen (Gen1); the max is what it trains to
    assert [g["gen"], g["width"]] == [want["pcie"]["idle_gen"], want["pcie"]["width"]] == [1, 16]
    assert [g["max_gen"], g["max_width"]] == [want["pcie"]["gen"], g["width"]]
    assert g["replays"] == 0
    assert g["ecc"] == [1, 1] and g["dbe_vol"] == 0 and g["sbe_agg"] == 0
    # every shipped board is Ampere or later: row remapping, no page retirement
    assert g["remap"] == [0, 0, 0, 0] and g["retired"] == "NVMLError_NotSupported"
    assert g["persistence"] == 1 and g["mig"] == [0, 0] and g["compute_mode"] == 0
    assert g["procs"] == 0 and g["util"] == 0
    assert g["reasons"] == 0x1  # GPU idle, nothing else


def _check_nvlink_and_fabric(g: dict[str, Any], want: dict[str, Any],
                             board: dict[str, Any]) -> None:
    links = want["nvlink"]["links"]
    if links:
        assert len(g["links"]) == links
        assert g["beyond_last_link"] == "NVMLError_InvalidArgument"
        # the scenario names a generation; NVML answers with nvml.h's nvmlNvlinkVersion_t
        enum = {3: pynvml.NVML_NVLINK_VERSION_3_0,
                4: pynvml.NVML_NVLINK_VERSION_4_0,
                5: pynvml.NVML_NVLINK_VERSION_5_0}[want["nvlink"]["version"]]
        assert all(link[:3] == [1, enum, 2] for link in g["links"])
        assert all(link[4] == 1 for link in g["links"])
        assert g["link_speed"] == want["nvlink"]["speed_mbps"]  # 53125 on NVLink 5, 26562 on 4
        switches = {link[3] for link in g["links"]}
        assert len(switches) == len(board["topology"]["nvswitch_bus_ids"])
    else:
        assert g["nvlink_error"] == "NVMLError_NotSupported"
    if want["fabric"] is None:
        assert g["fabric_error"] == "NVMLError_NotSupported"
    else:
        assert g["fabric"] == [3, 0]  # completed, success


def test_expected_profile_values() -> None:
    """The values the matching profiles pin, straight from the issue."""
    h100 = runtime.resolve_spec("h100-hgx")
    assert [g["pci_bus_id"] for g in h100["gpus"]] == [
        "0000:18:00.0", "0000:2A:00.0", "0000:3A:00.0", "0000:5D:00.0",
        "0000:9A:00.0", "0000:AB:00.0", "0000:BA:00.0", "0000:DB:00.0",
    ]
    assert {g["numa_node"] for g in h100["gpus"][:4]} == {0}
    assert {g["numa_node"] for g in h100["gpus"][4:]} == {1}
    assert all(32 <= g["temperature"]["idle_c"] <= 38 for g in h100["gpus"])
    a100 = runtime.resolve_spec("a100-hgx")["gpus"][0]
    assert (a100["pci_device_id"], a100["vbios_version"], a100["power"]["limit_w"]) == (
        0x20B2, "92.00.45.00.05", 500)  # subsystem 0x147F: the 500 W board, as captured
    h200 = runtime.resolve_spec("h200-hgx")["gpus"][0]
    assert (h200["pci_device_id"], h200["memory"]["total_mib"]) == (0x2335, 143771)
    b200 = runtime.resolve_spec("b200-hgx")["gpus"][0]
    assert (b200["pci_device_id"], b200["memory"]["total_mib"], b200["power"]["limit_w"],
            b200["nvlink"]["version"], b200["nvlink"]["speed_mbps"]) == (
        0x2901, 183359, 1000, 5, 53125)


def test_build_is_cached_and_exports(lib_dir: Path) -> None:
    lib = lib_dir / build.LIBRARY_NAME
    assert lib.is_file()
    assert not (lib_dir / "build.log").exists(), "C build must be -Wall -Wextra clean"
    mtime = lib.stat().st_mtime_ns
    assert build.ensure_built() == lib_dir and lib.stat().st_mtime_ns == mtime
    assert lib_dir.name == build.source_hash()
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True,
                             text=True, check=True).stdout
    for name in ("nvmlInit_v2", "nvmlInitWithFlags", "nvmlDeviceGetCount_v2",
                 "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetPciInfo_v3",
                 "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetGpuFabricInfo",
                 "nvmlDeviceGetGpuFabricInfoV", "nvmlDeviceGetMemoryInfo_v2", "nvmlErrorString",
                 "nvmlDeviceGetFieldValues", "nvmlDeviceGetNvLinkRemotePciInfo_v2"):
        assert f" T {name}\n" in symbols, name
    assert " T load_state" not in symbols  # internals stay hidden


def test_must_show_via_cli(lib_dir: Path) -> None:
    code = (
        "import pynvml as n; n.nvmlInit(); c = n.nvmlDeviceGetCount(); "
        "hs = [n.nvmlDeviceGetHandleByIndex(i) for i in range(c)]; "
        "print(c, {n.nvmlDeviceGetName(h) for h in hs}, "
        "[sum(n.nvmlDeviceGetNvLinkState(h, l) for l in range(18)) for h in hs])"
    )
    cli = [sys.executable, "-m", "nodegate.cli", "sim", "run"]
    res = subprocess.run([*cli, "h100-hgx", "--", sys.executable, "-c", code],
                         capture_output=True, text=True, check=True)
    assert res.stdout.strip() == "8 {'NVIDIA H100 80GB HBM3'} [18, 18, 18, 18, 18, 18, 18, 18]"
    down = (
        "import pynvml as n; n.nvmlInit(); h = n.nvmlDeviceGetHandleByIndex(3); "
        "print(n.nvmlDeviceGetNvLinkState(h, 5), n.nvmlDeviceGetNvLinkState(h, 4))"
    )
    res = subprocess.run([*cli, "h100-hgx+nvlink-down@gpu3.link5", "--", sys.executable, "-c",
                          down], capture_output=True, text=True, check=True)
    assert res.stdout.strip() == "0 1"
    lost = (
        "import pynvml as n, sys; n.nvmlInit(); h = n.nvmlDeviceGetHandleByIndex(6)\n"
        "try:\n    n.nvmlDeviceGetName(h)\nexcept n.NVMLError_GpuIsLost:\n    sys.exit(42)\n"
    )
    res = subprocess.run([*cli, "h100-hgx+xid79@gpu6", "--", sys.executable, "-c", lost],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 42, res.stderr  # the exit code of CMD comes back


def test_scenarios_command_lists_everything() -> None:
    from nodegate.sim import faults

    res = subprocess.run([sys.executable, "-m", "nodegate.cli", "sim", "scenarios"],
                         capture_output=True, text=True, check=True)
    for name in scenario.shipped():
        assert f"  {name} " in res.stdout
    for name in faults.CATALOG:
        assert f"  {name}" in res.stdout
    assert len(faults.CATALOG) >= 20
