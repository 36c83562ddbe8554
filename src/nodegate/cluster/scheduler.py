"""The scheduler interface the gate talks to, so Slurm is one implementation among several.

Four verbs are all the gate needs: list nodes, read one node's state and drain reason, drain
with a reason, resume; the drain budget adds two: read a partition's nodes, and set a node's
comment (the mark on a node the budget kept in service). Slurm maps them to
``scontrol``/``sinfo``; a Kubernetes adapter would map drain to cordon + a
``nodegate.io/reason`` annotation, resume to uncordon, and state to ``spec.unschedulable`` +
that annotation. Implementations must be idempotent (a repeated call
changes nothing and says so) and must leave the node untouched when they raise.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class NodeState:
    """One node as the scheduler sees it.

    ``state`` is the base state in lower case (``idle``, ``allocated``, ``mixed``, ``down``,
    ``unknown``, ...); ``flags`` the upper-case modifiers (``DRAIN``, ``NOT_RESPONDING``,
    ``MAINTENANCE``, ...); ``reason`` the drain/down reason without Slurm's ``[user@time]``
    suffix, None when there is none; ``reason_time`` the controller's time of that reason
    (its own clock, naive), where the reading carried it; ``comment`` the node's free-text
    comment (nodegate's drain-budget mark lives there); ``partitions`` the node's partitions,
    where the reading carried them.
    """

    node: str
    state: str
    flags: frozenset[str] = field(default_factory=frozenset)
    reason: str | None = None
    reason_time: dt.datetime | None = field(default=None, compare=False)
    comment: str | None = None
    partitions: tuple[str, ...] = ()

    @property
    def drained(self) -> bool:
        """Taken out of service by someone (drained, draining, or drained while down)."""
        return "DRAIN" in self.flags or self.state in {"drain", "drained", "draining"}

    @property
    def down(self) -> bool:
        return self.state == "down" or "NOT_RESPONDING" in self.flags

    @property
    def available(self) -> bool:
        """Can take work: not drained and not down."""
        return not self.drained and not self.down

    def describe(self) -> str:
        text = "+".join([self.state.upper(), *sorted(self.flags)])
        return f"{text} ({self.reason})" if self.reason else text


@dataclass(frozen=True)
class Change:
    """What a drain/resume call did; ``changed`` is False when the node was already right."""

    node: str
    action: str
    changed: bool
    before: NodeState
    after: NodeState


@runtime_checkable
class Scheduler(Protocol):
    """The adapter contract (Slurm today; Kubernetes cordon/label can implement the same)."""

    #: short name for messages: ``slurm``, ``kubernetes``
    name: str

    def nodes(self) -> list[NodeState]:
        """Every node the scheduler knows, once each."""
        ...

    def state(self, node: str) -> NodeState:
        """One node's state; ConfigError when the scheduler does not know it."""
        ...

    def drain(self, node: str, reason: str) -> Change:
        """Drain with ``reason``; a no-op when already drained with exactly that reason."""
        ...

    def resume(self, node: str) -> Change:
        """Return to service; a no-op when the node is not drained."""
        ...

    def partition_nodes(self, partition: str) -> list[NodeState]:
        """Every node of ``partition``, with its drain reason and that reason's time (the
        drain budget counts them); ConfigError when the partition is unknown."""
        ...

    def set_comment(self, node: str, comment: str | None) -> Change:
        """Set (or clear, with None) the node's comment; a no-op when it is already so."""
        ...
