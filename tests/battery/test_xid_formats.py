"""Every kernel-log line format the parser accepts keeps its event time, from real lines.

The lines (tests/battery/data/kernel-log-formats.json) come from public logs, each with its
origin and licence. A line's time is either the right one or unknown, and an unknown time
counts as inside every ``--xid-window``, never outside.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from nodegate.judge.xid import judge_xids
from nodegate.probes.kernel_log import (
    LINE_FORMATS,
    line_time,
    parse_sxids,
    parse_xids,
    within_window,
)
from nodegate.results import Verdict

DATA = json.loads((Path(__file__).parent / "data" / "kernel-log-formats.json").read_text())
NOW = datetime.fromisoformat(DATA["now_utc"]).timestamp()
LINES: list[dict[str, Any]] = DATA["lines"]


def _expected_time(row: dict[str, Any]) -> tuple[float | None, float | None]:
    """(seconds since boot, epoch) the row's line must give."""
    if "utc" in row:
        return None, datetime.fromisoformat(row["utc"]).timestamp()
    if "local" in row:  # naive: this machine's zone, as the parser reads it
        return None, datetime.fromisoformat(row["local"]).timestamp()
    return row.get("seconds"), None


def test_every_accepted_format_has_real_lines() -> None:
    assert {f.name for f in LINE_FORMATS} <= {row["format"] for row in LINES}
    for row in LINES:
        assert row["origin"] and row["licence"], row["line"]


@pytest.mark.parametrize("row", LINES, ids=[f"{r['format']}-{i}" for i, r in enumerate(LINES)])
def test_a_real_line_keeps_its_code_bus_and_time(row: dict[str, Any]) -> None:
    seconds, epoch = _expected_time(row)
    when = line_time(row["line"], now_wall=NOW)
    assert when.format == row["format"]
    if "sxid" in row:
        (event,) = parse_sxids([row["line"]], now_wall=NOW)
        assert (event.sxid, event.switch, event.bus_id) == (row["sxid"], row["switch"], row["bus"])
    else:
        (xid,) = parse_xids([row["line"]], now_wall=NOW)
        assert (xid.xid, xid.bus_id, xid.unparsed) == (row["xid"], row["bus"], None)
        if "pid" in row:
            assert xid.pid == row["pid"]
        event = xid  # type: ignore[assignment]
    assert event.seconds == seconds
    assert event.epoch == (pytest.approx(epoch, abs=1e-6) if epoch is not None else None)
    if epoch is not None:
        assert event.stamp and event.stamp in row["line"]


@pytest.mark.parametrize("row", [r for r in LINES if "xid" in r],
                         ids=[f"{r['format']}-{i}" for i, r in enumerate(LINES) if "xid" in r])
def test_the_window_keeps_a_recent_event_and_drops_an_old_one(row: dict[str, Any]) -> None:
    """An hour after the event it is inside a 2 h window and outside a 30 min one; an
    event with no time stays inside both."""
    seconds, epoch = _expected_time(row)
    events = parse_xids([row["line"]], now_wall=NOW)
    if epoch is not None:  # the log is a file: no uptime, the wall clock decides
        after = epoch + 3600
        assert within_window(events, 7200, None, now_wall=after) == events
        assert within_window(events, 1800, None, now_wall=after) == []
    elif seconds is not None:  # this boot's log: the uptime decides
        assert within_window(events, 7200, seconds + 3600) == events
        assert within_window(events, 1800, seconds + 3600) == []
    else:
        assert within_window(events, 1800, 10.0, now_wall=NOW) == events
        assert within_window(events, 1800, None, now_wall=NOW) == events


def test_syslog_dates_have_no_year_so_the_latest_one_not_after_now_is_taken() -> None:
    line = "Dec 31 23:59:59 gpu-node kernel: NVRM: Xid (PCI:0000:01:00): 79, GPU lost"
    (event,) = parse_xids([line], now_wall=NOW)  # now: 2026-12-06 -> Dec 31 of 2025
    assert event.epoch == datetime(2025, 12, 31, 23, 59, 59).timestamp()


@pytest.mark.parametrize("line", [
    "Feb 30 05:20:53 host kernel: NVRM: Xid (PCI:0000:01:00): 79, GPU lost",
    "2026-13-01T05:20:53+00:00 host kernel: NVRM: Xid (PCI:0000:01:00): 79, GPU lost",
    "2026-12-06T25:61:99,000000+00:00 NVRM: Xid (PCI:0000:01:00): 79, GPU lost",
    "[Sun Dec 32 05:20:53 2026] NVRM: Xid (PCI:0000:01:00): 79, GPU lost",
    "[Sun Dec  6 05:20:53 0000] NVRM: Xid (PCI:0000:01:00): 79, GPU lost",
    "[ \u0661\u0662.5] NVRM: Xid (PCI:0000:01:00): 79, GPU lost",
    "[" + "9" * 5000 + ".5] NVRM: Xid (PCI:0000:01:00): 79, GPU lost",
])
def test_a_stamp_that_names_no_real_time_is_unknown_and_inside_every_window(line: str) -> None:
    (event,) = parse_xids([line], now_wall=NOW)
    assert (event.xid, event.seconds, event.epoch) == (79, None, None)
    assert within_window([event], 60, 100.0, now_wall=NOW) == [event]


def test_a_stamp_from_before_this_boot_is_not_believed() -> None:
    """A year-2000 stamp in this boot's log (RTC reset, NTP stepped the clock later) says
    nothing about when the event was: it stays inside the window."""
    line = "2000-01-01T00:00:10+00:00 gpu-node kernel: NVRM: Xid (PCI:0000:01:00): 79, lost"
    events = parse_xids([line], now_wall=NOW)
    assert within_window(events, 60, 3600.0, now_wall=NOW) == events  # this boot's log
    assert within_window(events, 60, None, now_wall=NOW) == []  # a saved file: old is old


def test_a_stamp_in_the_future_stays_inside() -> None:
    line = "2030-01-01T00:00:00+00:00 gpu-node kernel: NVRM: Xid (PCI:0000:01:00): 79, lost"
    events = parse_xids([line], now_wall=NOW)
    assert within_window(events, 60, None, now_wall=NOW) == events


@pytest.mark.parametrize(("code", "why"), [
    ("7" * 5000, "longer than Python's 4,300-digit limit"),
    ("\u0661\u0663", "Arabic-Indic digits"),
    ("\uff17\uff19", "full-width digits"),
    ("1234567", "longer than any Xid"),
    ("-79", "a sign"),
    ("", "nothing"),
])
def test_a_hostile_code_is_an_unparsed_event_never_a_crash(code: str, why: str) -> None:
    line = f"[  100.5] NVRM: Xid (PCI:0000:18:00): {code}, pid=1, name=x, GPU lost"
    (event,) = parse_xids([line])
    assert event.xid is None and event.unparsed, why
    (result,) = judge_xids([event], {"gpu0": "00000000:18:00.0"}, boot_id="b", source="f",
                           window="boot")
    assert (result.entity, result.verdict) == ("gpu0", Verdict.WARN)
    assert result.measured == "unreadable"


def test_a_hostile_sxid_is_an_unparsed_event_never_a_crash() -> None:
    from nodegate.judge.xid import judge_sxids

    lines = ["nvidia-nvswitch0: SXid (PCI:::): 12028, Non-fatal, x",
             "nvidia-nvswitch\u0661: SXid (PCI:0000:05:00.0): 12028, Fatal, x",
             "nvidia-nvswitch2: SXid (PCI:0000:05:00.0): " + "1" * 5000 + ", Fatal, x"]
    events = parse_sxids(lines)
    assert [e.sxid for e in events] == [None, None, None]
    results = judge_sxids(events, boot_id="b", source="f", window="boot")
    assert {r.verdict for r in results} == {Verdict.WARN}


def test_a_corrupt_earlier_report_never_stops_the_recurrence_check() -> None:
    from nodegate.judge.xid import previous_boots

    reports: list[Any] = [
        {"boot_id": "b1", "results": [{"check": "xid_events", "evidence": {"events": [
            {"xid": "9" * 5000, "class": "hardware", "bus_id": "0000:18:00"},
            {"xid": 79, "class": "hardware", "bus_id": "0000:18:00", "boots": 7},
            {"xid": True, "class": "hardware"}]}}]},
        {"boot_id": "b0", "results": [{"check": "xid_events", "evidence": ["not a dict"]}]},
        {"boot_id": "b2", "results": "nope"},
    ]
    assert previous_boots(reports) == {("0000:18:00", 79): ["b1"]}


@pytest.mark.parametrize("line", ["NVRM: Xid (" * 200_000, "nvidia-nvswitch0: SXid (" * 100_000,
                                  "[" + "9" * 1_000_000, "Dec  6 " * 300_000])
def test_a_long_hostile_line_is_read_in_bounded_time(line: str) -> None:
    """Only the first LINE_MAX characters of a line are parsed, matched once at the marker:
    a line of repeated markers once took minutes (each search rescanned the line)."""
    import time

    started = time.monotonic()
    parse_xids([line])
    parse_sxids([line])
    assert time.monotonic() - started < 5.0
