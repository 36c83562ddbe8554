"""Which report is newer, and whether a report's wall-clock time can be believed.

Wall clocks step: an RTC reset before NTP, a VM restored from a snapshot, a wrong BIOS clock.
So a node's reports are ordered by what cannot step: the per-node ``sequence`` number the
writer takes under a lock (``nodegate.report.outputs.next_sequence``, persisted beside the
reports, monotonic across boots), then the boot-relative ``boottime_s`` (CLOCK_BOOTTIME).
Reports from a nodegate that wrote neither sort before every report that has them (an
upgraded node writes only numbered reports from then on), and among themselves by their
finish time, as before.

A report whose wall time is in the future, or before the start of the boot it claims, is
*suspect*: a consumer may let it add a failure, never let it hide one.

Standard library only: the cron health check imports this.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

#: /etc/machine-id: 32 lower-case hex digits (machine-id(5)).
MACHINE_ID_RE = re.compile(r"^[0-9a-f]{32}$")
#: The wall-clock slack allowed before a report counts as dated in the future.
DEFAULT_SKEW_S = 300.0

#: (numbered?, sequence, boottime, finish time in Unix seconds, report id)
OrderKey = tuple[int, int, float, float, str]


def read_machine_id() -> str | None:
    """``/etc/machine-id`` (``$NODEGATE_MACHINE_ID_FILE`` in tests) when it holds one,
    through the one reader: a FIFO or a device there is refused, never waited on. A file
    the variable names that cannot be read (FIFO, too large) is a ConfigError naming it
    (exit 2, no traceback); text that is no machine id is None, as a missing file."""
    from nodegate.errors import ConfigError
    from nodegate.fileio import read_bytes
    from nodegate.paths import env_path

    named = env_path("NODEGATE_MACHINE_ID_FILE")
    path = named or Path("/etc/machine-id")
    try:
        data = read_bytes(path, kind="config", limit=4096)
    except ConfigError as exc:
        if named is not None and "not found" not in exc.message:
            raise ConfigError(exc.message, file=str(path), key="NODEGATE_MACHINE_ID_FILE") \
                from None
        return None
    text = data.decode("ascii", "replace").strip()
    return text if MACHINE_ID_RE.match(text) else None


def read_boottime() -> float | None:
    """Seconds since this boot, suspend included (CLOCK_BOOTTIME; None off Linux)."""
    clock = getattr(time, "CLOCK_BOOTTIME", None)
    if clock is None:
        return None
    try:
        return time.clock_gettime(clock)
    except OSError:
        return None


class Clock(NamedTuple):
    """Where and when "now" is: the wall clock, and on the node itself its boot and the
    boot-relative time (None on a bastion, which judges another machine's reports)."""

    wall: dt.datetime
    boot_id: str | None = None
    boottime_s: float | None = None

    @classmethod
    def here(cls) -> Clock:
        from nodegate.probes.kernel_log import read_boot_id

        return cls(dt.datetime.now(dt.timezone.utc), read_boot_id(), read_boottime())


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def key_of(sequence: Any, boottime_s: Any, finished: float, report_id: str) -> OrderKey:
    """The order key from a report's fields (``finished``: its finish time, Unix seconds)."""
    seq = _int(sequence)
    boot = _float(boottime_s)
    if seq is None:
        return (0, 0, 0.0, finished, report_id)
    return (1, seq, boot if boot is not None else 0.0, 0.0, report_id)


def report_key(report: Any) -> OrderKey:
    """``key_of`` a ``NodeReport``."""
    return key_of(report.sequence, report.boottime_s, report.finished_at.timestamp(),
                  report.report_id)


def dict_key(data: Mapping[str, Any]) -> OrderKey:
    """``key_of`` a decoded report or summary (a finish time that does not parse: 0)."""
    from nodegate.report.model import parse_timestamp

    try:
        finished = parse_timestamp(str(data.get("finished_at"))).timestamp()
    except (ValueError, OverflowError):
        finished = 0.0
    return key_of(data.get("sequence"), data.get("boottime_s"), finished,
                  str(data.get("report_id")))


def reconcile(reports: Sequence[Any]) -> tuple[list[Any], list[str]]:
    """``reports`` where, within one boot, the boot-relative clock wins over the sequence:
    a report that finished later in the same boot than one with a higher sequence (a
    counter restored from a backup or set back by hand) is lifted to that sequence, so it
    orders after it, and a note says so. Across boots the sequence stands (boot times of
    two boots do not compare)."""
    import dataclasses

    notes: list[str] = []
    out = list(reports)
    by_boot: dict[str, list[int]] = {}
    for index, report in enumerate(out):
        if report.boot_id and _int(report.sequence) is not None and \
                _float(report.boottime_s) is not None:
            by_boot.setdefault(report.boot_id, []).append(index)
    for indexes in by_boot.values():
        indexes.sort(key=lambda i: float(out[i].boottime_s))
        top: Any = None
        for index in indexes:
            report = out[index]
            if top is not None and report.sequence < top.sequence:
                notes.append(f"report {report.report_id} (sequence {report.sequence}) "
                             f"finished after {top.report_id} (sequence {top.sequence}) in "
                             "the same boot: the sequence counter went back; ordered by "
                             "boot time")
                out[index] = dataclasses.replace(report, sequence=top.sequence)
            else:
                top = report
    return out, notes


def same_boot_age(report: Any, clock: Clock) -> float | None:
    """Seconds since ``report`` finished by the boot-relative clock, when it is of the
    clock's boot and both carry a boot time (None: not measurable that way)."""
    if clock.boot_id is None or clock.boottime_s is None or report.boottime_s is None:
        return None
    if report.boot_id != clock.boot_id:
        return None
    return clock.boottime_s - float(report.boottime_s)


def suspect(report: Any, clock: Clock, skew_s: float = DEFAULT_SKEW_S) -> str | None:
    """Why ``report``'s wall-clock time cannot be believed (None: it can): dated in the
    future, dated before the start of the boot it belongs to, or a boot time beyond the
    boot's own."""
    finished = report.finished_at
    if (finished - clock.wall).total_seconds() > skew_s:
        return f"dated {_stamp(finished)}, in the future (clock skew?)"
    if clock.boot_id is not None and report.boot_id == clock.boot_id \
            and clock.boottime_s is not None:
        booted = clock.wall - dt.timedelta(seconds=clock.boottime_s)
        if (booted - finished).total_seconds() > skew_s:
            return f"dated {_stamp(finished)}, before its boot began ({_stamp(booted)})"
        if report.boottime_s is not None and float(report.boottime_s) > \
                clock.boottime_s + skew_s:
            return f"boot time {float(report.boottime_s):.0f}s, beyond this boot's"
    return None


def _stamp(moment: dt.datetime) -> str:
    from nodegate.report.model import format_timestamp

    return format_timestamp(moment)
