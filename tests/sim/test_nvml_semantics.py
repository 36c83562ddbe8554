"""Every NVML encoding the probes and the load sampler read, as the simulator returns it,
checked against nvidia-ml-py's own constants (which mirror nvml.h); never a number copied
into our code. docs/simulator.md ("NVML semantics") lists the same calls.

The boards are read raw through pynvml in a subprocess (the simulator is loaded there); the
comparisons with pynvml's constants happen here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pynvml
import pytest
import yaml

from nodegate.probes import nvml_codes
from nodegate.sim import runtime, scenario

FAULTS = ("h100-hgx+thermal-slowdown@gpu1+power-brake@gpu2+fabric-degraded@gpu3+ecc-dbe@gpu4"
          "+nvlink-errors@gpu5.link0+remap-pending@gpu6")
#: A real Turing capture (NVIDIA T4, telegraf's test data): page retirement exists there
T4_CAPTURE = Path(__file__).parent / "data" / "corpus" / "telegraf-tesla-t4.xml"

READ = """
import json
import pynvml as n
from nodegate.probes import nvml_codes
n.nvmlInit()
def safe(fn, *a):
    try:
        return fn(*a)
    except n.NVMLError as e:
        return "error:" + type(e).__name__
gpus = []
for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    g = {}
    pci = n.nvmlDeviceGetPciInfo(h)
    g["pci"] = [pci.pciDeviceId, pci.busId.decode() if isinstance(pci.busId, bytes) else pci.busId]
    g["arch"] = n.nvmlDeviceGetArchitecture(h)
    g["brand"] = n.nvmlDeviceGetBrand(h)
    g["mem_total"] = n.nvmlDeviceGetMemoryInfo(h).total
    g["temp"] = n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)
    g["slowdown"] = n.nvmlDeviceGetTemperatureThreshold(h, n.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)
    g["shutdown"] = n.nvmlDeviceGetTemperatureThreshold(h, n.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN)
    g["power"] = n.nvmlDeviceGetPowerUsage(h)
    g["limit"] = n.nvmlDeviceGetEnforcedPowerLimit(h)
    g["default_limit"] = n.nvmlDeviceGetPowerManagementDefaultLimit(h)
    g["energy"] = n.nvmlDeviceGetTotalEnergyConsumption(h)
    g["sm_max"] = n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM)
    g["mem_max"] = n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_MEM)
    g["reasons"] = n.nvmlDeviceGetCurrentClocksEventReasons(h)
    g["supported_reasons"] = n.nvmlDeviceGetSupportedClocksEventReasons(h)
    g["pcie"] = [n.nvmlDeviceGetMaxPcieLinkGeneration(h), n.nvmlDeviceGetMaxPcieLinkWidth(h),
                 n.nvmlDeviceGetPcieLinkMaxSpeed(h)]
    g["ecc_mode"] = list(n.nvmlDeviceGetEccMode(h))
    g["ecc"] = {f"{e}/{c}": n.nvmlDeviceGetTotalEccErrors(h, e, c)
                for e in (n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)
                for c in (n.NVML_VOLATILE_ECC, n.NVML_AGGREGATE_ECC)}
    remap = safe(n.nvmlDeviceGetRemappedRows, h)
    g["remap"] = remap if isinstance(remap, str) else list(remap)
    g["retired"] = {c: safe(n.nvmlDeviceGetRetiredPages, h, c) for c in (
        n.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
        n.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)}
    g["retired_pending"] = safe(n.nvmlDeviceGetRetiredPagesPendingStatus, h)
    g["persistence"] = n.nvmlDeviceGetPersistenceMode(h)
    g["mig"] = list(n.nvmlDeviceGetMigMode(h))
    g["compute_mode"] = n.nvmlDeviceGetComputeMode(h)
    fi = n.c_nvmlGpuFabricInfo_v3_t()
    rc = safe(n.nvmlDeviceGetGpuFabricInfoV, h, n.byref(fi))
    g["fabric"] = rc if isinstance(rc, str) else [fi.state, fi.status, fi.healthMask,
                                                 fi.healthSummary]
    links = []
    for link in range(18):
        if isinstance(safe(n.nvmlDeviceGetNvLinkState, h, link), str):
            continue
        links.append([n.nvmlDeviceGetNvLinkVersion(h, link)] + [
            n.nvmlDeviceGetNvLinkErrorCounter(h, link, c) for c in (
                n.NVML_NVLINK_ERROR_DL_REPLAY, n.NVML_NVLINK_ERROR_DL_RECOVERY,
                n.NVML_NVLINK_ERROR_DL_CRC_FLIT, n.NVML_NVLINK_ERROR_DL_CRC_DATA)])
    g["links"] = links
    fv = n.nvmlDeviceGetFieldValues(h, [nvml_codes.FI_DEV_MEMORY_TEMP])[0]
    g["mem_temp"] = [fv.nvmlReturn, fv.valueType, nvml_codes.field_value(fv)]
    gpus.append(g)
out = {"gpus": gpus, "cuda": n.nvmlSystemGetCudaDriverVersion(),
       "nvml_version": n.nvmlSystemGetNVMLVersion()}
if len(gpus) > 1:
    h0, h1 = n.nvmlDeviceGetHandleByIndex(0), n.nvmlDeviceGetHandleByIndex(1)
    out["p2p_nvlink"] = n.nvmlDeviceGetP2PStatus(h0, h1, n.NVML_P2P_CAPS_INDEX_NVLINK)
print(json.dumps(out))
"""


def _read(spec: str, state_dir: Path) -> dict[str, Any]:
    env = {**os.environ, **runtime.prepare(spec, state_dir)}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(READ)], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    loaded: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return loaded


@pytest.fixture(scope="module")
def h100(tmp_path_factory: pytest.TempPathFactory, sim_cache: Path) -> dict[str, Any]:
    return _read("h100-hgx", tmp_path_factory.mktemp("h100"))


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory, sim_cache: Path) -> dict[str, Any]:
    return _read(FAULTS, tmp_path_factory.mktemp("faulty"))


@pytest.fixture(scope="module")
def a100(tmp_path_factory: pytest.TempPathFactory, sim_cache: Path) -> dict[str, Any]:
    return _read("a100-hgx", tmp_path_factory.mktemp("a100"))


H100 = scenario.load("h100-hgx")["gpus"][0]


def _field(mask: int, name: str) -> int:
    """One field of the fabric health mask, by nvml.h's name for it."""
    shift = getattr(pynvml, f"NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_{name}")
    width = getattr(pynvml, f"NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_{name}")
    return int((mask >> shift) & width)


# --- nvmlNvlinkVersion_t -----------------------------------------------------------------------


def test_nvlink_version_is_the_enum(h100: dict[str, Any], a100: dict[str, Any]) -> None:
    assert {link[0] for link in h100["gpus"][0]["links"]} == {pynvml.NVML_NVLINK_VERSION_4_0}
    assert {link[0] for link in a100["gpus"][0]["links"]} == {pynvml.NVML_NVLINK_VERSION_3_0}
    assert nvml_codes.nvlink_generation(h100["gpus"][0]["links"][0][0]) == 4


# --- clock event reasons (bit mask) -------------------------------------------------------------


def test_idle_gpu_reports_gpu_idle(h100: dict[str, Any]) -> None:
    assert h100["gpus"][0]["reasons"] == pynvml.nvmlClocksEventReasonGpuIdle


def test_supported_reasons_are_nvml_all(h100: dict[str, Any]) -> None:
    assert h100["gpus"][0]["supported_reasons"] == pynvml.nvmlClocksEventReasonAll


def test_thermal_and_power_brake_bits(faulty: dict[str, Any]) -> None:
    hot, brake = faulty["gpus"][1]["reasons"], faulty["gpus"][2]["reasons"]
    assert hot & pynvml.nvmlClocksEventReasonHwThermalSlowdown
    assert hot & pynvml.nvmlClocksEventReasonHwSlowdown
    assert brake & pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown
    assert brake & pynvml.nvmlClocksEventReasonHwSlowdown
    assert not hot & pynvml.nvmlClocksEventReasonGpuIdle
    fatal = (pynvml.nvmlClocksEventReasonHwSlowdown | pynvml.nvmlClocksEventReasonHwThermalSlowdown
             | pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown)
    assert fatal == nvml_codes.CLOCK_EVENTS_FATAL
    assert sum(nvml_codes.CLOCK_EVENT_FATAL_BITS) == fatal


# --- fabric: nvmlGpuFabricState_t, nvmlReturn_t status, health mask, health summary -------------


def test_fabric_state_and_status(h100: dict[str, Any]) -> None:
    state, status, _, summary = h100["gpus"][0]["fabric"]
    assert state == pynvml.NVML_GPU_FABRIC_STATE_COMPLETED
    assert status == pynvml.NVML_SUCCESS
    assert summary == pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_HEALTHY


def test_fabric_health_mask_fields(h100: dict[str, Any], faulty: dict[str, Any]) -> None:
    healthy = h100["gpus"][0]["fabric"][2]
    for name in ("DEGRADED_BW", "ROUTE_RECOVERY", "ROUTE_UNHEALTHY", "ACCESS_TIMEOUT_RECOVERY"):
        assert _field(healthy, name) == getattr(
            pynvml, f"NVML_GPU_FABRIC_HEALTH_MASK_{name}_FALSE"), name
    assert nvml_codes.fabric_health_problems(healthy) == []
    _, _, degraded, summary = faulty["gpus"][3]["fabric"]
    assert _field(degraded, "DEGRADED_BW") == pynvml.NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE
    assert summary == pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY
    assert nvml_codes.fabric_health_problems(degraded) == ["degraded_bandwidth"]


def test_fabric_health_decoding_follows_the_header() -> None:
    shift = pynvml.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_UNHEALTHY
    assert nvml_codes.fabric_health_problems(
        pynvml.NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_TRUE << shift) == ["route_unhealthy"]
    assert nvml_codes.fabric_health_problems(
        pynvml.NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_NOT_SUPPORTED << shift) == []
    config = pynvml.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_INCORRECT_CONFIGURATION
    assert nvml_codes.fabric_health_problems(
        pynvml.NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_NONE << config) == []
    assert nvml_codes.fabric_health_problems(
        pynvml.NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_INSUFFICIENT_NVLINKS << config
    ) == ["incorrect_configuration=insufficient_nvlinks"]


def test_fabric_not_supported_before_hopper(a100: dict[str, Any]) -> None:
    assert a100["gpus"][0]["fabric"] == "error:NVMLError_NotSupported"


# --- units: degrees C, mW, mJ, bytes, MHz -------------------------------------------------------


def test_temperatures_are_degrees_c(h100: dict[str, Any]) -> None:
    gpu, temp = h100["gpus"][0], H100["temperature"]
    assert gpu["temp"] == temp["idle_c"]
    assert (gpu["slowdown"], gpu["shutdown"]) == (temp["slowdown_c"], temp["shutdown_c"])


def test_memory_temperature_field_value(h100: dict[str, Any]) -> None:
    rc, _value_type, value = h100["gpus"][0]["mem_temp"]
    assert rc == pynvml.NVML_SUCCESS
    assert value == H100["temperature"]["memory_idle_c"]


def test_field_value_reads_every_value_type() -> None:
    for value_type, member, raw in (
            (pynvml.NVML_VALUE_TYPE_DOUBLE, "dVal", 41.5),
            (pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, "uiVal", 41),
            (pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, "ullVal", 41),
            (pynvml.NVML_VALUE_TYPE_SIGNED_INT, "siVal", -3),
            (pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT, "usVal", 41)):
        fv = pynvml.c_nvmlFieldValue_t()
        fv.valueType, fv.nvmlReturn = value_type, pynvml.NVML_SUCCESS
        setattr(fv.value, member, raw)
        assert nvml_codes.field_value(fv) == raw, member
    fv.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
    assert nvml_codes.field_value(fv) is None


def test_power_is_milliwatts(h100: dict[str, Any]) -> None:
    gpu, power = h100["gpus"][0], H100["power"]
    assert gpu["limit"] == power["limit_w"] * 1000
    assert gpu["default_limit"] == power["default_limit_w"] * 1000
    assert gpu["power"] == power["idle_w"] * 1000
    assert nvml_codes.watts(gpu["limit"]) == power["limit_w"]


def test_energy_is_millijoules(h100: dict[str, Any]) -> None:
    # the simulated board has idled for uptime_s at idle_w: mJ = s * W * 1000
    uptime = scenario.load("h100-hgx")["system"]["uptime_s"]
    assert h100["gpus"][0]["energy"] >= uptime * H100["power"]["idle_w"] * 1000


def test_memory_is_bytes(h100: dict[str, Any]) -> None:
    total = h100["gpus"][0]["mem_total"]
    assert total == H100["memory"]["total_mib"] * 1024 * 1024
    assert nvml_codes.mib(total) == H100["memory"]["total_mib"]


def test_clocks_are_mhz(h100: dict[str, Any]) -> None:
    gpu = h100["gpus"][0]
    assert gpu["sm_max"] == H100["clocks"]["sm_max_mhz"]
    assert gpu["mem_max"] == H100["clocks"]["memory_max_mhz"]


# --- PCI, PCIe ---------------------------------------------------------------------------------


def test_pci_device_id_and_bus_id(h100: dict[str, Any]) -> None:
    device_id, bus_id = h100["gpus"][0]["pci"]
    assert nvml_codes.pci_device_id(device_id) == H100["pci_device_id"]
    assert device_id & 0xFFFF == 0x10DE  # NVIDIA's PCI vendor id in the low half
    assert bus_id == "00000000:" + H100["pci_bus_id"].split(":", 1)[1]


def test_pcie_generation_width_and_max_speed(h100: dict[str, Any]) -> None:
    gen, width, speed = h100["gpus"][0]["pcie"]
    assert (gen, width) == (H100["pcie"]["max_gen"], H100["pcie"]["max_width"])  # Gen5, x16
    assert speed == pynvml.NVML_PCIE_LINK_MAX_SPEED_32000MBPS  # nvmlPcieLinkMaxSpeed_t


# --- enables, modes, architecture --------------------------------------------------------------


def test_enable_states(h100: dict[str, Any]) -> None:
    gpu = h100["gpus"][0]
    assert gpu["ecc_mode"] == [pynvml.NVML_FEATURE_ENABLED, pynvml.NVML_FEATURE_ENABLED]
    assert gpu["persistence"] == pynvml.NVML_FEATURE_ENABLED
    assert gpu["mig"] == [pynvml.NVML_DEVICE_MIG_DISABLE, pynvml.NVML_DEVICE_MIG_DISABLE]


def test_compute_mode(h100: dict[str, Any]) -> None:
    assert h100["gpus"][0]["compute_mode"] == pynvml.NVML_COMPUTEMODE_DEFAULT
    assert nvml_codes.COMPUTE_MODES[pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS] == \
        "exclusive_process"


def test_architecture_and_brand(h100: dict[str, Any], a100: dict[str, Any]) -> None:
    assert h100["gpus"][0]["arch"] == pynvml.NVML_DEVICE_ARCH_HOPPER
    assert a100["gpus"][0]["arch"] == pynvml.NVML_DEVICE_ARCH_AMPERE
    assert h100["gpus"][0]["brand"] == pynvml.NVML_BRAND_NVIDIA


def test_cuda_driver_version(h100: dict[str, Any]) -> None:
    # nvml.h: 1000 * major + 10 * minor (12080 is CUDA 12.8), passed through unchanged
    assert h100["cuda"] == scenario.load("h100-hgx")["system"]["cuda_driver_version"]


# --- error counters by their enum --------------------------------------------------------------


def test_ecc_counters_by_error_and_counter_type(faulty: dict[str, Any]) -> None:
    ecc = faulty["gpus"][4]["ecc"]
    dbe = f"{pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED}/{pynvml.NVML_VOLATILE_ECC}"
    sbe = f"{pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED}/{pynvml.NVML_VOLATILE_ECC}"
    assert ecc[dbe] > 0 and ecc[sbe] == 0


def test_nvlink_error_counters_by_enum(faulty: dict[str, Any]) -> None:
    _, replay, recovery, crc_flit, crc_data = faulty["gpus"][5]["links"][0]
    assert min(replay, recovery, crc_flit, crc_data) > 0
    assert faulty["gpus"][5]["links"][1][1:] == [0, 0, 0, 0]


def test_remapped_rows_order(faulty: dict[str, Any]) -> None:
    _corr, unc, pending, failure = faulty["gpus"][6]["remap"]
    assert pending == 1 and failure == 0  # (corr, unc, isPending, failureOccurred)
    assert unc >= 1


def test_page_retirement_is_not_supported_from_ampere_on(h100: dict[str, Any],
                                                         a100: dict[str, Any]) -> None:
    """As the real H200 answered (docs/hardware-runs/2026-12-04-h200-health.md): row remapping
    replaced page retirement, and NVML says NOT_SUPPORTED rather than zero pages."""
    for board in (h100, a100):
        gpu = board["gpus"][0]
        assert set(gpu["retired"].values()) == {"error:NVMLError_NotSupported"}
        assert gpu["retired_pending"] == "error:NVMLError_NotSupported"
        assert gpu["remap"] == [0, 0, 0, 0]


def test_retired_pages_by_cause_on_turing(tmp_path: Path, sim_cache: Path) -> None:
    from nodegate.sim.capture import import_capture

    board = tmp_path / "t4.yaml"
    import_capture(T4_CAPTURE, board, name="t4")
    healthy = _read(str(board), tmp_path / "healthy")["gpus"][0]
    assert healthy["retired"] == {str(pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR): [],
                                  str(pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS): []}
    assert healthy["retired_pending"] == pynvml.NVML_FEATURE_DISABLED
    sick = _read(f"{board}+retired-pages@gpu0", tmp_path / "sick")["gpus"][0]
    assert len(sick["retired"][str(pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)]) == 1
    assert len(sick["retired"][str(pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)]) == 2
    assert sick["retired_pending"] == pynvml.NVML_FEATURE_ENABLED
    assert sick["remap"] == "error:NVMLError_NotSupported"  # row remapping: Ampere and later


def test_nvml_version_follows_the_cuda_major(h100: dict[str, Any]) -> None:
    assert h100["nvml_version"] == f"{h100['cuda'] // 1000}.570.133.20"


# --- P2P status (nvmlGpuP2PStatus_t) -----------------------------------------------------------


def test_p2p_status(h100: dict[str, Any], tmp_path: Path) -> None:
    assert h100["p2p_nvlink"] == pynvml.NVML_P2P_STATUS_OK
    data = yaml.safe_load(scenario.find("h200-single").read_text())
    data["gpus"].append({"pci_bus_id": "0000:2A:00.0", "numa_node": 0, "module_id": 2})
    path = tmp_path / "two-pcie-h200.yaml"
    path.write_text(yaml.safe_dump(data))
    got = _read(str(path), tmp_path / "state")
    assert got["p2p_nvlink"] == pynvml.NVML_P2P_STATUS_NOT_SUPPORTED
