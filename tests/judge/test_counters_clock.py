"""Counter rates after a wall-clock step, and totals judged as well as rates."""

from __future__ import annotations

import datetime as dt

import pytest

from nodegate.judge.counters import judge_growth
from nodegate.profiles import Profile, resolve_profile
from nodegate.results import Verdict
from tests.judge.test_counters import BOOT, NOW, _crc, _previous


@pytest.fixture(scope="module")
def profile() -> Profile:
    return resolve_profile("xe9680-h100")


def test_a_storm_is_timed_by_the_boot_clock_not_a_26_year_wall_interval(
        profile: Profile) -> None:
    """Fails before this change: the previous report of this boot carries a year-2000 date
    (RTC reset before NTP), so 90 CRC errors read as a rate over 26 years and passed."""
    before = _previous(profile, [_crc(profile, 0)], minutes_ago=0)
    before["finished_at"] = "2000-01-01T00:00:00.000Z"
    before["started_at"] = "1999-12-31T23:59:59.000Z"
    before["boottime_s"] = 9700.0
    [result] = judge_growth([_crc(profile, 90)], before, profile, now=NOW.timestamp(),
                            boottime_s=10000.0)
    assert result.verdict is Verdict.FAIL, result
    assert result.measured == 1080.0 and result.evidence["since_s"] == 300.0
    assert result.evidence["clock"] == "boot-relative clock"


def test_a_previous_report_dated_before_this_boot_gives_no_rate(profile: Profile) -> None:
    """Without a boot time in the previous report, a wall interval longer than the boot is
    no interval: the total is judged, and the evidence says why."""
    before = _previous(profile, [_crc(profile, 0)], minutes_ago=0)
    before["finished_at"] = "2000-01-01T00:00:00.000Z"
    before["started_at"] = "1999-12-31T23:59:59.000Z"
    [result] = judge_growth([_crc(profile, 150)], before, profile, now=NOW.timestamp(),
                            boottime_s=10000.0)
    assert result.verdict is Verdict.WARN  # 150 over the total's maximum of 100
    assert "before the boot" in result.evidence["basis"]


def test_a_previous_report_dated_in_the_future_gives_no_rate(profile: Profile) -> None:
    before = _previous(profile, [_crc(profile, 0)], minutes_ago=-600)
    [result] = judge_growth([_crc(profile, 150)], before, profile, now=NOW.timestamp())
    assert result.verdict is Verdict.WARN
    assert "future" in result.evidence["basis"]


def test_a_passing_rate_does_not_hide_a_total_over_its_maximum(profile: Profile) -> None:
    """Fails before this change: 150 CRC errors (maximum 100) that did not grow passed."""
    before = _previous(profile, [_crc(profile, 150)], minutes_ago=10)
    [result] = judge_growth([_crc(profile, 150)], before, profile, now=NOW.timestamp())
    assert result.verdict is Verdict.WARN, result
    assert result.evidence["growth"] == 0 and result.evidence["total_verdict"] == "WARN"
    assert "above the profile's maximum" in result.evidence["basis"]


def test_previous_of_boot_orders_by_sequence(profile: Profile) -> None:
    from nodegate.judge.counters import previous_of_boot

    older = _previous(profile, [_crc(profile, 5)], minutes_ago=-60 * 24 * 365)
    older["sequence"] = 3
    newer = _previous(profile, [_crc(profile, 7)], minutes_ago=2)
    newer["sequence"] = 4
    assert previous_of_boot([older, newer], BOOT) is newer
    assert dt.datetime.fromisoformat(older["finished_at"][:-1]).year > NOW.year
