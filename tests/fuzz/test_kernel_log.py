"""Fuzz the kernel-log parser: generated lines in every accepted format, with hostile numbers
and bytes. Never an exception; a parsed event's time is either the right one or unknown (and
then inside every window); the judge takes every parsed event; bounded time."""

from __future__ import annotations

import math
import time
from datetime import datetime, timezone
from typing import Any

import pytest

pytest.importorskip("hypothesis")

from hypothesis import given
from hypothesis import strategies as st

from nodegate.judge.xid import judge_sxids, judge_xids
from nodegate.probes.kernel_log import (
    LINE_FORMATS,
    SXidEvent,
    XidEvent,
    parse_sxids,
    parse_xids,
    within_window,
)
from nodegate.results import Verdict

pytestmark = pytest.mark.fuzz

NOW = datetime(2026, 12, 6, 6, 0, tzinfo=timezone.utc).timestamp()
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
#: digits that are not ASCII: Arabic-Indic, Devanagari, full-width, superscript-like Nd
OTHER_DIGITS = st.text(st.sampled_from("\u0660\u0661\u0663\u0969\uff10\uff17\u09e6\u1040"),
                       min_size=1, max_size=6)
HUGE = st.integers(4301, 6000).map(lambda n: "9" * n)


def _field(low: int, high: int, width: int) -> st.SearchStrategy[tuple[str, int | None]]:
    """(text, value): a number in range as the format writes it, or hostile text whose
    value is None (must never be read as a time)."""
    good = st.integers(low, high).map(lambda v: (str(v).rjust(width, "0"), v))
    bad = st.one_of(OTHER_DIGITS, HUGE, st.just("-1"), st.just("")).map(lambda t: (t, None))
    return st.one_of(good, good, bad)


Fields = tuple[int | None, int, int | None, int | None, int | None, int | None]


def _instant(fields: Fields, *, micro: int = 0, utc: bool = False) -> float | None:
    """The epoch the fields (year, month, day, h, m, s) name, None where one is hostile or
    the date does not exist."""
    y, month, d, h, mi, s = fields
    if y is None or d is None or h is None or mi is None or s is None:
        return None
    try:
        return datetime(y, month, d, h, mi, s, micro,
                        tzinfo=timezone.utc if utc else None).timestamp()
    except ValueError:
        return None


def _syslog_instant(fields: Fields) -> float | None:
    """No year: the latest such date not after now (a day of slack)."""
    for year in (2026, 2025):
        when = _instant((year, *fields[1:]))
        if when is not None and when <= NOW + 86400:
            return when
    return None


@st.composite
def stamped(draw: st.DrawFn) -> tuple[str, str, float | None, float | None]:
    """(format, prefix, expected seconds since boot, expected epoch)."""
    fmt = draw(st.sampled_from([f.name for f in LINE_FORMATS]))
    if fmt == "monotonic":
        sec, sec_v = draw(_field(0, 10**9, 1))
        frac = draw(st.integers(0, 999999))
        text = f"[{sec:>12}.{frac:06d}] "
        return fmt, text, (float(f"{sec_v}.{frac:06d}") if sec_v is not None else None), None
    year, y = draw(_field(1971, 2037, 4))
    month = draw(st.integers(1, 12))
    day, d = draw(_field(1, 31, 2))
    hour, h = draw(_field(0, 23, 2))
    minute, mi = draw(_field(0, 59, 2))
    second, s = draw(_field(0, 59, 2))
    hms = f"{hour}:{minute}:{second}"
    fields: Fields = (y, month, d, h, mi, s)
    if fmt == "iso":
        return (fmt, f"{year}-{month:02d}-{day}T{hms},123456+00:00 ", None,
                _instant(fields, micro=123456, utc=True))
    if fmt == "ctime":
        return (fmt, f"[Sun {MONTHS[month - 1]} {day:>2} {hms} {year}] ", None,
                _instant(fields))
    return (fmt, f"{MONTHS[month - 1]} {day:>2} {hms} gpu-node kernel: ", None,
            _syslog_instant(fields))


CODES = st.one_of(st.integers(0, 999999).map(str), OTHER_DIGITS, HUGE, st.just("79"),
                  st.text(max_size=12))
GOOD_BUSES = ("PCI:0000:18:00", "0000:3b:00", "PCI:0000:05:00.0")
BUSES = st.one_of(st.sampled_from(GOOD_BUSES), st.just("PCI:::"),
                  st.text(max_size=20).filter(lambda t: ")" not in t))


def _judged(line: str, sxid: bool) -> tuple[XidEvent | SXidEvent, int | None, bool,
                                            list[Any]]:
    """(event, its code, whether a 1 s window keeps it, the judge's results) for one line."""
    if sxid:
        sxids = parse_sxids([line], now_wall=NOW)
        assert len(sxids) == 1
        kept = within_window(sxids, 1.0, 1e6, now_wall=NOW)
        return sxids[0], sxids[0].sxid, kept == sxids, judge_sxids(
            kept, boot_id="b", source="f", window="1s")
    xids = parse_xids([line], now_wall=NOW)
    assert len(xids) == 1
    kept_x = within_window(xids, 1.0, None, now_wall=NOW)
    return xids[0], xids[0].xid, kept_x == xids, judge_xids(
        kept_x, {"gpu0": "00000000:18:00.0"}, boot_id="b", source="f", window="1s")


@given(stamped(), CODES, BUSES, st.booleans())
def test_a_line_in_any_format_parses_with_its_time_or_none(
        stamp: tuple[str, str, float | None, float | None], code: str, bus: str,
        sxid: bool) -> None:
    _, prefix, seconds, epoch = stamp
    body = (f"nvidia-nvswitch0: SXid ({bus}): {code}, Fatal, Link 3" if sxid
            else f"NVRM: Xid ({bus}): {code}, pid='<unknown>', lost")
    started = time.monotonic()
    event, parsed, kept, results = _judged(prefix + body, sxid)
    assert event.seconds == seconds
    if epoch is None:
        assert event.epoch is None
    else:
        assert event.epoch is not None and math.isclose(event.epoch, epoch, abs_tol=1e-6)
    head = code.split(",", maxsplit=1)[0].strip()  # what the line holds before a comma
    code_ok = head.isascii() and head.isdigit() and len(head) <= 6
    if code_ok and bus in GOOD_BUSES:
        assert parsed == int(head)
    if not code_ok:
        assert parsed is None and event.unparsed
    if event.seconds is None and event.epoch is None:  # unknown: inside every window
        assert kept
    assert all(isinstance(r.verdict, Verdict) for r in results)
    assert time.monotonic() - started < 2.0


@given(st.lists(st.binary(max_size=300), max_size=20), st.integers(0, 3))
def test_arbitrary_bytes_around_the_markers_never_crash(chunks: list[bytes], which: int) -> None:
    marker = ("NVRM: Xid (", "nvidia-nvswitch", ": SXid (", "[")[which]
    lines = [c.decode("utf-8", errors="replace") for c in chunks]
    lines += [marker + line + marker for line in lines]
    started = time.monotonic()
    xids, sxids = parse_xids(lines, now_wall=NOW), parse_sxids(lines, now_wall=NOW)
    judge_xids(within_window(xids, 3600.0, 100.0, now_wall=NOW), {}, boot_id=None,
               source="f", window="1h")
    judge_sxids(within_window(sxids, 3600.0, None, now_wall=NOW), boot_id=None, source="f",
                window="1h")
    times = [t for e in xids for t in (e.seconds, e.epoch)]
    times += [t for e in sxids for t in (e.seconds, e.epoch)]
    for value in times:
        assert value is None or (math.isfinite(value) and 0 <= value < 2**36)
    assert time.monotonic() - started < 2.0
