"""Every fault is visible through the NVML call (or kernel log line) a real driver shows it in."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nodegate.errors import ConfigError
from nodegate.sim import faults, runtime

NvmlRun = Callable[..., Any]

# Many faults on distinct GPUs in one board: composition, and one subprocess for all checks.
COMPOSED = "+".join([
    "h100-hgx",
    "ecc-dbe@gpu0", "pcie-downtrain@gpu0", "hot-idle@gpu0",
    "ecc-sbe-storm@gpu1", "pcie-replays@gpu1", "vbios-mismatch@gpu1",
    "nvlink-errors@gpu2.link7", "thermal-slowdown@gpu2", "foreign-process@gpu2",
    "nvlink-down@gpu3.link5", "power-brake@gpu3", "xid@gpu3:13",
    "remap-pending@gpu4", "clocks-stuck-low@gpu4", "exclusive-process@gpu4",
    "remap-failure@gpu5", "power-limit-low@gpu5", "ecc-off@gpu5",
    "xid79@gpu6",
    "mig-on@gpu7", "inforom-corrupt@gpu7",
    "persistence-off", "fabric-not-running", "driver-mismatch",
])

CHECKS = """
H = [n.nvmlDeviceGetHandleByIndex(i) for i in range(n.nvmlDeviceGetCount())]
UNC, COR, VOL, AGG = (n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                      n.NVML_VOLATILE_ECC, n.NVML_AGGREGATE_ECC)
def fabric(h):
    fi = n.c_nvmlGpuFabricInfo_v2_t()
    n.nvmlDeviceGetGpuFabricInfoV(h, n.byref(fi))
    return [fi.state, fi.status]
out["driver"] = n.nvmlSystemGetDriverVersion()
out["vbios"] = [err(n.nvmlDeviceGetVbiosVersion, h) or n.nvmlDeviceGetVbiosVersion(h) for h in H]
out["persistence"] = [n.nvmlDeviceGetPersistenceMode(h) for i, h in enumerate(H) if i != 6]
out["fabric"] = [fabric(h) for i, h in enumerate(H) if i != 6]
h0, h1, h2, h3, h4, h5, h6, h7 = H
out["g0"] = [n.nvmlDeviceGetTotalEccErrors(h0, UNC, VOL), n.nvmlDeviceGetTotalEccErrors(h0, UNC, AGG),
             n.nvmlDeviceGetMemoryErrorCounter(h0, UNC, VOL, n.NVML_MEMORY_LOCATION_DRAM),
             n.nvmlDeviceGetCurrPcieLinkGeneration(h0), n.nvmlDeviceGetCurrPcieLinkWidth(h0),
             n.nvmlDeviceGetMaxPcieLinkGeneration(h0), n.nvmlDeviceGetMaxPcieLinkWidth(h0),
             n.nvmlDeviceGetTemperature(h0, 0)]
sbe_a = n.nvmlDeviceGetTotalEccErrors(h1, COR, VOL); r_a = n.nvmlDeviceGetPcieReplayCounter(h1)
l7 = lambda c: n.nvmlDeviceGetNvLinkErrorCounter(h2, 7, c)
links_a = [l7(n.NVML_NVLINK_ERROR_DL_CRC_FLIT), l7(n.NVML_NVLINK_ERROR_DL_REPLAY),
           l7(n.NVML_NVLINK_ERROR_DL_RECOVERY), l7(n.NVML_NVLINK_ERROR_DL_CRC_DATA)]
time.sleep(1.1)
out["g1"] = [sbe_a, n.nvmlDeviceGetTotalEccErrors(h1, COR, VOL), r_a,
             n.nvmlDeviceGetPcieReplayCounter(h1)]
out["g2_links"] = [links_a, [l7(n.NVML_NVLINK_ERROR_DL_CRC_FLIT), l7(n.NVML_NVLINK_ERROR_DL_REPLAY),
                   l7(n.NVML_NVLINK_ERROR_DL_RECOVERY), l7(n.NVML_NVLINK_ERROR_DL_CRC_DATA)],
                   n.nvmlDeviceGetNvLinkErrorCounter(h2, 6, n.NVML_NVLINK_ERROR_DL_REPLAY)]
fv = n.nvmlDeviceGetFieldValues(h2, [(n.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY, 7),
                                     n.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L7,
                                     n.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL])
out["g2_fields"] = [[f.nvmlReturn, f.value.ullVal] for f in fv]
out["g2"] = [n.nvmlDeviceGetTemperature(h2, 0),
             n.nvmlDeviceGetTemperatureThreshold(h2, n.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
             n.nvmlDeviceGetCurrentClocksEventReasons(h2),
             [[p.pid, p.usedGpuMemory // 2**20] for p in n.nvmlDeviceGetComputeRunningProcesses(h2)],
             n.nvmlSystemGetProcessName(48213),
             n.nvmlDeviceGetMemoryInfo(h2).used // 2**20]
out["g3"] = [n.nvmlDeviceGetNvLinkState(h3, 5), n.nvmlDeviceGetNvLinkState(h3, 4),
             n.nvmlDeviceGetNvLinkCapability(h3, 5, n.NVML_NVLINK_CAP_P2P_SUPPORTED),
             n.nvmlDeviceGetCurrentClocksEventReasons(h3),
             n.nvmlDeviceGetClockInfo(h3, n.NVML_CLOCK_SM)]
fv = n.nvmlDeviceGetFieldValues(h3, [n.NVML_FI_DEV_NVLINK_LINK_COUNT,
                                     (n.NVML_FI_DEV_NVLINK_GET_STATE, 5)])
out["g3_fields"] = [f.value.uiVal for f in fv]
out["g4"] = [list(n.nvmlDeviceGetRemappedRows(h4)), n.nvmlDeviceGetComputeMode(h4),
             n.nvmlDeviceGetMaxClockInfo(h4, n.NVML_CLOCK_SM)]
runtime.set_load(4, 100)
time.sleep(0.05)
out["g4"].append(n.nvmlDeviceGetClockInfo(h4, n.NVML_CLOCK_SM))
out["g4"].append(n.nvmlDeviceGetClockInfo(h0, n.NVML_CLOCK_SM))
runtime.set_load(0, 100)
time.sleep(0.05)
out["g4"].append(n.nvmlDeviceGetClockInfo(h0, n.NVML_CLOCK_SM))
out["g5"] = [list(n.nvmlDeviceGetRemappedRows(h5)), n.nvmlDeviceGetEnforcedPowerLimit(h5),
             n.nvmlDeviceGetPowerManagementDefaultLimit(h5), n.nvmlDeviceGetEccMode(h5),
             err(n.nvmlDeviceGetTotalEccErrors, h5, UNC, VOL)]
out["g6"] = [err(f, h6) for f in (n.nvmlDeviceGetName, n.nvmlDeviceGetUUID,
             n.nvmlDeviceGetPciInfo, n.nvmlDeviceGetPowerUsage)]
out["g6"].append(err(n.nvmlDeviceGetNvLinkState, h6, 0))
out["g7"] = [err(n.nvmlDeviceGetRetiredPages, h7, n.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR),
             err(n.nvmlDeviceGetRetiredPagesPendingStatus, h7), n.nvmlDeviceGetMigMode(h7),
             err(n.nvmlDeviceGetInforomVersion, h7, n.NVML_INFOROM_ECC),
             n.nvmlDeviceGetInforomImageVersion(h7)]
"""


def test_composed_faults(nvml: NvmlRun) -> None:
    got = nvml(COMPOSED, CHECKS)
    assert got["driver"] == "550.127.05"
    assert got["vbios"][1] != "96.00.A5.00.01" and got["vbios"][0] == "96.00.A5.00.01"
    assert got["vbios"][6] == "NVMLError_GpuIsLost"
    assert got["persistence"] == [0] * 7
    assert all(state == 1 for state, _ in got["fabric"])  # NOT_STARTED everywhere
    dbe_vol, dbe_agg, dbe_dram, gen, width, max_gen, max_width, temp0 = got["g0"]
    assert dbe_vol > 0 and dbe_agg > 0 and dbe_dram == dbe_vol
    # idle: current gen trained down to Gen1; the link's max one below the GPU's Gen5
    assert (gen, width, max_gen, max_width) == (1, 8, 4, 16)
    assert temp0 >= 60
    sbe_a, sbe_b, replay_a, replay_b = got["g1"]
    assert sbe_a >= 12000 and sbe_b > sbe_a  # storm: rising
    assert replay_a >= 1000 and replay_b > replay_a
    before, after, quiet_link = got["g2_links"]
    assert all(x > 0 for x in before) and all(b > a for a, b in zip(before, after, strict=True))
    assert quiet_link == 0
    assert [r for r, _ in got["g2_fields"]] == [0, 0, 0]
    assert got["g2_fields"][0][1] == got["g2_fields"][1][1] == got["g2_fields"][2][1] > 0
    temp2, slowdown2, reasons2, procs2, pname, used2 = got["g2"]
    assert temp2 > slowdown2
    assert reasons2 & 0x40 and reasons2 & 0x20  # HW and SW thermal slowdown
    assert procs2 == [[48213, 10240]] and pname == "python3" and used2 >= 10240
    state5, state4, cap5, reasons3, sm3 = got["g3"]
    assert (state5, state4, cap5) == (0, 1, 0)
    assert reasons3 & 0x80 and reasons3 & 0x8  # HW power brake + HW slowdown
    assert sm3 < 1980 * 0.5
    assert got["g3_fields"] == [18, 0]
    remap4, mode4, max4, loaded4, idle0, loaded0 = got["g4"]
    assert remap4[1] == 1 and remap4[2] == 1 and remap4[3] == 0  # uncorrectable, pending
    assert mode4 == 3  # EXCLUSIVE_PROCESS
    assert loaded4 <= max4 * 0.31 and loaded0 == 1980 and idle0 == 345
    remap5, enforced5, default5, ecc5, ecc_err5 = got["g5"]
    assert remap5[3] == 1
    assert enforced5 == 420000 and default5 == 700000
    assert ecc5 == [0, 0] and ecc_err5 == "NVMLError_NotSupported"
    assert got["g6"] == ["NVMLError_GpuIsLost"] * 5
    dbe7, pending7, mig7, inforom7, image7 = got["g7"]
    # Hopper: no page retirement (row remapping), as the real H200 answered
    assert dbe7 == pending7 == "NVMLError_NotSupported"
    assert mig7 == [1, 1] and inforom7 == "NVMLError_NotSupported" and image7

    log = (Path(got["_state_dir"]) / "kernel.log").read_text()
    xid = re.compile(r"^\[\s*\d+\.\d{6}\] NVRM: Xid \(PCI:0000:([0-9a-f]{2}):00\): (\d+), "
                     r"pid=\d+, name=\S+, (.+)$", re.M)
    events = {(bus, int(code)) for bus, code, _ in xid.findall(log)}
    assert {("18", 48), ("2a", 92), ("5d", 13), ("9a", 63), ("ab", 64), ("ba", 79)} <= events
    assert "(PCI:0000:ba:00): 79, pid=" in log and "GPU has fallen off the bus." in log
    assert "NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  550.127.05" in log


def test_gpu_missing_renumbers(nvml: NvmlRun) -> None:
    got = nvml("h100-hgx+gpu-missing@gpu2+xid79@gpu6", """
out["count"] = n.nvmlDeviceGetCount()
out["buses"] = [n.nvmlDeviceGetPciInfo(n.nvmlDeviceGetHandleByIndex(i)).busIdLegacy
                for i in range(out["count"]) if i != 5]
out["lost"] = err(n.nvmlDeviceGetName, n.nvmlDeviceGetHandleByIndex(5))
out["by_bus"] = err(n.nvmlDeviceGetHandleByPciBusId, "0000:3A:00.0")
""")
    assert got["count"] == 7
    assert "0000:3A:00.0" not in got["buses"] and got["buses"][2] == "0000:5D:00.0"
    assert got["lost"] == "NVMLError_GpuIsLost"  # gpu6 of the board is NVML index 5 now
    assert got["by_bus"] == "NVMLError_NotFound"
    assert "0000:3a:00.0" not in (Path(got["_state_dir"]) / "kernel.log").read_text()


def test_fabric_degraded_and_unsupported(nvml: NvmlRun) -> None:
    got = nvml("h100-hgx+fabric-degraded@gpu1", """
fi = n.c_nvmlGpuFabricInfo_v3_t()
n.nvmlDeviceGetGpuFabricInfoV(n.nvmlDeviceGetHandleByIndex(1), n.byref(fi))
out["v3"] = [fi.state, fi.status, fi.healthMask & 3, fi.healthSummary]
old = n.c_nvmlGpuFabricInfo_t()
n.nvmlDeviceGetGpuFabricInfo(n.nvmlDeviceGetHandleByIndex(0), n.byref(old))
out["v1"] = [old.state, old.status, old.cliqueId]
""")
    assert got["v3"] == [3, 0, 1, 3]  # completed, success, degraded bw, limited capacity
    assert got["v1"] == [3, 0, 32766]
    with pytest.raises(ConfigError, match="no GPU fabric"):
        runtime.resolve_spec("a100-hgx+fabric-not-running")


def test_cooling_failure_and_power_brake_under_load(nvml: NvmlRun, tmp_path: Path) -> None:
    # A fast time constant keeps the test short; the physics is the same.
    text = (runtime.scenario.shipped()["h100-hgx"]).read_text().replace("tau_s: 2.0", "tau_s: 0.3")
    fast = tmp_path / "h100-fast.yaml"
    fast.write_text(text)
    got = nvml(f"{fast}+cooling-failure@gpu1+power-brake@gpu2", """
H = [n.nvmlDeviceGetHandleByIndex(i) for i in range(3)]
def snap(h):
    return [n.nvmlDeviceGetTemperature(h, 0), n.nvmlDeviceGetPowerUsage(h),
            n.nvmlDeviceGetTotalEnergyConsumption(h), n.nvmlDeviceGetUtilizationRates(h).gpu,
            n.nvmlDeviceGetCurrentClocksEventReasons(h), n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)]
out["idle"] = [snap(h) for h in H]
for i in range(3):
    runtime.set_load(i, 100)
time.sleep(2.0)
out["load"] = [snap(h) for h in H]
runtime.clear_load(0)
time.sleep(1.0)
out["after"] = snap(H[0])
""")
    idle, load, after = got["idle"], got["load"], got["after"]
    # healthy GPU 0: heats toward steady state, draws power, energy advances, no throttling
    assert idle[0][0] <= 36 and 60 <= load[0][0] <= 68
    assert load[0][1] > 600_000 and load[0][2] - idle[0][2] > 600 * 1000 * 1.5
    assert load[0][3] == 100 and load[0][4] == 0 and load[0][5] == 1980
    assert after[0] < load[0][0] - 15 and after[3] == 0 and after[4] == 0x1
    # cooling failure: fine at idle, overshoots the 87 C slowdown under load
    assert idle[1][0] < 40 and idle[1][4] == 0x1
    assert load[1][0] > 87 and load[1][4] & 0x40 and load[1][5] < 1980
    # power brake: reason held, clocks and power low even under load
    assert idle[2][4] & 0x80
    assert load[2][4] & 0x80 and load[2][5] <= 600 and load[2][1] < 300_000


def test_load_marks_are_noops_off_the_simulator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODEGATE_SIM_DIR", raising=False)
    runtime.set_load(0, 100)
    runtime.clear_load(0)
    with pytest.raises(ValueError):
        runtime.set_load(0, 101)


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("h100-hgx+bogus@gpu1", "unknown fault 'bogus'"),
        ("h100-hgx+xid79@gpu8", "has 8 GPUs"),
        ("h100-hgx+nvlink-down@gpu3", "needs a link"),
        ("h100-hgx+nvlink-down@gpu3.link18", "has 18 NVLinks"),
        ("h200-single+nvlink-down@gpu0.link0", "has no NVLink"),
        ("h100-hgx+ecc-dbe@gpu1.link2", "targets a GPU"),
        ("h100-hgx+persistence-off@gpu1", "without @"),
        ("h100-hgx+xid@gpu1", "xid@gpuN:CODE"),
        ("h100-hgx+xid@gpu1:abc", "positive integer"),
        ("h100-hgx++xid79@gpu1", "empty fault"),
        ("nosuch-board", "unknown scenario"),
        # NVML cannot show retired pages on Ampere and later: a fault there would test nothing
        ("h100-hgx+retired-pages@gpu0", "page retirement does not exist on Ampere and later"),
    ],
)
def test_bad_fault_specs(spec: str, match: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(match)):
        runtime.resolve_spec(spec)


def test_catalog_is_described() -> None:
    assert len(faults.CATALOG) >= 20
    for name in ("gpu-missing", "xid79", "nvlink-down", "nvlink-errors", "ecc-dbe",
                 "ecc-sbe-storm", "remap-pending", "remap-failure", "retired-pages",
                 "pcie-downtrain", "pcie-replays", "thermal-slowdown", "power-brake",
                 "clocks-stuck-low", "power-limit-low", "persistence-off", "mig-on",
                 "fabric-not-running", "vbios-mismatch", "driver-mismatch", "foreign-process",
                 "xid", "cooling-failure"):
        fault = faults.CATALOG[name]
        assert fault.description and "\n" not in fault.description
