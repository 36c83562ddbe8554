"""The drain budget: the health gate never takes a partition below a site-set share by itself.

A bad profile push or a fabric-wide event (a switch reboot, a firmware bug) fails every node at
once; draining them all would turn a warning into an outage. So the site sets ``drain_budget``,
the share of each partition's nodes that nodegate may hold drained at once (0.5: at most 2 of
4). Only drains whose reason starts with ``nodegate:`` count: an administrator's drain or
Slurm's own DOWN is someone else's decision and never uses nodegate's budget.

Beyond the budget the node stays in service, marked in its Slurm ``Comment``
(``nodegate: over drain budget: <the drain reason>``), with a WARN line and the
``nodegate_gate_drain_budget_exceeded`` metric. When budget frees up (a drained node is repaired
and resumed), the next health run drains it; when it passes, the mark is cleared.

Two nodes deciding at once (cron on every node at the same minute, Slurm's HealthCheckProgram
on every node at once) could each see room for one more. The budget is therefore checked twice
against the controller: right before the drain (nothing is drained when there is no room), and
right after it, when a node keeps its drain only if the nodegate drains whose reason time is
*not later* than its own (others first, then itself) still fit. For any set of nodes that keep
their drains, the one with the latest reason time (the last to check among equal times) saw all
the others, so the kept drains never exceed the budget. A node that loses this check resumes
itself and is marked instead. What remains is a window of one scontrol round trip per decider
(the drain, one ``sinfo``, the resume: well under a second on a healthy controller) in which
the partition can be short by the number of nodes deciding in that same moment; a drain stops
new jobs only and kills none, so nothing running is lost in it. Ties within one second resolve
by node name: of two drains with the same reason time the one whose node name sorts first
keeps it and the other steps back, so two gates starting in the same second under a budget of
one end with exactly one drain.

Ownership (``cluster.holds``): the drain goes through ``holds.drain`` (recorded first, then
compare-and-set against the decision's read); a step back resumes only that drain, and only
while Slurm still shows it. The mark goes *beside* an existing comment (``<theirs> | <ours>``),
is recorded, and is only ever taken out of a comment where nodegate wrote it: a person's
comment is never rewritten or cleared.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from nodegate.cluster import holds
from nodegate.cluster.holds import HoldScheduler as Scheduler
from nodegate.cluster.holds import HoldStore, Mark
from nodegate.cluster.scheduler import Change, NodeState

#: The comment on a node the budget kept in service (ours to set and to clear).
MARK_PREFIX = "nodegate: over drain budget"


@dataclass(frozen=True)
class DrainBudget:
    """``fraction``: the share of a partition's nodes nodegate may hold drained at once."""

    fraction: float

    def allowed(self, total: int) -> int:
        """Nodes nodegate may hold drained in a partition of ``total`` (rounded down: 50 % of
        a 3-node partition is 1, of a 1-node partition 0)."""
        return math.floor(self.fraction * total + 1e-9)

    def describe(self) -> str:
        return f"{self.fraction * 100:g} %"


@dataclass(frozen=True)
class PartitionCount:
    """One partition as the budget saw it."""

    partition: str
    total: int
    nodegate_drained: int  # drains with a nodegate: reason, this node included if drained
    allowed: int


@dataclass
class BudgetOutcome:
    """What the budgeted apply did: the change made, the mark (when held back), the WARN."""

    change: Change | None = None
    marked: str | None = None
    warn: str | None = None
    counts: list[PartitionCount] = field(default_factory=list)

    @property
    def exceeded(self) -> bool:
        return self.marked is not None


def counts_against(state: NodeState) -> bool:
    """A drain (or draining) whose reason is nodegate's: the only kind the budget counts."""
    return state.drained and bool(state.reason) and str(state.reason).startswith("nodegate:")


def room_before(node: str, members: Sequence[NodeState], budget: DrainBudget) -> bool:
    """Whether draining ``node`` keeps nodegate's drains in this partition within budget."""
    others = sum(1 for m in members if m.node != node and counts_against(m))
    return others + 1 <= budget.allowed(len(members))


def keeps_after(node: str, members: Sequence[NodeState], budget: DrainBudget) -> bool:
    """After our drain: do the nodegate drains not later than ours, plus ours, still fit?

    A drain with no reason time (the controller did not say) counts as earlier: conservative.
    Equal times (Slurm stamps to the second) are ordered by node name, so of two nodes that
    drained in the same second exactly one keeps its drain.
    """
    mine = next((m for m in members if m.node == node), None)
    if mine is None or not counts_against(mine):
        return True  # not (or no longer) drained by us: nothing to keep
    earlier = sum(
        1 for m in members
        if m.node != node and counts_against(m)
        and (m.reason_time is None or mine.reason_time is None
             or (m.reason_time, m.node) < (mine.reason_time, node))
    )
    return earlier + 1 <= budget.allowed(len(members))


def mark_text(reason: str) -> str:
    return f"{MARK_PREFIX}: {reason.removeprefix('nodegate: ')}"


def _count(partition: str, members: Sequence[NodeState], budget: DrainBudget) -> PartitionCount:
    return PartitionCount(partition, len(members), sum(map(counts_against, members)),
                          budget.allowed(len(members)))


def drain_within_budget(node: str, reason: str, scheduler: Scheduler, budget: DrainBudget,
                        *, log: Callable[[str], None] = lambda _: None,
                        store: HoldStore | None = None, decided: NodeState | None = None,
                        evidence: str | None = None) -> BudgetOutcome:
    """Drain ``node`` with ``reason`` unless that takes one of its partitions past the budget;
    otherwise (or when a concurrent decider won the same slot) leave it in service, marked.
    ``decided``: the read the decision rests on (compare-and-set; read now when None);
    ``store``: the holds record (``holds.default_holds_dir`` when None)."""
    store = store if store is not None else HoldStore()
    state = decided if decided is not None else scheduler.state(node)
    if state.drained or state.down:  # already out: no new drain, the budget is not asked
        change = holds.drain(scheduler, store, state, reason, evidence=evidence)
        return BudgetOutcome(change=change, counts=_read_counts(state, scheduler, budget))
    partitions = _partition_members(state, scheduler)
    counts = [_count(p, members, budget) for p, members in partitions.items()]
    full = [c for c, members in zip(counts, partitions.values(), strict=True)
            if not room_before(node, members, budget)]
    if full:
        return _hold(node, reason, scheduler, budget, store=store, state=state, full=full[0],
                     counts=counts, why="")
    change = holds.drain(scheduler, store, state, reason, evidence=evidence)
    after = _partition_members(state, scheduler)
    counts = [_count(p, members, budget) for p, members in after.items()]
    lost = [c for c, members in zip(counts, after.values(), strict=True)
            if not keeps_after(node, members, budget)]
    if lost:
        log(f"{node}: another node drained in the same moment; stepping back")
        scheduler.resume(node, expect=change.after)  # only our drain, only while it shows
        store.forget(node)
        now = scheduler.state(node)
        counts = _read_counts(state, scheduler, budget)
        return _hold(node, reason, scheduler, budget, store=store, state=now, full=lost[0],
                     counts=counts,
                     why=" (a concurrent nodegate drain took the last slot)")
    clear_mark(change.after, scheduler, store)
    return BudgetOutcome(change=change, counts=counts)


def clear_mark(state: NodeState, scheduler: Scheduler,
               store: HoldStore | None = None) -> Change | None:
    """Take our mark out of the comment once the node no longer needs it (it passed, or it is
    drained now): only a mark the record says nodegate wrote, only our part of the comment,
    and only while the comment is still as read (compare-and-set)."""
    store = store if store is not None else HoldStore()
    mark = store.mark(state.node)
    if mark is None:
        return None
    left = mark.without(state.comment)
    if left is False or left is True:  # someone rewrote the comment: theirs now
        store.forget_mark(state.node)
        return None
    change = scheduler.set_comment(state.node, left or None, expect=state)
    store.forget_mark(state.node)
    return change


def _hold(node: str, reason: str, scheduler: Scheduler, budget: DrainBudget, *,
          store: HoldStore, state: NodeState, full: PartitionCount,
          counts: list[PartitionCount], why: str) -> BudgetOutcome:
    text = mark_text(reason)
    mine = store.mark(node)
    base = state.comment
    if mine is not None and mine.without(state.comment) is not False:
        base = mine.without(state.comment) or None  # type: ignore[assignment]
    mark = Mark(text=text, base=base)
    if state.comment != mark.written():
        store.put_mark(node, mark)  # recorded before it is written
        scheduler.set_comment(node, mark.written(), expect=state)
    warn = (f"WARN {node}: drain budget of partition {full.partition} spent "
            f"({full.nodegate_drained} of {full.total} nodes drained by nodegate, "
            f"budget {budget.describe()} allows {full.allowed}){why}; left in service, "
            f"marked '{text}'" + (f" beside the comment '{base}'" if base else ""))
    return BudgetOutcome(change=None, marked=text, warn=warn, counts=counts)


def _partition_members(state: NodeState, scheduler: Scheduler) -> dict[str, list[NodeState]]:
    """Each of the node's partitions with its members, read from the controller now."""
    return {p: scheduler.partition_nodes(p) for p in state.partitions}


def _read_counts(state: NodeState, scheduler: Scheduler,
                 budget: DrainBudget) -> list[PartitionCount]:
    return [_count(p, members, budget)
            for p, members in _partition_members(state, scheduler).items()]



#: The gate's own textfile beside the report's (node_exporter reads every ``*.prom``).
TEXTFILE_NAME = "nodegate_gate.prom"


def render_metrics(node: str, partitions: Sequence[str], outcome: BudgetOutcome | None,
                   budget: DrainBudget) -> str:
    """``nodegate_gate_drain_budget_exceeded`` per partition (1: this node is failing and was
    kept in service by the budget), and the counts the decision saw, when it read them."""
    from nodegate.report.prometheus import render_gauges

    exceeded = outcome is not None and outcome.exceeded
    counts = {c.partition: c for c in (outcome.counts if outcome else [])}
    return render_gauges([
        ("gate_drain_budget_exceeded",
         "1 when the gate left this failing node in service because the partition's drain "
         "budget was spent (the node is marked in its Slurm comment).",
         [({"node": node, "partition": p}, 1 if exceeded else 0) for p in partitions]),
        ("gate_drain_budget_fraction", "The share of a partition nodegate may hold drained.",
         [({"node": node}, budget.fraction)]),
        ("gate_partition_nodes", "Nodes in the partition when the gate last counted.",
         [({"partition": c.partition}, c.total) for c in counts.values()]),
        ("gate_partition_nodegate_drained",
         "Nodes drained with a nodegate: reason when the gate last counted.",
         [({"partition": c.partition}, c.nodegate_drained) for c in counts.values()]),
        ("gate_partition_drain_allowed", "Drains the budget allows in the partition.",
         [({"partition": c.partition}, c.allowed) for c in counts.values()]),
    ])
