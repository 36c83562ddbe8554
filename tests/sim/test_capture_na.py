"""A capture's N/A stays N/A: ``nvidia-smi -q -x`` prints N/A where NVML answered
NOT_SUPPORTED and the driver's error text (``Requested functionality has been deprecated``)
where it answered an error; the import keeps both as that NVML answer (the scenario's
``nvml_errors``), never as a value. Real captures: telegraf's testdata (MIT), see
tests/sim/data/corpus/README.md."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nodegate.errors import ConfigError
from nodegate.sim.capture import scenario_from_capture
from tests.conftest import run_cli

NvmlRun = Callable[..., Any]
CORPUS = Path(__file__).parent / "data" / "corpus"
RTX_3090 = CORPUS / "telegraf-3090-v13.xml"  # ECC N/A, remapped rows N/A, clocks deprecated
A10G = CORPUS / "telegraf-a10g.xml"


def test_na_fields_become_nvml_answers_not_values() -> None:
    gpu = scenario_from_capture(RTX_3090, name="x")["gpus"][0]
    assert gpu["nvml_errors"] == {
        "nvmlDeviceGetEccMode": "NVML_ERROR_NOT_SUPPORTED",
        "nvmlDeviceGetDefaultEccMode": "NVML_ERROR_NOT_SUPPORTED",
        "nvmlDeviceGetTotalEccErrors": "NVML_ERROR_NOT_SUPPORTED",
        "nvmlDeviceGetMemoryErrorCounter": "NVML_ERROR_NOT_SUPPORTED",
        "nvmlDeviceGetRemappedRows": "NVML_ERROR_NOT_SUPPORTED",
        "nvmlDeviceGetRetiredPages": "NVML_ERROR_NOT_SUPPORTED",
        "nvmlDeviceGetRetiredPagesPendingStatus": "NVML_ERROR_NOT_SUPPORTED",
        "nvmlDeviceGetApplicationsClock": "NVML_ERROR_DEPRECATED",
        "nvmlDeviceGetDefaultApplicationsClock": "NVML_ERROR_DEPRECATED",
    }
    assert "remapped_rows" not in gpu or not gpu["remapped_rows"]
    assert "applications_graphics_mhz" not in gpu["clocks"]


def test_replayed_na_reads_as_nvml_answers(tmp_path: Path, nvml: NvmlRun) -> None:
    """Before: ECC "enabled" with zero counters, remapped rows 0, application clocks = max."""
    out = tmp_path / "rtx3090.yaml"
    assert run_cli("sim", "import", str(RTX_3090), "-o", str(out)).returncode == 0
    got = nvml(str(out), """
h = n.nvmlDeviceGetHandleByIndex(0)
out["ecc_mode"] = err(n.nvmlDeviceGetEccMode, h)
out["dbe"] = err(n.nvmlDeviceGetTotalEccErrors, h, 1, 0)
out["remap"] = err(n.nvmlDeviceGetRemappedRows, h)
out["app"] = err(n.nvmlDeviceGetApplicationsClock, h, n.NVML_CLOCK_GRAPHICS)
out["max"] = n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_GRAPHICS)
""")
    assert got["ecc_mode"] == got["dbe"] == got["remap"] == "NVMLError_NotSupported"
    assert got["app"] == "NVMLError_Deprecated"
    assert isinstance(got["max"], int)


def test_judged_na_capture_gives_no_false_inforom_error(tmp_path: Path) -> None:
    """ECC N/A became "enabled" with zero counters, then a false "corrupt InfoROM" ERROR (no
    ECC object on an "ECC board"). Now: ecc_mode and the counters are ERROR (the profile's
    model has ECC, this card answers NOT_SUPPORTED), the InfoROM is judged on what it has."""
    out = tmp_path / "rtx3090.yaml"
    assert run_cli("sim", "import", str(RTX_3090), "-o", str(out)).returncode == 0
    res = run_cli("sim", "run", str(out), "--", "nodegate", "health", "--profile",
                  "h200-single", "--checks", "gpu", "--report-dir", str(tmp_path / "r"),
                  "--no-textfile", "--quiet", env={"NODEGATE_LOCK_FILE": str(tmp_path / "l")})
    assert res.returncode == 1 and "Traceback" not in res.stderr
    results = json.loads((tmp_path / "r" / "quick-latest.json").read_text())["results"]
    by = {r["check"]: r for r in results if r["entity"] == "gpu0"}
    inforom = by["inforom_uniform"]["evidence"].get("reason", "")
    assert "corrupt" not in inforom
    for check in ("ecc_mode", "ecc_dbe_volatile", "remap_pending"):
        assert by[check]["verdict"] == "ERROR", check
        assert "NVML_ERROR_NOT_SUPPORTED" in by[check]["evidence"]["reason"]
        assert by[check].get("measured") is None


@pytest.mark.parametrize("capture", sorted(CORPUS.glob("*.xml")), ids=lambda p: p.stem)
def test_no_na_in_any_real_capture_becomes_a_number(capture: Path) -> None:
    """Across the corpus: an ECC or remapped-rows N/A is never a counter in the scenario."""
    try:
        data = scenario_from_capture(capture, name="x", allow_partial=True)
    except ConfigError as exc:  # the corpus test covers the refusals
        pytest.skip(f"refused: {exc}")
    text = capture.read_text()
    for gpu in data["gpus"]:
        errors = gpu.get("nvml_errors", {})
        if "nvmlDeviceGetTotalEccErrors" in errors:
            assert not {"volatile_sbe", "volatile_dbe"} & set(gpu.get("ecc", {}))
        if "nvmlDeviceGetRemappedRows" in errors:
            assert not gpu.get("remapped_rows")
    if "<remapped_rows>N/A</remapped_rows>" in text:
        assert all(g.get("nvml_errors", {}).get("nvmlDeviceGetRemappedRows")
                   for g in data["gpus"])
