"""One engine, one verdict: ``nodegate validate`` and ``pytest validation/`` on the same boards.

Both front ends call ``nodegate.battery.run.run_battery``; these tests prove the plumbing
around it: the same call into it, the same checks at each level (from the registry), nothing
judged and then dropped, ERROR shown as a pytest error, and no measurement at collection time.

Each fault's battery runs once: one front end runs it for real and records it, the other is
given that very run (``tests.battery.replay``) and must call for it with the same arguments
and judge it the same. Which front end records alternates, so each runs the faulty boards for
real, at every level, in half the cases; the remaining tests run pytest for real end to end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from nodegate.battery.registry import CHECKS
from nodegate.battery.run import above_level
from nodegate.profiles import resolve_profile
from nodegate.results import CheckResult, Severity, Verdict
from nodegate.vocabulary import LEVEL_RANK, Level
from tests.battery.replay import RECORD, REPLAY, REPLAYED, call_path
from tests.conftest import ROOT, run_cli

GROUPS = "gpu,log,load"
FAULTY = ["power-brake@gpu1", "thermal-slowdown@gpu6", "nvlink-down@gpu3.link5",
          "ecc-dbe@gpu5", "cooling-failure@gpu4", "clocks-stuck-low@gpu1"]


def _env(tmp_path: Path) -> dict[str, str]:
    return {"NODEGATE_LOCK_FILE": str(tmp_path / "lock")}


def _pytest(board: str, tmp_path: Path, *extra: str, level: str = "quick",
            groups: str = GROUPS, target: str = "validation",
            env: dict[str, str] | None = None) -> Any:
    return run_cli(
        "sim", "run", board, "--", sys.executable, "-m", "pytest", str(ROOT / target), "-q",
        "-p", "no:cacheprovider", "--nodegate-profile", "sim-h100-hgx",
        "--nodegate-level", level, "--nodegate-checks", groups,
        "--nodegate-duration-scale", "0.02", "--nodegate-report-dir", str(tmp_path / "p"),
        "--junitxml", str(tmp_path / "p" / "junit.xml"), *extra,
        env={**_env(tmp_path), **(env or {})}, timeout=600)


def _validate(board: str, tmp_path: Path, level: str, env: dict[str, str]) -> Any:
    """``nodegate validate`` through its own entry point, ``run_battery`` wrapped to record
    or replay per ``env`` (``tests.battery.replay``)."""
    return run_cli("sim", "run", board, "--", sys.executable, "-m", "tests.battery.replay",
                   "validate", "--level", level,
                   "--profile", "sim-h100-hgx", "--checks", GROUPS, "--duration-scale", "0.02",
                   "--report-dir", str(tmp_path / "v"), "--no-textfile",
                   env={**_env(tmp_path), **env}, timeout=600)


def _outcome_of(verdicts: set[str]) -> str:
    """What pytest must show for one check, given its verdicts on every entity."""
    if "ERROR" in verdicts:
        return "error"
    if "FAIL" in verdicts:
        return "failed"
    if verdicts == {"SKIP"}:
        return "skipped"
    return "passed"


def _junit_outcomes(path: Path) -> dict[str, str]:
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name", "").removeprefix("test_")
        kinds = {child.tag for child in case}
        out[name] = ("error" if "error" in kinds else "failed" if "failure" in kinds
                     else "skipped" if "skipped" in kinds else "passed")
    return out


def _raw(report: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(r["check"], r["entity"], r["verdict"]) for r in report["results"]}


#: Faults that show only under a long load. At acceptance only these run: the static faults
#: go through the same plumbing at quick and standard, and each acceptance run of one cost
#: about a minute of CI (4 minutes for the four, 2026-12-05) to show it again.
LOAD_ONLY = ["cooling-failure@gpu4", "clocks-stuck-low@gpu1"]
CASES = [pytest.param(fault, level, id=f"{fault}-{level}")
         for level in ("quick", "standard") for fault in FAULTY]
CASES += [pytest.param(fault, "acceptance", id=f"{fault}-acceptance") for fault in LOAD_ONLY]


def recorder(fault: str, level: str) -> str:
    """The front end that runs this case's battery for real, the other replaying it:
    alternating over the faults and from one level to the next, so each fault is measured by
    both across its levels and each front end runs loads for real at standard (three faults)
    and at acceptance (one)."""
    return ("validate", "pytest")[(FAULTY.index(fault) + LEVEL_RANK[level]) % 2]


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.parametrize(("fault", "level"), CASES)
def test_both_front_ends_give_one_verdict(fault: str, level: str, tmp_path: Path) -> None:
    board = f"h100-hgx+{fault}"
    recording = tmp_path / "battery.pickle"
    record, replay = {RECORD: str(recording)}, {REPLAY: str(recording)}
    if recorder(fault, level) == "validate":
        validated = _validate(board, tmp_path, level, record)
        tested = _pytest(board, tmp_path, "-p", "tests.battery.replay", level=level, env=replay)
    else:
        tested = _pytest(board, tmp_path, "-p", "tests.battery.replay", level=level, env=record)
        validated = _validate(board, tmp_path, level, replay)
    # some faults show only under a long enough load (cooling, stuck clocks): at quick or at
    # the scaled-down standard level the board may pass, but both front ends must say so
    expected = {1} if level == "acceptance" else {0, 1}
    # the replaying front end asked for the run the recording one made: same profile, level,
    # groups, duration scale, Xid window, NVML deadline, workers
    asked = json.loads(call_path(f"{recording}{REPLAYED}").read_text())
    assert asked == json.loads(call_path(recording).read_text())
    report = json.loads((tmp_path / "v" / f"{level}-latest.json").read_text())
    battery = json.loads((tmp_path / "p" / f"battery-{level}.json").read_text())
    # one run judged by both: every check, entity and verdict the same, timed figures too
    assert _raw(report) == _raw(battery)
    assert validated.returncode == tested.returncode, (validated.stderr[-2000:],
                                                       tested.stdout[-2000:])
    assert validated.returncode in expected, validated.stderr[-2000:]
    per_check: dict[str, set[str]] = {}
    for check, _, verdict in _raw(battery):  # pytest's own run, against its own JUnit
        per_check.setdefault(check, set()).add(verdict)
    shown = _junit_outcomes(tmp_path / "p" / "junit.xml")
    assert {c: _outcome_of(v) for c, v in per_check.items()} == \
        {c: o for c, o in shown.items() if c in per_check}
    # every test pytest ran at this level had results, but for a check the profile's GPU
    # model does not have (a feature its layer does not declare: no result, pytest skips it);
    # none is judged above its level
    profile = resolve_profile("sim-h100-hgx").data
    absent = set(shown) - set(per_check)
    assert set(per_check) <= set(shown)
    assert all(not CHECKS[c].applies(profile, Level(level)) and shown[c] == "skipped"
               for c in absent), absent
    assert all(LEVEL_RANK[CHECKS[c].level] <= LEVEL_RANK[level] for c in per_check)


def test_collect_only_measures_nothing(tmp_path: Path) -> None:
    """No simulator, no driver: collection must still work, since nothing is measured."""
    collected = _collect(tmp_path, "--nodegate-profile", "sim-h100-hgx",
                         "--nodegate-report-dir", str(tmp_path / "p"))
    assert collected.returncode == 0, collected.stdout[-2000:]
    assert f"{len(CHECKS)} tests collected" in collected.stdout
    assert not (tmp_path / "p").exists()       # no battery ran, so no report


def _collect(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", str(ROOT / "validation"), "--collect-only", "-q",
         "-p", "no:cacheprovider", "--nodegate-level", "acceptance", *extra],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=False,
        env={**os.environ, **_env(tmp_path)})


def test_level_markers_come_from_the_registry(tmp_path: Path) -> None:
    """``-m standard`` selects exactly the registry's standard checks."""
    collected = _collect(tmp_path, "-m", "standard")
    names = {line.rsplit("::test_", 1)[1] for line in collected.stdout.splitlines()
             if "::test_" in line}
    assert names == {c for c, info in CHECKS.items() if info.level == "standard"}


def test_a_partial_battery_fails_on_results_no_test_claims(tmp_path: Path) -> None:
    """Only the NVLink file collected: the other gpu results would be dropped silently."""
    result = _pytest("h100-hgx", tmp_path, groups="gpu", target="validation/gpu/test_nvlink.py")
    assert result.returncode == 1, result.stdout[-2000:]
    assert "results no battery test claims" in result.stdout
    assert "gpu_count" in result.stdout


def test_healthy_board_passes_both_front_ends_at_quick(tmp_path: Path) -> None:
    tested = _pytest("h100-hgx", tmp_path, groups="gpu,log")
    assert tested.returncode == 0, tested.stdout[-3000:]
    assert "results no battery test claims" not in tested.stdout


@pytest.mark.torch
def test_error_is_a_pytest_error(tmp_path: Path) -> None:
    """A foreign process holds GPU 3: the load phases cannot run, which is ERROR, not FAIL."""
    result = _pytest("h100-hgx+foreign-process@gpu3", tmp_path, level="standard",
                     groups="gpu,load")
    assert result.returncode == 1, result.stdout[-2000:]
    shown = _junit_outcomes(tmp_path / "p" / "junit.xml")
    assert shown["gemm_completed"] == "error"
    assert "ERROR validation/load/test_compute.py::test_gemm_completed" in result.stdout


def test_above_level_names_checks_the_registry_places_higher() -> None:
    def result(check: str) -> CheckResult:
        return CheckResult(check=check, entity="node", measured=None, threshold=None,
                           unit="", verdict=Verdict.PASS, severity=Severity.INFO)

    assert above_level([result("gpu_count"), result("burnin_loss")], "standard") == \
        ["burnin_loss"]
    assert above_level([result("burnin_loss")], "acceptance") == []


def test_replay_gives_the_recorded_run_back_and_refuses_another_call(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The seam the comparison stands on: a recording is the real run with the call that
    made it; a replay measures nothing, and a call for another run is refused."""
    import functools

    from nodegate.battery import run as battery_run
    from nodegate.battery.run import BatteryRun
    from nodegate.probes.nvml import DEFAULT_DEADLINE_S
    from nodegate.profiles.installed import select_profile
    from nodegate.progress import for_stream
    from tests.battery import replay

    measured: list[str] = []

    @functools.wraps(battery_run.run_battery)
    def real(profile: Any, level: str, groups: tuple[str, ...], **_: Any) -> BatteryRun:
        measured.append(level)
        return BatteryRun(results=[], started_at=1.0, duration_s=2.0, notes=[level])

    profile = select_profile("sim-h100-hgx")
    recording = tmp_path / "run.pickle"
    monkeypatch.setattr(battery_run, "run_battery", real)
    monkeypatch.setenv(RECORD, str(recording))
    replay.install()
    ran = battery_run.run_battery(profile, "standard", ("gpu", "load"), duration_scale=0.02)
    assert measured == ["standard"] and ran.notes == ["standard"]

    monkeypatch.setattr(battery_run, "run_battery", real)
    monkeypatch.delenv(RECORD)
    monkeypatch.setenv(REPLAY, str(recording))
    replay.install()
    # as the plugin calls it (defaults left out) and as validate does (spelled out)
    again = battery_run.run_battery(profile, "standard", ("gpu", "load"), duration_scale=0.02,
                                    nvml_deadline_s=DEFAULT_DEADLINE_S, progress=for_stream(sys.stderr),
                                    report_dir=tmp_path)
    assert measured == ["standard"] and again.notes == ["standard"]
    assert json.loads(call_path(f"{recording}{REPLAYED}").read_text()) == \
        json.loads(call_path(recording).read_text())
    with pytest.raises(SystemExit, match="replay refused"):
        battery_run.run_battery(profile, "standard", ("gpu", "load"), duration_scale=1.0)
    assert measured == ["standard"]

    monkeypatch.setenv(RECORD, str(recording))
    with pytest.raises(SystemExit, match="both set"):
        replay.install()
