"""The health gate's decision as Prometheus gauges (``nodegate_gate.prom``), written on every
health run given ``--textfile-dir`` (not only with a drain budget): a fleet sees which nodes
nodegate holds out of service, and which gates stopped running, without reading Slurm on each
node. The drain budget's gauges (``nodegate.cluster.budget.render_metrics``) are added to the
same file when a budget is set."""

from __future__ import annotations

from nodegate.cluster.gate import Action
from nodegate.cluster.reasons import is_nodegate_reason
from nodegate.cluster.scheduler import NodeState

#: What ``nodegate gate`` did: an Action, or ``mark`` (kept in service by the drain budget).
ACTIONS = (*(a.value for a in Action), "mark")


def render(node: str, action: str, after: NodeState, now: float) -> str:
    """One ``gate_action`` per action (1 for this run's), whether the node is drained after
    it and whether by a ``nodegate:`` reason, and when the gate ran."""
    from nodegate.report.prometheus import render_gauges

    if action not in ACTIONS:
        raise ValueError(f"unknown gate action {action!r}")
    return render_gauges([
        ("gate_action", "1 for what the last health gate run did with the node (resume, "
         "drain, none, or mark: kept in service by the drain budget).",
         [({"node": node, "action": a}, 1 if a == action else 0) for a in ACTIONS]),
        ("gate_node_drained", "1 when the node was drained (by anyone) after the gate's run.",
         [({"node": node}, 1 if after.drained else 0)]),
        ("gate_node_nodegate_held", "1 when the node was drained with a 'nodegate:' reason "
         "(a hold nodegate recorded) after the gate's run.",
         [({"node": node}, 1 if after.drained and is_nodegate_reason(after.reason) else 0)]),
        ("gate_last_run_timestamp_seconds", "When the health gate last ran on the node.",
         [({"node": node}, round(now, 3))]),
    ])
