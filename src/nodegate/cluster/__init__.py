"""The cluster side of the gate: a scheduler adapter (Slurm now, Kubernetes later) and the
pure policy deciding whether a node joins, is drained, or is left alone.

``scheduler`` holds the interface, ``slurm`` the scontrol/sinfo implementation, ``gate`` the
policy (no I/O), ``cli`` the ``nodegate gate`` command.
"""

from __future__ import annotations

from nodegate.cluster.gate import (
    REASON_PREFIX,
    Action,
    Decision,
    apply,
    decide_health,
    decide_join,
)
from nodegate.cluster.scheduler import Change, NodeState, Scheduler
from nodegate.cluster.slurm import SlurmScheduler

__all__ = [
    "REASON_PREFIX",
    "Action",
    "Change",
    "Decision",
    "NodeState",
    "Scheduler",
    "SlurmScheduler",
    "apply",
    "decide_health",
    "decide_join",
]
