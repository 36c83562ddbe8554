"""Report builders shared by the cluster tests."""

from __future__ import annotations

import datetime as dt

from nodegate.fleet.synthetic import synthetic_report
from nodegate.report import NodeReport


def report(node: str, *, level: str = "standard", faults: tuple[str, ...] = (),
           age: dt.timedelta = dt.timedelta(minutes=30)) -> NodeReport:
    """A node's report that finished ``age`` ago (standard runs take ~7 minutes)."""
    finished = dt.datetime.now(dt.timezone.utc) - age
    duration = {"quick": 0.4, "standard": 412.5, "acceptance": 7260.0}[level]
    return synthetic_report(node, level=level, faults=faults,
                            started_at=finished - dt.timedelta(seconds=duration), samples=10)
