"""Report builders shared by the cluster tests."""

from __future__ import annotations

import dataclasses
import datetime as dt

from nodegate.cluster.evidence import required_checks
from nodegate.report import NodeReport
from nodegate.results import CheckResult, Severity, Verdict
from nodegate_lab.synthetic_fleet import synthetic_report

#: The ``run`` record of a full run (``nodegate.report.run_record.run_record``).
FULL_RUN = {"groups": ["gpu", "log", "host", "power", "load"], "seams": {},
            "profile_digest": "sha256:" + "0" * 64}


def complete(base: NodeReport, *, duration_scale: float = 1.0) -> NodeReport:
    """``base`` with a PASS for every check its level requires that it lacks, and the run
    record of a full run: the synthetic reports carry only a sample of the checks."""
    have = {r.check for r in base.results}
    extra = [CheckResult(name, "node", 0, {"max": 0}, "", Verdict.PASS, Severity.INFO, {})
             for name in required_checks(base.level.value, None) if name not in have]
    run = dict(FULL_RUN)
    if base.level.value != "quick":
        run["duration_scale"] = duration_scale
    return dataclasses.replace(base, results=(*base.results, *extra), run=run)


def report(node: str, *, level: str = "standard", faults: tuple[str, ...] = (),
           age: dt.timedelta = dt.timedelta(minutes=30)) -> NodeReport:
    """A node's complete report that finished ``age`` ago (standard runs take ~7 minutes)."""
    finished = dt.datetime.now(dt.timezone.utc) - age
    duration = {"quick": 0.4, "standard": 412.5, "acceptance": 7260.0}[level]
    return complete(synthetic_report(node, level=level, faults=faults,
                                     started_at=finished - dt.timedelta(seconds=duration),
                                     samples=10))
