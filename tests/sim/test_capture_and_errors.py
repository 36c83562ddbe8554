"""Capture import (nvidia-smi -q -x) and bad scenario files."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodegate.errors import ConfigError
from nodegate.sim import runtime, scenario
from nodegate.sim.capture import import_capture

NvmlRun = Callable[..., Any]

DATA = Path(__file__).parent / "data"

READ = """
H = [n.nvmlDeviceGetHandleByIndex(i) for i in range(n.nvmlDeviceGetCount())]
UNC, COR, VOL, AGG = (n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                      n.NVML_VOLATILE_ECC, n.NVML_AGGREGATE_ECC)
def fabric(h):
    fi = n.c_nvmlGpuFabricInfo_v2_t()
    e = err(n.nvmlDeviceGetGpuFabricInfoV, h, n.byref(fi))
    return e or fi.state
out["driver"] = n.nvmlSystemGetDriverVersion()
out["cuda"] = n.nvmlSystemGetCudaDriverVersion()
out["gpus"] = [{
    "name": n.nvmlDeviceGetName(h), "bus": n.nvmlDeviceGetPciInfo(h).busIdLegacy,
    "devid": n.nvmlDeviceGetPciInfo(h).pciDeviceId, "uuid": n.nvmlDeviceGetUUID(h),
    "temp": n.nvmlDeviceGetTemperature(h, 0),
    "slowdown": n.nvmlDeviceGetTemperatureThreshold(h, 1),
    "limit": n.nvmlDeviceGetEnforcedPowerLimit(h),
    "default_limit": n.nvmlDeviceGetPowerManagementDefaultLimit(h),
    "max_clock": n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_GRAPHICS),
    "dbe": n.nvmlDeviceGetTotalEccErrors(h, UNC, VOL),
    "sbe_agg": n.nvmlDeviceGetTotalEccErrors(h, COR, AGG),
    "remap": list(n.nvmlDeviceGetRemappedRows(h)),
    "retired_sbe": err(n.nvmlDeviceGetRetiredPages, h, 0),
    "retired_pending": err(n.nvmlDeviceGetRetiredPagesPendingStatus, h),
    "mig": n.nvmlDeviceGetMigMode(h)[0], "persistence": n.nvmlDeviceGetPersistenceMode(h),
    "compute_mode": n.nvmlDeviceGetComputeMode(h),
    "pcie": [n.nvmlDeviceGetCurrPcieLinkGeneration(h), n.nvmlDeviceGetCurrPcieLinkWidth(h),
             n.nvmlDeviceGetMaxPcieLinkGeneration(h), n.nvmlDeviceGetMaxPcieLinkWidth(h)],
    "replays": n.nvmlDeviceGetPcieReplayCounter(h),
    "reasons": n.nvmlDeviceGetCurrentClocksEventReasons(h),
    "procs": [p.pid for p in n.nvmlDeviceGetComputeRunningProcesses(h)],
    "fabric": fabric(h), "links": n.nvmlDeviceGetFieldValues(h, [91])[0].value.uiVal,
} for h in H]
"""


def test_import_h100_570_capture(tmp_path: Path, nvml: NvmlRun) -> None:
    out = tmp_path / "sick-h100.yaml"
    import_capture(DATA / "h100-hgx-570.xml", out, name="sick-h100")
    assert scenario.load(str(out))["name"] == "sick-h100"  # the output is a valid scenario
    got = nvml(str(out), READ)
    assert got["driver"] == "570.133.20" and got["cuda"] == 12080
    g = got["gpus"]
    assert len(g) == 8 and {x["name"] for x in g} == {"NVIDIA H100 80GB HBM3"}
    assert [x["bus"] for x in g] == [f"0000:{b}:00.0" for b in
                                     ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")]
    assert {x["devid"] for x in g} == {0x233010DE}
    assert g[0]["uuid"] == "GPU-5a1c3e20-7b1d-4c2e-9f10-3e41d0aa2c00"
    assert g[0]["temp"] == 33 and g[0]["slowdown"] == 87 and g[0]["limit"] == 700000
    assert g[0]["max_clock"] == 1980 and g[0]["fabric"] == 3
    assert {x["links"] for x in g} == {0}  # nvidia-smi -q -x carries no NVLink data
    assert g[2]["dbe"] == 2 and g[2]["sbe_agg"] == 31 and g[2]["remap"] == [0, 1, 1, 0]
    assert g[4]["pcie"] == [4, 8, 5, 16] and g[4]["replays"] == 211
    assert g[5]["procs"] == [48213]
    assert g[6]["fabric"] == 2  # In Progress
    assert g[7]["reasons"] & 0x80 and g[7]["reasons"] & 0x8  # power brake kept
    assert all(x["persistence"] == 1 and x["mig"] == 0 for x in g)


def test_import_a100_535_capture(tmp_path: Path, nvml: NvmlRun) -> None:
    out = tmp_path / "a100.yaml"
    subprocess.run([sys.executable, "-m", "nodegate.cli", "sim", "import",
                    str(DATA / "a100-hgx-535.xml"), "-o", str(out)], check=True,
                   capture_output=True)
    data = yaml.safe_load(out.read_text())
    assert data["name"] == "a100" and data["system"]["cuda_driver_version"] == 12020
    got = nvml(str(out), READ)
    g = got["gpus"]
    assert got["driver"] == "535.230.02" and len(g) == 8
    assert {x["name"] for x in g} == {"NVIDIA A100-SXM4-80GB"}
    assert all(x["fabric"] == "NVMLError_NotSupported" for x in g)
    assert g[0]["links"] == 0 and g[0]["persistence"] == 0 and g[0]["slowdown"] == 89
    # the hand-written capture lists a retired page on an A100; real Ampere captures show N/A
    # and NVML answers NOT_SUPPORTED, whatever the capture says
    assert g[1]["retired_sbe"] == g[1]["retired_pending"] == "NVMLError_NotSupported"
    assert g[1]["remap"][0] == 2 and g[1]["sbe_agg"] == 57
    assert g[3]["mig"] == 1 and g[5]["compute_mode"] == 3
    assert g[6]["reasons"] & 0x20  # SW thermal slowdown from clocks_throttle_reasons
    assert g[7]["limit"] == 300000 and g[7]["default_limit"] == 400000


def test_import_rejects_non_capture(tmp_path: Path) -> None:
    bad = tmp_path / "x.xml"
    bad.write_text("<foo/>")
    with pytest.raises(ConfigError, match="nvidia_smi_log"):
        import_capture(bad, tmp_path / "o.yaml", name="o")
    bad.write_text("not xml at all <")
    with pytest.raises(ConfigError, match="not a readable"):
        import_capture(bad, tmp_path / "o.yaml", name="o")


def _board(tmp_path: Path, mutate: str) -> Path:
    data = yaml.safe_load(scenario.shipped()["h200-single"].read_text())
    exec(mutate, {"d": data})  # small edits keep each case readable
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    ("mutate", "key", "message"),
    [
        ("d['gpu']['temprature'] = {}", "gpu.temprature", "unknown scenario key"),
        ("d['gpus'][0]['pcie'] = {'gen': 'five'}", "gpus[0].pcie.gen", "not of type"),
        ("d['gpus'][0]['pci_bus_id'] = '18:00'", "gpus[0].pci_bus_id", "does not match"),
        ("del d['gpu']['vbios_version']", "gpus[0].vbios_version", "missing required key"),
        ("del d['system']['driver_version']", "system.driver_version", "missing required key"),
        ("d['gpus'].append(dict(d['gpus'][0]))", "gpus[1].pci_bus_id", "duplicate"),
        ("d['gpu']['nvlink'] = {'links': 4, 'inactive': [4]}", "gpus[0].nvlink.inactive[0]",
         "out of range"),
        ("d['gpu']['fabric'] = {'state': 'done'}", "gpu.fabric.state", "is not one of"),
        # one rule for every schema (nodegate.schema_check): a missing key is named itself
        ("del d['gpus']", "gpus", "'gpus' is a required property"),
    ],
)
def test_bad_scenario_names_the_key(tmp_path: Path, mutate: str, key: str, message: str) -> None:
    path = _board(tmp_path, mutate)
    with pytest.raises(ConfigError) as info:
        runtime.resolve_spec(str(path))
    assert info.value.key == key, str(info.value)
    assert info.value.file == str(path)
    assert message in str(info.value)


def test_cli_bad_input_exits_2_with_one_line(tmp_path: Path) -> None:
    path = _board(tmp_path, "d['gpu']['temprature'] = {}")
    for spec in (str(path), "h100-hgx+bogus@gpu1"):
        res = subprocess.run([sys.executable, "-m", "nodegate.cli", "sim", "run", spec, "--",
                              "true"], capture_output=True, text=True, check=False)
        assert res.returncode == 2
        assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "key gpu.temprature" in subprocess.run(
        [sys.executable, "-m", "nodegate.cli", "sim", "run", str(path), "--", "true"],
        capture_output=True, text=True, check=False).stderr
    bad_yaml = tmp_path / "broken.yaml"
    bad_yaml.write_text("name: [unclosed\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        scenario.load(str(bad_yaml))


def test_uninitialized_and_bad_arguments(nvml: NvmlRun) -> None:
    got = nvml("h100-hgx", """
h = n.nvmlDeviceGetHandleByIndex(0)
out["bad_index"] = err(n.nvmlDeviceGetHandleByIndex, 8)
out["bad_sensor"] = err(n.nvmlDeviceGetTemperature, h, 5)
out["bad_uuid"] = err(n.nvmlDeviceGetHandleByUUID, "GPU-00000000-0000-0000-0000-000000000000")
out["fan"] = err(n.nvmlDeviceGetFanSpeed, h)
out["errstr"] = n.nvmlErrorString(n.NVML_ERROR_GPU_IS_LOST)
n.nvmlShutdown()
out["after_shutdown"] = err(n.nvmlDeviceGetCount)
""")
    assert got["bad_index"] == "NVMLError_InvalidArgument"
    assert got["bad_sensor"] == "NVMLError_InvalidArgument"
    assert got["bad_uuid"] == "NVMLError_NotFound"
    assert got["fan"] == "NVMLError_NotSupported"
    assert got["errstr"] == "GPU is lost"
    assert got["after_shutdown"] == "NVMLError_Uninitialized"
