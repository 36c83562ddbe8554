"""A scenario can make any NVML device call return any nvml.h error on one GPU (``nvml_errors``),
including NOT_SUPPORTED for one field: each unmeasured case then runs through the real pynvml,
the probes and the judge (docs/simulator.md, docs/verdicts.md)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodegate.errors import ConfigError
from nodegate.sim import scenario
from tests.conftest import run_cli

NvmlRun = Callable[..., Any]


def board_with_errors(tmp_path: Path, errors: dict[int, dict[str, str]],
                      base: str = "h100-hgx") -> Path:
    """The shipped ``base`` board with ``errors`` (slot -> nvml_errors) added."""
    data = yaml.safe_load(scenario.shipped()[base].read_text())
    for slot, injected in errors.items():
        data["gpus"][slot]["nvml_errors"] = injected
    path = tmp_path / f"{base}-errors.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_injected_errors_reach_pynvml_on_that_gpu_only(tmp_path: Path, nvml: NvmlRun) -> None:
    path = board_with_errors(tmp_path, {3: {
        "nvmlDeviceGetTotalEccErrors": "NVML_ERROR_TIMEOUT",
        "nvmlDeviceGetComputeRunningProcesses": "NVML_ERROR_NO_PERMISSION",
        "nvmlDeviceGetRemappedRows": "NVML_ERROR_NOT_SUPPORTED"}})
    got = nvml(str(path), """
h3, h2 = n.nvmlDeviceGetHandleByIndex(3), n.nvmlDeviceGetHandleByIndex(2)
out["ecc3"] = err(n.nvmlDeviceGetTotalEccErrors, h3, 1, 0)
out["procs3"] = err(n.nvmlDeviceGetComputeRunningProcesses, h3)
out["remap3"] = err(n.nvmlDeviceGetRemappedRows, h3)
out["name3"] = err(n.nvmlDeviceGetName, h3)
out["ecc2"] = err(n.nvmlDeviceGetTotalEccErrors, h2, 1, 0)
out["text"] = n.nvmlErrorString(n.NVML_ERROR_DEPRECATED)
""")
    assert got["ecc3"] == "NVMLError_Timeout"
    assert got["procs3"] == "NVMLError_NoPermission"  # pynvml calls the _v3 export
    assert got["remap3"] == "NVMLError_NotSupported"
    assert got["name3"] is None and got["ecc2"] is None
    assert got["text"] == "Requested functionality has been deprecated"


@pytest.mark.parametrize(("injected", "message"), [
    ({"nvmlDeviceGetTotalEccErorrs": "NVML_ERROR_TIMEOUT"}, "not an NVML device function"),
    ({"nvmlDeviceGetTotalEccErrors": "NVML_ERROR_TIMEOUTT"}, "not an nvml.h error"),
    ({"nvmlDeviceGetTotalEccErrors": "NVML_SUCCESS"}, "does not match"),
    ({"os.system": "NVML_ERROR_TIMEOUT"}, "does not match"),
])
def test_a_bad_injection_names_the_key(tmp_path: Path, injected: dict[str, str],
                                       message: str) -> None:
    path = board_with_errors(tmp_path, {0: injected}, base="h200-single")
    with pytest.raises(ConfigError) as info:
        scenario.load(str(path))
    assert message in str(info.value)
    assert str(info.value.key).startswith("gpus[0].nvml_errors")


def _health(spec: Path, profile: str, tmp_path: Path) -> tuple[int, list[dict[str, Any]]]:
    result = run_cli("sim", "run", str(spec), "--", "nodegate", "health", "--profile", profile,
                     "--checks", "gpu", "--report-dir", str(tmp_path / "r"), "--no-textfile",
                     "--quiet", env={"NODEGATE_LOCK_FILE": str(tmp_path / "lock")})
    assert result.returncode in (0, 1), result.stderr
    assert "Traceback" not in result.stderr
    report = json.loads((tmp_path / "r" / "quick-latest.json").read_text())
    return result.returncode, report["results"]


def test_nvml_errors_and_declared_not_supported_are_error_through_the_stack(
        tmp_path: Path) -> None:
    """One H100 whose process list times out, whose NVLink state errors and whose driver
    says row remapping and fabric info are not supported: every one is ERROR on gpu2 (before:
    PASS with 0 processes, "absent" links with no evidence, SKIPs saying "pre-Hopper")."""
    path = board_with_errors(tmp_path, {2: {
        "nvmlDeviceGetComputeRunningProcesses": "NVML_ERROR_TIMEOUT",
        "nvmlDeviceGetNvLinkState": "NVML_ERROR_UNKNOWN",
        "nvmlDeviceGetRemappedRows": "NVML_ERROR_NOT_SUPPORTED",
        "nvmlDeviceGetGpuFabricInfoV": "NVML_ERROR_NOT_SUPPORTED",
        "nvmlDeviceGetGpuFabricInfo": "NVML_ERROR_NOT_SUPPORTED"}})
    code, results = _health(path, "xe9680-h100", tmp_path)
    flagged = {(r["check"], r["entity"], r["verdict"]) for r in results
               if r["verdict"] in ("FAIL", "WARN", "ERROR")}
    expected = {("foreign_processes", "gpu2", "ERROR"), ("remap_pending", "gpu2", "ERROR"),
                ("remap_failure", "gpu2", "ERROR"), ("remap_uncorrectable", "gpu2", "ERROR"),
                ("fabric_state", "gpu2", "ERROR"),
                *{("nvlink_state", f"gpu2.link{i}", "ERROR") for i in range(18)}}
    assert flagged == expected
    assert code == 1
    by = {(r["check"], r["entity"]): r for r in results}
    assert by[("foreign_processes", "gpu2")]["evidence"]["nvml_errors"] == {
        "processes": "NVML_ERROR_TIMEOUT (Timeout)"}
    assert "NVML_ERROR_UNKNOWN" in by[("nvlink_state", "gpu2.link5")]["evidence"]["reason"]
    fabric = by[("fabric_state", "gpu2")]["evidence"]["reason"]
    assert "NVML_ERROR_NOT_SUPPORTED" in fabric and "pre-Hopper" not in fabric
    assert "gpu.features.row_remapping" in by[("remap_pending", "gpu2")]["evidence"]["reason"]


def test_ecc_counters_not_supported_with_ecc_on_is_error_and_with_ecc_off_a_skip(
        tmp_path: Path) -> None:
    path = board_with_errors(tmp_path, {0: {
        "nvmlDeviceGetTotalEccErrors": "NVML_ERROR_NOT_SUPPORTED"}}, base="h200-single")
    code, results = _health(path, "h200-single", tmp_path)
    ecc = {r["check"]: r for r in results if r["check"].startswith("ecc_")}
    assert ecc["ecc_mode"]["verdict"] == "PASS"
    assert {ecc[c]["verdict"] for c in ecc if c != "ecc_mode"} == {"ERROR"}
    assert code == 1
    off = tmp_path / "off"
    off.mkdir()
    data = yaml.safe_load(path.read_text())
    data["gpus"][0]["ecc"] = {"enabled": False}
    path.write_text(yaml.safe_dump(data))
    code, results = _health(path, "h200-single", off)
    ecc = {r["check"]: r for r in results if r["check"].startswith("ecc_")}
    assert ecc["ecc_mode"]["verdict"] == "FAIL"
    assert {ecc[c]["verdict"] for c in ecc if c != "ecc_mode"} == {"SKIP"}
    assert "ECC is disabled" in ecc["ecc_sbe_volatile"]["evidence"]["reason"]
