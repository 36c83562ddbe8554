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

# <level>-<stamp>.json as battery.outputs writes it: quick-20240501T120000.000Z.json
DATED_RE = re.compile(r"^[a-z][a-z0-9_]*-(?P<stamp>\d{8}T\d{6}(?:\.\d+)?Z)\.json$")


def recent_reports(report_dir: Path, limit: int) -> list[dict[str, Any]]:
    """The newest ``limit`` dated reports of any level in ``report_dir``, newest first."""
    try:
        with os.scandir(report_dir) as entries:
            dated = [(m.group("stamp"), entry.path) for entry in entries
                     if (m := DATED_RE.match(entry.name))]
    except OSError:
        return []
    out = []
    for _, path in sorted(dated, reverse=True)[:limit]:
        try:
            data = decode(read_bytes(path, kind="report"))
        except (OSError, ValueError, ConfigError):
            continue
        if isinstance(data, dict):
            out.append(data)
    return out
