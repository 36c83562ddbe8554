"""The remediation state as Prometheus gauges (``nodegate_remediation.prom``), so a fleet
sees which nodes are waiting, remediating, re-qualifying or in RMA without reading a file
on each node. Written beside the report's textfile (node_exporter reads every ``*.prom``).
"""

from __future__ import annotations

from pathlib import Path

from nodegate.fileio import atomic_write_text
from nodegate.remediation.state import NodeRemediation, Phase

TEXTFILE_NAME = "nodegate_remediation.prom"


def render(state: NodeRemediation) -> str:
    """One gauge per phase (1 for the current one), the action in flight, the history."""
    from nodegate.report.prometheus import render_gauges

    node = state.node
    return render_gauges([
        ("remediation_phase", "1 for the node's current remediation phase, 0 for the others "
         "(docs/remediation.md).",
         [({"node": node, "phase": p.value}, 1 if state.phase is p else 0) for p in Phase]),
        ("remediation_in_flight", "1 while an action is recorded as started without an "
         "outcome (a reboot under way, or a run that was killed).",
         [({"node": node}, 1 if state.in_flight else 0)]),
        ("remediation_actions", "Remediation actions recorded on this node (all outcomes).",
         [({"node": node}, len(state.history))]),
    ])


def write(state: NodeRemediation, folder: Path) -> Path:
    return atomic_write_text(folder / TEXTFILE_NAME, render(state))
