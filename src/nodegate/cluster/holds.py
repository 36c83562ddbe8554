"""Holds have owners: the record of every drain nodegate made, the rank of each kind of hold,
and the one function that decides whether a kind of evidence may lift or replace a hold.

Why a record and not the reason's text: anyone can type ``nodegate: bad psu`` into Slurm. So
nodegate writes down every drain it makes (node, the exact reason and comment it wrote, the
kind of hold, the evidence, when) in its own state on the side of the call that makes it
(``holds.json`` in ``default_holds_dir``, kept by ``holds_store``), *before* the update is
sent; a drain is nodegate's only while Slurm still shows exactly the reason recorded.
Anything else drained or down is a person's (or Slurm's), whatever its text, and nodegate
never lifts, rewrites or clears it.

Holds are ranked (docs/gate.md, "Holds and their owners")::

    rma (5) > person (4) > acceptance / multinode / netload / cluster-check (3)
            > standard, maintenance, upgrade, initial (2) > health (1)

``decide`` is the one place that says whether evidence of one kind may lift a hold, and
``may_replace`` whether a new drain of one kind may rewrite it: evidence of a lower kind never
lifts a higher hold, and a drain never rewrites a hold of a higher rank or a different kind of
the same rank. The gate (health and join), the drain budget, remediation and deploy/drain.py
all go through ``drain``/``resume`` here, which add the compare-and-set against Slurm.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from nodegate.cluster.holds_store import (
    HOLDS_FILE,
    OWN_KINDS,
    HoldStore,
    Kind,
    Mark,
    Record,
    StoreError,
    default_holds_dir,
)
from nodegate.cluster.scheduler import Change, NodeState
from nodegate.errors import CannotRunError, ConfigError
from nodegate.fileio import read_text

RANK: dict[Kind, int] = {
    Kind.NONE: 0, Kind.HEALTH: 1, Kind.STANDARD: 2, Kind.MAINTENANCE: 2, Kind.UPGRADE: 2,
    Kind.INITIAL: 2, Kind.ACCEPTANCE: 3, Kind.SUITE: 3, Kind.PERSON: 4, Kind.RMA: 5,
}

#: What lifts each kind, for messages and docs/gate.md's table.
LIFTED_BY: dict[Kind, str] = {
    Kind.HEALTH: "a passing report of any level (the next health run)",
    Kind.STANDARD: "a fresh passing standard or acceptance report",
    Kind.MAINTENANCE: "a passing standard or acceptance report newer than the hold, or a person",
    Kind.UPGRADE: "the upgrade's own validation and join (a passing report of the join's "
                  "level); never the periodic health",
    Kind.INITIAL: "the join: a fresh passing report of the join's level; never the "
                  "periodic health",
    Kind.ACCEPTANCE: "a fresh passing acceptance report",
    Kind.SUITE: "a fresh passing report of that suite, at the join",
    Kind.PERSON: "only a person",
    Kind.RMA: "only a person, once the card is replaced",
}


@dataclass(frozen=True)
class Evidence:
    """What is offered to lift a hold: a passing report's ``level`` (quick, standard,
    acceptance) or ``suite`` (multinode, ...), and when it finished (wall clock, and its boot
    and boot-relative time where it carries them)."""

    level: str | None = None
    suite: str | None = None
    finished_at: dt.datetime | None = None
    boot_id: str | None = None
    boottime_s: float | None = None
    join: bool = False  # offered by a join (deploy/join.py), not the periodic health

    def describe(self) -> str:
        return f"a passing {self.suite or self.level or 'unknown'} report" + (
            " at a join" if self.join else "")


@dataclass(frozen=True)
class Hold:
    """A node's current hold as the record and Slurm show it together."""

    node: str
    kind: Kind
    reason: str | None = None
    suite: str | None = None
    record: Record | None = None

    @property
    def rank(self) -> int:
        return RANK[self.kind]

    @property
    def ours(self) -> bool:
        return self.record is not None

    def describe(self) -> str:
        name = self.suite if self.kind is Kind.SUITE and self.suite else self.kind.value
        owner = "nodegate's" if self.ours else "someone else's"
        return f"{owner} {name} hold ({self.reason})" if self.reason else f"{name} hold"


@dataclass(frozen=True)
class Ruling:
    """``decide``'s answer: ``allowed`` and the one line that says why."""

    allowed: bool
    why: str


class Raced(CannotRunError):
    """The node changed between the decision's read and the update (a person acted): it is
    left as it is now, and the run says so (exit 3, docs/gate.md "Compare-and-set")."""


def same_hold(a: NodeState, b: NodeState) -> bool:
    """The fields a drain or resume decision rests on are unchanged."""
    return (a.drained, a.down, a.reason, a.comment) == (b.drained, b.down, b.reason, b.comment)


class HoldScheduler(Protocol):
    """What holding asks of a scheduler (``SlurmScheduler`` has it): the ``Scheduler``
    verbs with ``expect``, the decision's read, for compare-and-set: ``Raced`` when the node
    is no longer so right before the update (or shows another reason right after a drain)."""

    def state(self, node: str) -> NodeState: ...

    def drain(self, node: str, reason: str, *, expect: NodeState | None = None) -> Change: ...

    def resume(self, node: str, *, expect: NodeState | None = None) -> Change: ...

    def partition_nodes(self, partition: str) -> list[NodeState]: ...

    def set_comment(self, node: str, comment: str | None, *,
                    expect: NodeState | None = None) -> Change: ...


# --- classifying and deciding ---------------------------------------------------------------


def classify(state: NodeState, record: Record | None) -> Hold:
    """The node's hold: ours only where the record names exactly the reason Slurm shows now;
    any other drain or down is a person's (or Slurm's), whatever its text."""
    if not (state.drained or state.down):
        return Hold(state.node, Kind.NONE)
    if record is not None and record.shown(state):
        return Hold(state.node, record.kind, state.reason, record.suite, record)
    return Hold(state.node, Kind.PERSON, state.reason)


def _newer(evidence: Evidence, record: Record | None) -> bool:
    """The evidence finished after the hold was made: by the boot-relative clock when both
    are of one boot (a wall-clock step changes nothing), else by the wall clock."""
    if record is None or record.made_at is None or evidence.finished_at is None:
        return False
    if record.boot_id and evidence.boot_id == record.boot_id and \
            record.boottime_s is not None and evidence.boottime_s is not None:
        return evidence.boottime_s > record.boottime_s
    made = record.made_at if record.made_at.tzinfo else record.made_at.replace(
        tzinfo=dt.timezone.utc)
    return evidence.finished_at > made


_LEVELS = {"quick": 1, "standard": 2, "acceptance": 3}


def decide(hold: Hold, evidence: Evidence) -> Ruling:
    """Whether ``evidence`` (a passing report) may lift ``hold``: the one rule for the gate,
    the join, remediation and the deploy entry points."""
    what = evidence.describe()
    if hold.kind is Kind.NONE:
        return Ruling(False, "not held: nothing to lift")
    if not hold.ours:
        return Ruling(False, f"{hold.describe()}: not in nodegate's record, so a person's; "
                      "only a person lifts it")
    if hold.kind is Kind.RMA:
        return Ruling(False, f"{hold.describe()}: {LIFTED_BY[Kind.RMA]}")
    level = _LEVELS.get(evidence.level or "", 0) if evidence.suite is None else 0
    allowed = {
        Kind.HEALTH: level >= 1,
        Kind.STANDARD: level >= 2,
        Kind.UPGRADE: evidence.join and level >= 1,  # the join's own level decides
        Kind.INITIAL: evidence.join and level >= 1,
        Kind.MAINTENANCE: level >= 2 and _newer(evidence, hold.record),
        Kind.ACCEPTANCE: level >= 3,
        Kind.SUITE: evidence.suite is not None and evidence.suite == hold.suite,
    }.get(hold.kind, False)
    if allowed:
        return Ruling(True, f"{what} lifts {hold.describe()}")
    return Ruling(False, f"{what} does not lift {hold.describe()}: lifted by "
                  f"{LIFTED_BY[hold.kind]}")


#: Holds the deploy puts on to wait for a join: the join's own verdict replaces them.
AWAITING_JOIN = frozenset({Kind.INITIAL, Kind.UPGRADE, Kind.MAINTENANCE})


def may_replace(hold: Hold, kind: Kind, suite: str | None = None, *,
                join: bool = False) -> Ruling:
    """Whether a drain of ``kind`` may rewrite ``hold``'s reason: never a person's or an RMA;
    otherwise only a hold of a lower rank, or one of the same kind (its reason updated). At a
    join, the join's own failure replaces a hold that waits for it (a new node's, an
    upgrade's, a maintenance hold): the node stays out, now saying why."""
    if hold.kind is Kind.NONE:
        return Ruling(True, "not held")
    if not hold.ours or hold.kind is Kind.RMA:
        return Ruling(False, f"{hold.describe()} is kept: nodegate never rewrites it")
    if RANK[kind] > hold.rank or (kind is hold.kind and suite == hold.suite):
        return Ruling(True, f"a {suite or kind.value} hold replaces {hold.describe()}")
    if join and hold.kind in AWAITING_JOIN:
        return Ruling(True, f"the join's verdict replaces {hold.describe()}")
    return Ruling(False, f"{hold.describe()} is kept: a {suite or kind.value} drain does not "
                  "rewrite a hold of its rank or higher")


def kind_of_reason(reason: str) -> tuple[Kind, str | None]:
    """The kind a gate drain reason of nodegate's own grammar sets (``cluster.gate``): the
    caller's own reason, never one read from Slurm (that is ``classify``'s job)."""
    from nodegate.cluster.reasons import hold_level, is_rma_hold, is_upgrade_hold, suite_hold

    suite = suite_hold(reason)
    if suite is not None:
        return Kind.SUITE, suite
    level = hold_level(reason)
    if level is not None:
        return (Kind.ACCEPTANCE if level.value == "acceptance" else Kind.STANDARD), None
    if is_rma_hold(reason):
        return Kind.RMA, None
    if is_upgrade_hold(reason):
        return Kind.UPGRADE, None
    if reason.startswith("nodegate: maintenance"):
        return Kind.MAINTENANCE, None
    return Kind.HEALTH, None


# --- acting: record first, then compare-and-set -----------------------------------------------


def reconcile(state: NodeState, store: HoldStore) -> Record | None:
    """The node's record where Slurm still shows its reason; a record Slurm no longer shows
    (a person resumed or re-drained the node) is forgotten, so it can never claim a later
    drain with the same text."""
    record = store.get(state.node)
    if record is None:
        return None
    if record.shown(state):
        return record
    store.forget(state.node)
    return None


def drain(scheduler: HoldScheduler, store: HoldStore, decided: NodeState, reason: str, *,
          kind: Kind | None = None, suite: str | None = None, evidence: str | None = None,
          now: Any = None, join: bool = False) -> Change:
    """Drain ``decided.node`` with ``reason`` as a hold of ``kind``: only where the node is
    still as the decision read it (``Raced`` otherwise), only where ``may_replace`` allows,
    with the record written before the update."""
    from nodegate.cluster.reasons import clean_reason

    reason = clean_reason(reason)
    if kind is None:
        kind, suite = kind_of_reason(reason)
    node = decided.node
    hold = classify(decided, reconcile(decided, store))
    if decided.drained and decided.reason == reason and hold.ours:
        return Change(node, "drain", False, decided, decided)
    if not may_replace(hold, kind, suite, join=join).allowed:
        return Change(node, "drain", False, decided, decided)
    record = _record(node, reason, kind, suite=suite, evidence=evidence, now=now)
    store.put(record)  # before the update: a drain is never made unrecorded
    change = scheduler.drain(node, reason, expect=decided)
    store.put(dataclasses.replace(record, slurm_time=change.after.reason_time))
    return change


def resume(scheduler: HoldScheduler, store: HoldStore, decided: NodeState,
           offered: Evidence) -> Change:
    """Lift ``decided.node``'s hold on ``offered`` evidence: only a hold in the record whose
    reason Slurm still shows, only where ``decide`` allows, only where the node is still as
    the decision read it (``Raced`` otherwise). The record is forgotten once lifted."""
    node = decided.node
    if decided.available:
        return Change(node, "resume", False, decided, decided)
    hold = classify(decided, reconcile(decided, store))
    if not decide(hold, offered).allowed:
        return Change(node, "resume", False, decided, decided)
    change = scheduler.resume(node, expect=decided)
    store.forget(node)
    return change


def _record(node: str, reason: str, kind: Kind, *, suite: str | None,
            evidence: str | None, now: Any) -> Record:
    from nodegate.report.order import Clock

    clock = now if isinstance(now, Clock) else Clock.here()
    return Record(node=node, reason=reason, kind=kind, suite=suite, evidence=evidence,
                  made_at=clock.wall, boot_id=clock.boot_id, boottime_s=clock.boottime_s)


#: The hold roles/slurm_controller.py puts on a node new to slurm.conf (from the controller,
#: before the node's own record exists): the one hold a join adopts by its words.
INITIAL_REASON = "nodegate: not validated"
#: Where deploy/upgrade_driver.py records the upgrade a node is out for (roles/ops/upgrade.py).
UPGRADE_RECORD = Path("/var/lib/nodegate/upgrade.json")


def upgrade_record_path() -> Path:
    """``$NODEGATE_UPGRADE_RECORD`` or /var/lib/nodegate/upgrade.json."""
    return Path(os.environ.get("NODEGATE_UPGRADE_RECORD", str(UPGRADE_RECORD)))


def deploy_record(state: NodeState, *, join: bool) -> Record | None:
    """A hold the deploy set from outside this record, where the deploy's own record says so:

    * ``nodegate: upgrade A -> B`` where the node's upgrade record (``upgrade.json``, written
      by the upgrade before it drained) names the same A and B: the upgrade's hold;
    * ``nodegate: not validated`` at a join: the controller role's hold on a new node, set from
      the controller before the node had a record (docs/gate.md: the one hold known by its
      words; health never lifts it, only a passing join).
    """
    from nodegate.cluster.reasons import is_upgrade_hold, upgrade_reason

    if not state.drained or not state.reason:
        return None
    if join and state.reason == INITIAL_REASON:
        return Record(state.node, state.reason, Kind.INITIAL, evidence="slurm_controller",
                      slurm_time=state.reason_time)
    if is_upgrade_hold(state.reason):
        path = upgrade_record_path()
        try:
            data = json.loads(read_text(path, kind="config", limit=64 * 1024))
        except (ConfigError, ValueError):
            return None
        if isinstance(data, dict) and state.reason == upgrade_reason(
                data.get("from"), str(data.get("to"))):
            return Record(state.node, state.reason, Kind.UPGRADE, evidence=str(path),
                          slurm_time=state.reason_time)
    return None


def evidence_of(report: Any, *, join: bool = False) -> Evidence:
    """A report as evidence (``NodeReport``: its level or suite and its times)."""
    labels: Mapping[str, str] = getattr(report, "labels", {}) or {}
    return Evidence(level=report.level.value, suite=labels.get("suite") or None,
                    finished_at=report.finished_at, boot_id=getattr(report, "boot_id", None),
                    boottime_s=getattr(report, "boottime_s", None), join=join)


#: The record's names are re-exported: callers ask ``cluster.holds`` for the whole mechanism.
__all__ = [
    "AWAITING_JOIN", "HOLDS_FILE", "INITIAL_REASON", "LIFTED_BY", "OWN_KINDS", "RANK",
    "UPGRADE_RECORD", "Evidence", "Hold", "HoldScheduler", "HoldStore", "Kind", "Mark",
    "Raced", "Record", "Ruling", "StoreError", "classify", "decide", "default_holds_dir",
    "deploy_record", "drain", "evidence_of", "kind_of_reason", "may_replace", "reconcile",
    "resume", "same_hold", "upgrade_record_path",
]
