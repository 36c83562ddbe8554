"""Could not measure = ERROR: an unreadable kernel log, an NVML field that
errors, never a PASS or a SKIP (docs/verdicts.md)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from nodegate.judge.gpu import judge_gpu
from nodegate.probes.kernel_log import read_kernel_log
from nodegate.probes.nvml import GpuState, NvLinkState, _Reader
from nodegate.profiles.cache import resolve_profile_cached
from nodegate.results import CheckResult, Verdict
from tests.conftest import run_cli

# --------------------------------------------------------------------------- kernel log


def test_missing_override_file_is_a_problem_not_an_empty_log(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEGATE_KERNEL_LOG", str(tmp_path / "gone.log"))
    log = read_kernel_log()
    assert log.lines == [] and log.problem is not None
    assert "gone.log" in log.problem and "file not found" in log.problem


def test_refused_journalctl_and_dmesg_are_a_problem(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As a non-root user on a kernel with dmesg_restrict: both tools exit non-zero."""
    for tool, message in (("journalctl", "No journal files were opened due to insufficient "
                                         "permissions."),
                          ("dmesg", "dmesg: read kernel buffer failed: Operation not permitted")):
        script = tmp_path / tool
        script.write_text(f"#!/bin/sh\necho '{message}' >&2\nexit 1\n")
        script.chmod(0o755)
    monkeypatch.delenv("NODEGATE_KERNEL_LOG", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    log = read_kernel_log()
    assert log.source == "none" and log.problem is not None
    assert "insufficient permissions" in log.problem
    assert "Operation not permitted" in log.problem


def test_readable_empty_log_is_no_problem(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "k.log").write_text("")
    monkeypatch.setenv("NODEGATE_KERNEL_LOG", str(tmp_path / "k.log"))
    assert read_kernel_log().problem is None


def test_health_with_no_readable_kernel_log_errors_every_gpu(tmp_path: Path) -> None:
    script = ('rm -f "$NODEGATE_KERNEL_LOG" && exec nodegate health --profile xe9680-h100 '
              f'--checks gpu,log --report-dir {tmp_path}/r --no-textfile --quiet')
    result = run_cli("sim", "run", "h100-hgx", "--", "sh", "-c", script,
                     env={"NODEGATE_LOCK_FILE": str(tmp_path / "lock")})
    assert result.returncode == 1, result.stderr
    report = json.loads((tmp_path / "r" / "quick-latest.json").read_text())
    xids = {r["entity"]: r for r in report["results"] if r["check"] == "xid_events"}
    assert sorted(xids) == [f"gpu{i}" for i in range(8)]
    assert {r["verdict"] for r in xids.values()} == {"ERROR"}
    assert "kernel log unreadable" in xids["gpu0"]["evidence"]["reason"]
    # page retirement does not exist on Hopper: its SKIP is the only other non-PASS
    others = {r["verdict"] for r in report["results"]
              if r["check"] not in ("xid_events", "retired_pages")}
    assert others == {"PASS"}


# --------------------------------------------------------------------------- NVML fields


class _Error(Exception):
    def __init__(self, value: int) -> None:
        super().__init__({3: "Not Supported", 999: "Unknown Error", 15: "GPU is lost"}[value])
        self.value = value


FAKE_NVML = SimpleNamespace(NVMLError=_Error, NVML_ERROR_GPU_IS_LOST=15,
                            NVML_ERROR_NOT_SUPPORTED=3, NVML_ERROR_FUNCTION_NOT_FOUND=13)


def _fails(code: int) -> object:
    def call() -> None:
        raise _Error(code)
    return call


def test_reader_keeps_not_supported_apart_from_errors() -> None:
    gpu = GpuState(index=2)
    reader = _Reader(FAKE_NVML, gpu)
    assert reader.read("sbe_volatile", _fails(3)) is None  # type: ignore[arg-type]
    assert reader.read("dbe_volatile", _fails(999)) is None  # type: ignore[arg-type]
    assert gpu.unsupported == ["sbe_volatile"]
    assert gpu.read_errors == {"dbe_volatile": "NVML_ERROR_UNKNOWN (Unknown Error)"}


def _by(results: list[CheckResult], check: str, entity: str) -> CheckResult:
    return next(r for r in results if r.check == check and r.entity == entity)


def test_a_field_that_errors_is_error_and_not_supported_stays_skip() -> None:
    profile = resolve_profile_cached("xe9680-h100")
    gpu = GpuState(index=0, name=profile.data["gpu"]["model"], ecc_enabled=False,
                   read_errors={"dbe_volatile": "Unknown Error",
                                "nvlink0.replay": "Unknown Error"},
                   unsupported=["sbe_volatile"],
                   nvlinks=[NvLinkState(link=0, active=True, version_enum=6, generation=4,
                                        crc_flit=0, crc_data=0, recovery=0)])
    results = judge_gpu(gpu, profile)
    dbe = _by(results, "ecc_dbe_volatile", "gpu0")
    assert dbe.verdict is Verdict.ERROR
    assert dbe.evidence["reason"] == "NVML error: dbe_volatile: Unknown Error"
    assert dbe.evidence["nvml_errors"] == {"dbe_volatile": "Unknown Error"}
    # with ECC off NVML has no counters: NOT_SUPPORTED there is explained, and stays a SKIP
    sbe = _by(results, "ecc_sbe_volatile", "gpu0")
    assert sbe.verdict is Verdict.SKIP and "ECC is disabled" in sbe.evidence["reason"]
    assert _by(results, "nvlink_replay_errors", "gpu0.link0").verdict is Verdict.ERROR
    assert _by(results, "nvlink_crc_errors", "gpu0.link0").verdict is Verdict.PASS


def test_page_retirement_not_supported_beside_row_remapping_names_the_remap_checks() -> None:
    """A real H200 answers NOT_SUPPORTED for page retirement (docs/hardware-runs/): the check
    does not apply there, and the SKIP says which checks judge that memory instead. Without
    remap data (an older GPU that also does not report pages) it stays the plain SKIP."""
    profile = resolve_profile_cached("h200-single")
    hopper = GpuState(index=0, remap_pending=False, remap_failure=False, remap_uncorrectable=0,
                      remap_correctable=1,
                      unsupported=["retired_pages_sbe", "retired_pages_dbe",
                                   "retired_pages_pending"])
    skip = _by(judge_gpu(hopper, profile), "retired_pages", "gpu0")
    assert skip.verdict is Verdict.SKIP
    assert "remap_pending" in skip.evidence["reason"]
    older = GpuState(index=0, unsupported=["retired_pages_sbe", "retired_pages_dbe"])
    plain = _by(judge_gpu(older, profile), "retired_pages", "gpu0")
    assert plain.verdict is Verdict.SKIP
    # the model declares no page retirement (gpu.features): the SKIP says so
    assert plain.evidence["reason"].startswith("no page retirement on this GPU")


@pytest.mark.parametrize(("current", "pending", "change"),
                         [(True, True, None), (True, False, True), (False, True, True)])
def test_ecc_mode_flags_a_change_only_where_pending_differs(
        current: bool, pending: bool, change: bool | None) -> None:
    """NVML's second value is the pending mode: enabled/enabled (the real H200) is no change."""
    profile = resolve_profile_cached("h200-single")
    result = _by(judge_gpu(GpuState(index=0, ecc_enabled=current, ecc_pending=pending), profile),
                 "ecc_mode", "gpu0")
    assert result.evidence["pending"] is pending
    assert result.evidence.get("pending_change") is change
    assert result.verdict is (Verdict.PASS if current else Verdict.FAIL)
