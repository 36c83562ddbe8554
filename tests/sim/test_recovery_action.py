"""NVML's GPU recovery action (``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION``) from the simulated
driver up to the verdict: Blackwell boards answer it, older boards answer NOT_SUPPORTED (no
result where the model declares no such field), a fault sets an action, and a GPU whose
action is not NONE fails naming it; an unread action is ERROR, never PASS."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml
import yaml

from nodegate.judge.gpu import judge_gpu
from nodegate.probes import nvml_codes
from nodegate.probes.nvml import GpuState
from nodegate.profiles.cache import resolve_profile_cached
from nodegate.results import CheckResult, Verdict
from nodegate.sim import scenario
from tests.conftest import run_cli

NvmlRun = Callable[..., Any]

READ = """
for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    v = n.nvmlDeviceGetFieldValues(h, [n.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION])[0]
    out[str(i)] = [v.nvmlReturn, v.valueType, v.value.uiVal]
"""


def test_names_come_from_nvidia_ml_py() -> None:
    """The five actions nvml.h defines since R570 keep their values; every name is pynvml's."""
    assert nvml_codes.FI_DEV_GET_GPU_RECOVERY_ACTION == pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
    for name in ("none", "gpu_reset", "node_reboot", "drain_p2p", "drain_and_reset"):
        value = getattr(pynvml, f"NVML_GPU_RECOVERY_ACTION_{name.upper()}")
        assert nvml_codes.RECOVERY_ACTIONS[value] == name
    assert nvml_codes.recovery_action_name(4242) == "unknown action 4242"


def test_blackwell_answers_older_boards_do_not(nvml: NvmlRun) -> None:
    none, reset = pynvml.NVML_GPU_RECOVERY_ACTION_NONE, pynvml.NVML_GPU_RECOVERY_ACTION_GPU_RESET
    b200 = nvml("b200-hgx+recovery-reset@gpu2", READ)
    ok, uint = pynvml.NVML_SUCCESS, pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
    assert b200["0"] == [ok, uint, none] and b200["2"] == [ok, uint, reset]
    h100 = nvml("h100-hgx+recovery-reboot@gpu1", READ)
    assert h100["0"][0] == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert h100["1"] == [ok, uint, pynvml.NVML_GPU_RECOVERY_ACTION_NODE_REBOOT]


def _health(spec: str, profile: str, tmp_path: Path) -> tuple[int, list[dict[str, Any]]]:
    result = run_cli("sim", "run", spec, "--", "nodegate", "health", "--profile", profile,
                     "--checks", "gpu", "--report-dir", str(tmp_path), "--no-textfile",
                     "--quiet", env={"NODEGATE_LOCK_FILE": str(tmp_path / "lock")})
    assert result.returncode in (0, 1), result.stderr
    report = json.loads((tmp_path / "quick-latest.json").read_text())
    return result.returncode, [r for r in report["results"]
                               if r["check"] == "gpu_recovery_action"]


def test_unread_action_is_error_on_a_board_that_declares_it(tmp_path: Path) -> None:
    """A timed-out field read and a NOT_SUPPORTED on a B200 are both ERROR naming NVML."""
    data = yaml.safe_load(scenario.shipped()["b200-hgx"].read_text())
    data["gpus"][3]["nvml_errors"] = {"nvmlDeviceGetFieldValues": "NVML_ERROR_TIMEOUT"}
    data["gpus"][5]["recovery_action"] = None  # the driver answers NOT_SUPPORTED
    board = tmp_path / "b200.yaml"
    board.write_text(yaml.safe_dump(data))
    code, results = _health(str(board), "xe9680l-b200", tmp_path)
    assert code == 1
    verdicts = {r["entity"]: r["verdict"] for r in results}
    assert verdicts == {**{f"gpu{i}": "PASS" for i in range(8)}, "gpu3": "ERROR",
                        "gpu5": "ERROR"}
    by = {r["entity"]: r for r in results}
    assert "NVML_ERROR_TIMEOUT" in by["gpu3"]["evidence"]["reason"]
    assert "NVML_ERROR_NOT_SUPPORTED" in by["gpu5"]["evidence"]["reason"]
    assert "gpu.features.recovery_action: true" in by["gpu5"]["evidence"]["reason"]


def test_action_fails_naming_it_and_hopper_without_it_has_no_result(tmp_path: Path) -> None:
    blackwell, hopper = tmp_path / "b200", tmp_path / "h100"
    blackwell.mkdir()
    hopper.mkdir()
    code, results = _health("b200-hgx+recovery-reboot@gpu4", "xe9680l-b200", blackwell)
    assert code == 1
    failed = [r for r in results if r["verdict"] != "PASS"]
    assert [(r["entity"], r["verdict"], r["severity"], r["measured"]) for r in failed] == [
        ("gpu4", "FAIL", "hardware", "node_reboot")]
    assert failed[0]["evidence"]["nvml_value"] == pynvml.NVML_GPU_RECOVERY_ACTION_NODE_REBOOT
    assert "reboot" in failed[0]["evidence"]["hint"]
    code, results = _health("h100-hgx", "xe9680-h100", hopper)
    assert code == 0 and results == []


def _h100() -> GpuState:
    return GpuState(index=0, name="NVIDIA H100 80GB HBM3", pci_device_id=0x2330)


def _one(results: list[CheckResult]) -> list[CheckResult]:
    return [r for r in results if r.check == "gpu_recovery_action"]


def test_any_action_but_none_fails_even_one_this_binding_cannot_name() -> None:
    profile = resolve_profile_cached("xe9680-h100")
    for value, measured in ((pynvml.NVML_GPU_RECOVERY_ACTION_DRAIN_P2P, "drain_p2p"),
                            (4242, "unknown action 4242")):
        gpu = _h100()
        gpu.recovery_action = value
        (result,) = _one(judge_gpu(gpu, profile))
        assert (result.verdict, result.measured) == (Verdict.FAIL, measured)
        assert measured in result.evidence["message"]
    gpu = _h100()
    gpu.recovery_action = pynvml.NVML_GPU_RECOVERY_ACTION_NONE
    (result,) = _one(judge_gpu(gpu, profile))
    assert result.verdict is Verdict.PASS


def test_a_read_error_is_error_even_where_the_model_declares_no_field() -> None:
    gpu = _h100()
    gpu.read_errors["recovery_action"] = "NVML_ERROR_UNKNOWN"
    (result,) = _one(judge_gpu(gpu, resolve_profile_cached("xe9680-h100")))
    assert result.verdict is Verdict.ERROR
    assert result.evidence["nvml_errors"] == {"recovery_action": "NVML_ERROR_UNKNOWN"}
    gpu = _h100()
    gpu.unsupported.append("recovery_action")
    assert _one(judge_gpu(gpu, resolve_profile_cached("xe9680-h100"))) == []
