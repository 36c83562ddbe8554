"""The node's previous reports, read back for checks that compare with earlier runs.

Bounded on purpose: the cron health check runs every few minutes, so only the newest few
dated reports are opened, and a file that cannot be read or parsed is skipped, not an error
(a half-written or foreign file must not break today's run).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from nodegate.errors import ConfigError
from nodegate.fileio import read_bytes
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
    try:
        with os.scandir(report_dir) as entries:
            names = [entry.name for entry in entries]
    except OSError:
        return []
    dated = sorted(((m.group("stamp"), name) for name in names
                    if (m := DATED_RE.match(name))), reverse=True)[:limit]
    latest = sorted(name for name in names if LATEST_RE.match(name))
    found: dict[str, dict[str, Any]] = {}
    seen: set[tuple[int, int]] = set()
    for name in [*latest, *(name for _, name in dated)]:
        try:
            info = os.stat(report_dir / name, follow_symlinks=False)
            if (info.st_dev, info.st_ino) in seen:
                continue  # the same file under another name: decoded already
            seen.add((info.st_dev, info.st_ino))
            data = decode(read_bytes(report_dir / name, kind="report"))
        except (OSError, ValueError, ConfigError):
            continue
        if isinstance(data, dict):
            # a report without a string id (a foreign or old file) is one of its own
            report_id = data.get("report_id")
            found.setdefault(report_id if isinstance(report_id, str) else f"file:{name}", data)
    return sorted(found.values(), key=dict_key, reverse=True)[:limit]
