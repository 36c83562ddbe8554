"""Counters judged by growth since the previous report of this boot."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from nodegate.judge.common import against
from nodegate.judge.counters import judge_growth, previous_of_boot
from nodegate.profiles import Profile, resolve_profile
from nodegate.profiles.threshold_keys import Key
from nodegate.report import build, to_json
from nodegate.report.history import recent_reports
from nodegate.results import CheckResult, Severity, Verdict

BOOT = "0d4c5e8a-6c1f-4f4e-9a43-2b7f0c6e1d55"
NOW = dt.datetime(2026, 12, 4, 12, 0, tzinfo=dt.timezone.utc)


@pytest.fixture(scope="module")
def profile() -> Profile:
    return resolve_profile("xe9680-h100")


def _crc(profile: Profile, total: int, entity: str = "gpu3.link5") -> CheckResult:
    """What ``judge.gpu`` emits for a link's CRC total (the same call)."""
    return against("nvlink_crc_errors", entity, total,
                   profile.threshold(Key.NVLINK_CRC_ERRORS_MAX), fail=Verdict.WARN,
                   severity=Severity.WARNING, flit=total, data=0)


def _previous(profile: Profile, results: list[CheckResult], *, minutes_ago: float,
              boot_id: str = BOOT) -> dict[str, Any]:
    finished = NOW - dt.timedelta(minutes=minutes_ago)
    report = build(results, node="n1", profile=profile.name, level="quick",
                   started_at=finished - dt.timedelta(seconds=1), finished_at=finished,
                   backend="nvml", boot_id=boot_id)
    data: dict[str, Any] = json.loads(to_json(report))
    return data


def test_old_errors_without_growth_pass(profile: Profile) -> None:
    before = _previous(profile, [_crc(profile, 50)], minutes_ago=5)
    [result] = judge_growth([_crc(profile, 50)], before, profile, now=NOW.timestamp())
    assert result.verdict is Verdict.PASS
    assert result.measured == 0 and result.unit == "count/h"
    assert result.evidence["absolute"] == 50 and result.evidence["growth"] == 0
    assert result.evidence["previous_report"] == before["report_id"]


def test_ninety_gained_in_five_minutes_fails(profile: Profile) -> None:
    assert _crc(profile, 90).verdict is Verdict.PASS  # the total alone is under its max of 100
    before = _previous(profile, [_crc(profile, 0)], minutes_ago=5)
    [result] = judge_growth([_crc(profile, 90)], before, profile, now=NOW.timestamp())
    assert result.verdict is Verdict.FAIL and result.severity is Severity.HARDWARE
    assert result.measured == 1080.0  # 90 in 5 minutes
    assert result.threshold["max"] == 60
    assert result.evidence["absolute"] == 90 and result.evidence["since_s"] == 300.0


def test_a_stray_error_right_after_the_previous_report_is_no_storm(profile: Profile) -> None:
    before = _previous(profile, [_crc(profile, 7)], minutes_ago=0.25)
    [result] = judge_growth([_crc(profile, 8)], before, profile, now=NOW.timestamp())
    assert result.verdict is Verdict.PASS and result.measured == 12.0  # over 5 min, not 15 s


@pytest.mark.parametrize(("prior_total", "boot", "why"), [
    (None, BOOT, "no earlier report of this boot"),
    (40, "another-boot", "no earlier report of this boot"),
    (400, BOOT, "the counter went down"),
])
def test_without_a_comparable_report_the_total_is_judged(profile: Profile, prior_total: int | None,
                                                          boot: str, why: str) -> None:
    reports = [] if prior_total is None else [
        _previous(profile, [_crc(profile, prior_total)], minutes_ago=5, boot_id=boot)]
    previous = previous_of_boot(reports, BOOT)
    [result] = judge_growth([_crc(profile, 150)], previous, profile, now=NOW.timestamp())
    assert result.verdict is Verdict.WARN  # 150 > nvlink_crc_errors_max 100, as before
    assert result.measured == 150 and result.evidence["absolute"] == 150
    assert why in result.evidence["basis"]


def test_previous_rate_report_gives_its_total_and_other_checks_pass_through(
        profile: Profile) -> None:
    first = _previous(profile, [_crc(profile, 10)], minutes_ago=65)
    rated = judge_growth([_crc(profile, 10)], first, profile,
                         now=(NOW - dt.timedelta(minutes=5)).timestamp())
    assert rated[0].measured == 0
    second = _previous(profile, rated, minutes_ago=5)  # measured is a rate, the total in evidence
    other = against("idle_temperature", "gpu3", 35.0, profile.threshold(Key.GPU_TEMP_IDLE_MAX_C))
    result, untouched = judge_growth([_crc(profile, 20), other], second, profile,
                                     now=NOW.timestamp())
    assert result.evidence["previous"] == 10 and result.measured == 120.0
    assert result.verdict is Verdict.FAIL and untouched is other


def test_recent_reports_feed_the_previous_of_this_boot(profile: Profile, tmp_path: Path) -> None:
    older = _previous(profile, [_crc(profile, 1)], minutes_ago=30)
    newer = _previous(profile, [_crc(profile, 2)], minutes_ago=10, boot_id="old-boot")
    (tmp_path / "quick-20261204T113000.000Z.json").write_text(json.dumps(older))
    (tmp_path / "quick-20261204T115000.000Z.json").write_text(json.dumps(newer))
    found = previous_of_boot(recent_reports(tmp_path, 4), BOOT)
    assert found is not None and found["report_id"] == older["report_id"]
