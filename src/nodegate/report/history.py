"""The node's previous reports, read back for checks that compare with earlier runs.

Bounded on purpose: the cron health check runs every few minutes, so only the newest few
dated reports are opened, and a file that cannot be read or parsed is skipped, not an error
(a half-written or foreign file must not break today's run).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from nodegate.errors import ConfigError
from nodegate.fileio import limit_for, read_bytes
from nodegate.report.model import decode
from nodegate.report.order import dict_key

# <level>-<stamp>.json as report.outputs writes it: quick-20240501T120000.000Z.json
DATED_RE = re.compile(r"^[a-z][a-z0-9_]*-(?P<stamp>\d{8}T\d{6}(?:\.\d+)?Z)\.json$")
LATEST_RE = re.compile(r"^[a-z][a-z0-9_]*-latest\.json$")


def recent_reports(report_dir: Path, limit: int) -> list[dict[str, Any]]:
    """The newest ``limit`` reports of any level in ``report_dir``, newest first.

    Newest by the reports' own order (``nodegate.report.order``: sequence, then boot time),
    never by the stamp in a file name: after a clock step older files carry names from the
    future. Read are each level's ``<level>-latest.json`` (the newest of its level, whatever
    its name says) and the ``limit`` dated files whose names sort last; a report seen twice
    (a latest copy beside its dated original) counts once, and is decoded once where the
    copy is a second name of the same file (``report.outputs`` links it so).
    """
    found: dict[str, dict[str, Any]] = {}
    for name, _ in _candidates(report_dir, limit):
        data = _decoded(report_dir / name)
        if data is not None:
            found.setdefault(_identity(data, name), data)
    return sorted(found.values(), key=dict_key, reverse=True)[:limit]


def newest_where(report_dir: Path, limit: int, accept: Callable[[Mapping[str, Any]], bool], *,
                 head: Callable[[Mapping[str, Any]], bool]) -> dict[str, Any] | None:
    """The first report of ``recent_reports(report_dir, limit)`` that ``accept`` takes (None:
    none does), decoding as few reports as that takes.

    A report's place in the order, and ``head`` (a test that ``accept`` implies, on what a
    fleet summary holds: the report id, the boot id, the order fields), come from its
    summary where one stands for it (``fleet_summary.problem`` finds nothing, the fleet
    reader's rule), else from the report decoded. Only the reports ``head`` lets through
    are decoded, newest first, until ``accept`` takes one: the cron check judges counter
    growth against one earlier report, and decoding the four it searched was ~9 ms. A
    report that does not decode, or whose identity or order fields differ from its
    summary's, sends the question to ``recent_reports`` whole.
    """
    try:
        return _newest_where(report_dir, limit, accept, head)
    except _SummaryDisagrees:
        return next((data for data in recent_reports(report_dir, limit) if accept(data)), None)


class _SummaryDisagrees(Exception):
    """A summary that does not stand for its report after all."""


#: The fields a summary copies from its report that ``newest_where`` relies on.
_HEAD_FIELDS = ("report_id", "boot_id", "sequence", "boottime_s", "finished_at")


def _newest_where(report_dir: Path, limit: int, accept: Callable[[Mapping[str, Any]], bool],
                  head: Callable[[Mapping[str, Any]], bool]) -> dict[str, Any] | None:
    for fields, path, decoded in sorted(_heads(report_dir, limit),
                                        key=lambda item: dict_key(item[0]), reverse=True)[:limit]:
        if not head(fields):
            continue
        data = decoded if decoded is not None else _standing_for(fields, path)
        if accept(data):
            return data
    return None


def _heads(report_dir: Path, limit: int) -> list[tuple[Mapping[str, Any], Path,
                                                       dict[str, Any] | None]]:
    """(what orders it, its path, the report decoded or None) for each report
    ``recent_reports`` reads, each report once: from its summary where one stands for it."""
    found: dict[str, tuple[Mapping[str, Any], Path, dict[str, Any] | None]] = {}
    for name, info in _candidates(report_dir, limit):
        path = report_dir / name
        summary = _summary_of(path, info)
        if summary is not None:
            found.setdefault(summary["report_id"], (summary, path, None))
            continue
        data = _decoded(path)
        if data is not None:
            found.setdefault(_identity(data, name), (data, path, data))
    return list(found.values())


def _summary_of(path: Path, info: os.stat_result) -> dict[str, Any] | None:
    """The fleet summary that stands for the report at ``path`` (``info``: its lstat); None
    where there is none, or the report is not one ``read_bytes`` would read (a regular file
    within the report cap): that one is decoded, or skipped, as ``recent_reports`` does."""
    from nodegate.report import fleet_summary

    if not stat.S_ISREG(info.st_mode) or info.st_size > limit_for("report"):
        return None
    try:
        summary = decode(read_bytes(fleet_summary.path_for(path), kind="summary"))
    except (OSError, ValueError, ConfigError):
        return None
    if fleet_summary.problem(summary, info.st_size) is not None:
        return None
    return summary if isinstance(summary, dict) else None


def _standing_for(fields: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """The report at ``path`` decoded, checked against what its summary said of it."""
    data = _decoded(path)
    if data is None or any(data.get(key) != fields.get(key) for key in _HEAD_FIELDS):
        raise _SummaryDisagrees(str(path))
    return data


def _candidates(report_dir: Path, limit: int) -> list[tuple[str, os.stat_result]]:
    """The files ``recent_reports`` reads, in the order it reads them: each level's latest,
    then the ``limit`` dated names that sort last; a second name of a file left out."""
    try:
        with os.scandir(report_dir) as entries:
            names = [entry.name for entry in entries]
    except OSError:
        return []
    dated = sorted(((m.group("stamp"), name) for name in names
                    if (m := DATED_RE.match(name))), reverse=True)[:limit]
    latest = sorted(name for name in names if LATEST_RE.match(name))
    out: list[tuple[str, os.stat_result]] = []
    seen: set[tuple[int, int]] = set()
    for name in [*latest, *(name for _, name in dated)]:
        try:
            info = os.stat(report_dir / name, follow_symlinks=False)
        except OSError:
            continue
        if (info.st_dev, info.st_ino) in seen:
            continue  # the same file under another name: decoded already
        seen.add((info.st_dev, info.st_ino))
        out.append((name, info))
    return out


def _decoded(path: Path) -> dict[str, Any] | None:
    """The report at ``path`` decoded; None for a file that cannot be read or parsed, or
    that is not a JSON object (a half-written or foreign file must not break a run)."""
    try:
        data = decode(read_bytes(path, kind="report"))
    except (OSError, ValueError, ConfigError):
        return None
    return data if isinstance(data, dict) else None


def _identity(data: Mapping[str, Any], name: str) -> str:
    """What makes two files one report: its id; a report without a string id (a foreign or
    old file) is one of its own."""
    report_id = data.get("report_id")
    return report_id if isinstance(report_id, str) else f"file:{name}"
