"""The gate policy: from a node's reports and its scheduler state to join, drain or leave alone.

Pure functions, no I/O: the policy is the part that must be right, so it is tested exhaustively
without a scheduler, and ``apply`` is the only place that acts.

Drain reasons are a small grammar that says which kind of hold a drain is; *whose* it is,
the record says (``cluster.holds``: only a drain nodegate recorded making, whose reason Slurm
still shows, is nodegate's; ``owned`` puts every decision under that rule):

* ``nodegate: <check>[<entity>]`` (``+N more``) - a quick (health) failure. A later passing
  health check resumes it.
* ``nodegate: <level> failed <check>[<entity>]``, ``nodegate: <level> report missing``,
  ``nodegate: <level> report stale ...`` for level ``standard``/``acceptance`` - a *hold* from
  the gate. Only a fresh passing report of that level or deeper lifts it; a health pass never
  does (a quick NVML check cannot vouch for bandwidth under load or a burn-in).
* ``nodegate: multinode failed|report missing|report stale ...`` - a hold from a required
  suite (``multinode``: the all-reduce with a known-good node). Only a fresh passing report of
  that suite lifts it, at the next join; a health pass never does.
* ``nodegate: upgrade <from> -> <to>`` - a node out for a driver upgrade (deploy/upgrade_driver.py,
  deploy/rolling_upgrade.py). The periodic health never lifts or rewrites it, pass or fail:
  only the upgrade's own validation and join do.
* ``nodegate: RMA gpuN serial ...`` - remediation gave the card up (nodegate.remediation):
  neither the health gate nor a join lifts or rewrites it, pass or fail. A person resumes the
  node once the card is replaced; a reset that cleared the symptom is no repair.
* anything else (an administrator's ``bad fan``, Slurm's own ``Not responding``), and any of
  the above that is not in the record, belongs to someone else: nodegate never resumes it and
  never overwrites it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nodegate.cluster import evidence as _evidence
from nodegate.cluster import holds as _holds
from nodegate.cluster.reasons import (
    REASON_PREFIX,
    hold_level,
    is_nodegate_reason,
    is_rma_hold,
    is_upgrade_hold,
    suite_hold,
)
from nodegate.cluster.scheduler import Change, NodeState, Scheduler
from nodegate.report.model import NodeReport, format_timestamp
from nodegate.report.order import Clock, report_key, same_boot_age, suspect
from nodegate.results import CheckResult, Verdict
from nodegate.vocabulary import LEVEL_RANK, Level

#: The report label naming a suite outside the node's battery (``multinode``); such reports
#: never stand in for a battery level, and a join can require them.
SUITE_LABEL = "suite"
SUITES = ("multinode", "netload", "cluster-check")

#: Verdicts a gate accepts (the same as exit code 0: WARN and SKIP do not block).
PASSING = frozenset({Verdict.PASS, Verdict.WARN, Verdict.SKIP})


class Action(str, enum.Enum):
    RESUME = "resume"
    DRAIN = "drain"
    NONE = "none"


@dataclass(frozen=True)
class Decision:
    """What to do with one node and why (``why`` is the one line an operator reads)."""

    node: str
    action: Action
    why: str
    reason: str | None = None  # the drain reason, for DRAIN
    report_id: str | None = None  # the report the decision rests on


@dataclass(frozen=True)
class JoinPolicy:
    """Join (``deploy/join.py``): the required level must pass and be fresh."""

    level: Level = Level.STANDARD
    max_age_s: float = 24 * 3600.0
    clock_skew_s: float = 300.0
    require: tuple[str, ...] = ()  # suites that must also pass: ("multinode",)


@dataclass(frozen=True)
class HealthPolicy:
    """Periodic health (cron, HealthCheckProgram): judge the latest report if it is fresh."""

    max_age_s: float = 3600.0
    clock_skew_s: float = 300.0


def suite_of(report: NodeReport) -> str | None:
    return report.labels.get(SUITE_LABEL) or None


def battery_reports(reports: Iterable[NodeReport]) -> list[NodeReport]:
    """The node's own battery runs (quick/standard/acceptance), without suite reports."""
    return [r for r in reports if suite_of(r) is None]


def failures(report: NodeReport) -> list[CheckResult]:
    """FAIL results first (in report order), then ERROR: the first names the drain."""
    failed = [r for r in report.results if r.verdict is Verdict.FAIL]
    errored = [r for r in report.results if r.verdict is Verdict.ERROR]
    return failed + errored


def drain_reason(report: NodeReport) -> str:
    """``nodegate: nvlink_state[gpu3.link5] (+2 more)``; gate levels say which level failed."""
    failed = failures(report)
    if failed:
        core = failed[0].test_id + (f" (+{len(failed) - 1} more)" if len(failed) > 1 else "")
    else:
        core = "no results"
    suite = suite_of(report)
    if suite is not None:
        return f"{REASON_PREFIX} {suite} failed {core}"
    if report.level is Level.QUICK:
        return f"{REASON_PREFIX} {core}"
    return f"{REASON_PREFIX} {report.level.value} failed {core}"


def is_passing(report: NodeReport) -> bool:
    """PASS/WARN/SKIP with at least one result: an empty report is no evidence."""
    return bool(report.results) and report.verdict in PASSING


# --- freshness --------------------------------------------------------------------------------


def age_problem(
    report: NodeReport, now: dt.datetime | Clock, max_age_s: float, skew_s: float
) -> str | None:
    """Why the report is not fresh, or None when it is (``freshness`` without telling a
    suspect time from an old one)."""
    return freshness(report, now, max_age_s, skew_s)[0]


def freshness(report: NodeReport, now: dt.datetime | Clock, max_age_s: float,
              skew_s: float) -> tuple[str | None, bool]:
    """(why the report is not fresh or None, whether that is because its time is suspect).

    A report of the node's current boot is aged by the boot-relative clock (no wall-clock
    step changes it); any other by the wall clock. A report dated in the future, or before
    the boot it belongs to, is suspect (``nodegate.report.order.suspect``): the caller may
    let it add a failure, never hide one."""
    clock = now if isinstance(now, Clock) else Clock(now)
    why = suspect(report, clock, skew_s)
    if why is not None:
        return f"finished {format_timestamp(report.finished_at)}: {why}", True
    age = same_boot_age(report, clock)
    if age is None:
        age = (clock.wall - report.finished_at).total_seconds()
    if age > max_age_s:
        return (
            f"finished {format_timestamp(report.finished_at)}, "
            f"older than {_human_seconds(max_age_s)}"
        ), False
    return None, False


def _clip(text: str, limit: int = 120) -> str:
    """A drain reason stays one short line (Slurm shows it in every ``sinfo -R``)."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _human_seconds(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def latest(reports: Iterable[NodeReport], *, min_level: Level = Level.QUICK) -> NodeReport | None:
    """The most recent report at ``min_level`` or deeper, by the node's own order
    (``nodegate.report.order``: sequence, then boot time; never the wall clock alone)."""
    candidates = [r for r in reports if LEVEL_RANK[r.level] >= LEVEL_RANK[min_level]]
    if not candidates:
        return None
    return max(candidates, key=_order)


def health_evidence(reports: Iterable[NodeReport], now: dt.datetime | Clock,
                    skew_s: float = HealthPolicy.clock_skew_s) -> NodeReport | None:
    """The report periodic health judges: the latest (``latest``); but where that one
    passes and its time is suspect (dated in the future or before its boot: a clock step),
    the latest report whose time is believable when that one fails. A suspect report may
    add a failure, never hide one."""
    reports = list(reports)
    newest = latest(reports)
    if newest is None or not is_passing(newest):
        return newest
    clock = now if isinstance(now, Clock) else Clock(now)
    if suspect(newest, clock, skew_s) is None:
        return newest
    believed = latest(r for r in reports if suspect(r, clock, skew_s) is None)
    return believed if believed is not None and not is_passing(believed) else newest


def _order(report: NodeReport) -> tuple[Any, ...]:
    numbered, sequence, boottime, finished, rid = report_key(report)
    return (numbered, sequence, boottime, finished, LEVEL_RANK[report.level], rid)


# --- decisions --------------------------------------------------------------------------------


def _foreign(state: NodeState) -> Decision | None:
    """Someone else's drain or down: leave it, whatever the reports say."""
    if (state.drained or state.down) and not is_nodegate_reason(state.reason):
        owner = "an administrator or Slurm" if state.reason else "someone else"
        return _leave(state, f"{state.describe()}: taken out by {owner}; nodegate does not "
                      "touch it")
    return None


def _upgrading(state: NodeState) -> Decision | None:
    """Out for a driver upgrade: the periodic health leaves it to the upgrade's own join."""
    if state.drained and is_upgrade_hold(state.reason):
        return _leave(state, f"out for an upgrade ({state.reason}); its own validation and "
                      "join decide")
    return None


def _in_rma(state: NodeState) -> Decision | None:
    """Given up for an RMA: only a person resumes it (after the card is replaced)."""
    if state.drained and is_rma_hold(state.reason):
        return _leave(state, f"drained for an RMA ({state.reason}); a person resumes it once "
                      "the card is replaced")
    return None


def _leave(state: NodeState, why: str, report: NodeReport | None = None) -> Decision:
    """No change to the node, for ``why``, resting on ``report`` when there is one."""
    return Decision(state.node, Action.NONE, why, report_id=report.report_id if report else None)


def _resume(state: NodeState, why: str, report: NodeReport) -> Decision:
    return Decision(state.node, Action.RESUME, why, report_id=report.report_id)


def _drain(state: NodeState, reason: str, why: str, report: NodeReport | None) -> Decision:
    rid = report.report_id if report else None
    if state.drained and state.reason == reason:
        return Decision(state.node, Action.NONE, f"already drained: {reason}", reason, rid)
    return Decision(state.node, Action.DRAIN, why, reason, rid)


def decide_join(
    state: NodeState,
    reports: Sequence[NodeReport],
    *,
    policy: JoinPolicy | None = None,
    now: dt.datetime | Clock | None = None,
    profile: Mapping[str, Any] | None = None,
) -> Decision:
    """Resume only on a fresh passing report of the required level (or of a hold's deeper
    level) that shows the level's evidence (``nodegate.cluster.evidence``: every check that
    applies to ``profile``, the resolved profile's data, at full duration, no fault seams),
    with nothing newer failing; otherwise drain with a hold reason naming why. Without
    ``profile`` no check is exempt."""
    policy = policy or JoinPolicy()
    now = now or dt.datetime.now(dt.timezone.utc)
    foreign = _foreign(state) or _in_rma(state)
    if foreign is not None:
        return foreign
    suites = [r for r in reports if suite_of(r) is not None]
    reports = battery_reports(reports)
    required = _required_level(state, policy)
    evidence = latest(reports, min_level=required)
    if evidence is None:
        reason = f"{REASON_PREFIX} {required.value} report missing"
        return _drain(state, reason, f"no {required.value} report", None)
    blocked = (_evidence_problem(state, evidence, required, policy, now, profile=profile)
               or _newer_failure(state, evidence, reports)
               or _suites_problem(state, suites, policy, now))
    if blocked is not None:
        return blocked
    return _join(state, evidence)


def _required_level(state: NodeState, policy: JoinPolicy) -> Level:
    """The policy's level, or a drain hold's deeper one: a hold is lifted only by the level
    that set it."""
    held = hold_level(state.reason) if state.drained else None
    if held is not None and LEVEL_RANK[held] > LEVEL_RANK[policy.level]:
        return held
    return policy.level


def _evidence_problem(state: NodeState, evidence: NodeReport, required: Level,
                      policy: JoinPolicy, now: dt.datetime | Clock, *,
                      profile: Mapping[str, Any] | None) -> Decision | None:
    """A drain when the evidence report is failing, stale or incomplete; else None."""
    if not is_passing(evidence):
        reason = drain_reason(evidence)
        return _drain(state, reason, f"{evidence.level.value} report {evidence.verdict.value}",
                      evidence)
    problem = age_problem(evidence, now, policy.max_age_s, policy.clock_skew_s)
    if problem is not None:
        reason = f"{REASON_PREFIX} {required.value} report stale ({problem})"
        return _drain(state, reason, f"{required.value} report stale: {problem}", evidence)
    lacking = _evidence.problems(evidence, required.value, profile)
    if lacking:
        reason = f"{REASON_PREFIX} {required.value} report incomplete ({_clip(lacking[0])})"
        return _drain(state, reason, f"{evidence.level.value} report incomplete for a "
                      f"{required.value} join: {'; '.join(lacking)}", evidence)
    return None


def _newer_failure(state: NodeState, evidence: NodeReport,
                   reports: Sequence[NodeReport]) -> Decision | None:
    """A drain when any report newer than the evidence fails: the latest word wins."""
    newer = [r for r in reports if _order(r) > _order(evidence) and not is_passing(r)]
    if not newer:
        return None
    worst = max(newer, key=_order)
    return _drain(state, drain_reason(worst),
                  f"a newer {worst.level.value} report {worst.verdict.value}", worst)


def _suites_problem(state: NodeState, suites: Sequence[NodeReport], policy: JoinPolicy,
                    now: dt.datetime | Clock) -> Decision | None:
    """The first drain among the required suites and a suite hold's own suite; else None."""
    held_suite = suite_hold(state.reason) if state.drained else None
    for suite in dict.fromkeys([*policy.require, *([held_suite] if held_suite else [])]):
        blocked = _suite_problem(state, suite, suites, policy, now)
        if blocked is not None:
            return blocked
    return None


def _join(state: NodeState, evidence: NodeReport) -> Decision:
    """With the evidence good: resume a node nodegate drained; leave any other as it is."""
    if state.available:
        return _leave(state, f"in service; {evidence.level.value} report PASSes", evidence)
    if not state.drained:
        return _leave(state, f"{state.describe()}: not drained by nodegate; left to Slurm",
                      evidence)
    return _resume(state, f"{evidence.level.value} report {evidence.verdict.value} and fresh",
                   evidence)


def _suite_problem(state: NodeState, suite: str, reports: Sequence[NodeReport],
                   policy: JoinPolicy, now: dt.datetime | Clock) -> Decision | None:
    """A drain when the suite's latest report is missing, failing or stale; else None."""
    mine = [r for r in reports if suite_of(r) == suite]
    if not mine:
        return _drain(state, f"{REASON_PREFIX} {suite} report missing", f"no {suite} report",
                      None)
    newest = max(mine, key=_order)
    if not is_passing(newest):
        return _drain(state, drain_reason(newest), f"{suite} report {newest.verdict.value}",
                      newest)
    problem = age_problem(newest, now, policy.max_age_s, policy.clock_skew_s)
    if problem is not None:
        return _drain(state, f"{REASON_PREFIX} {suite} report stale ({problem})",
                      f"{suite} report stale: {problem}", newest)
    return None


def decide_health(
    state: NodeState,
    report: NodeReport | None,
    *,
    policy: HealthPolicy | None = None,
    now: dt.datetime | Clock | None = None,
) -> Decision:
    """Periodic health from the node's latest report.

    FAIL drains with a ``nodegate:`` reason (a gate hold is kept: it is the stronger one).
    PASS resumes only a nodegate health drain, or a hold whose level this report reaches.
    A stale report decides nothing: acting on old evidence would undo an operator's resume
    or resume a node nobody has looked at; the Prometheus staleness alert covers it. A
    report whose time is suspect (dated in the future or before its boot: a clock step) is
    not stale: its failure drains, its pass lifts nothing.
    """
    policy = policy or HealthPolicy()
    now = now or dt.datetime.now(dt.timezone.utc)
    foreign = _foreign(state) or _upgrading(state) or _in_rma(state)
    if foreign is not None:
        return foreign
    if report is None:
        return _leave(state, "no report to judge")
    problem, suspicious = freshness(report, now, policy.max_age_s, policy.clock_skew_s)
    if problem is not None and not (suspicious and not is_passing(report)):
        what = "time suspect" if suspicious else "stale"
        return _leave(state, f"latest report {what} ({problem}); no change", report)
    held = hold_level(state.reason) if state.drained else None
    held_suite = suite_hold(state.reason) if state.drained else None
    if not is_passing(report):
        reason = drain_reason(report)
        new_hold = hold_level(reason)
        if held_suite is not None:
            return _leave(state, f"kept the {held_suite} hold ({state.reason}); also {reason}",
                          report)
        if held is not None and (new_hold is None or LEVEL_RANK[new_hold] < LEVEL_RANK[held]):
            return _leave(state, f"kept the stronger hold ({state.reason}); also {reason}",
                          report)
        return _drain(state, reason, f"{report.level.value} report {report.verdict.value}",
                      report)
    if not state.drained:
        return _leave(state, f"{report.level.value} report {report.verdict.value}; "
                      f"{'in service' if state.available else state.describe()}", report)
    if held is not None and LEVEL_RANK[report.level] < LEVEL_RANK[held]:
        return _leave(state, f"held until a passing {held.value} run ({state.reason})", report)
    if held_suite is not None:
        return _leave(state, f"held until a passing {held_suite} check and join "
                      f"({state.reason})", report)
    return _resume(state, f"{report.level.value} report {report.verdict.value}; lifting "
                   f"{state.reason}", report)


def relevant_unreadable(unreadable: Sequence[tuple[str, str]], *, mode: str,
                        require: Sequence[str] = ()) -> list[tuple[str, str]]:
    """The unreadable report files (path, why) that are evidence for this decision: a
    battery report's (its level is unknown once unreadable), and in join mode a required
    suite's. A suite's file (``netload-latest.json``) is not health's evidence."""
    out = []
    for path, why in unreadable:
        name = path.replace("\\", "/").rsplit("/", 1)[-1]
        suite = next((s for s in SUITES if name.startswith(f"{s}-")), None)
        if suite is None or (mode == "join" and suite in require):
            out.append((path, why))
    return out


def with_unreadable(decision: Decision, state: NodeState,
                    unreadable: Sequence[tuple[str, str]], *, level: Level | None = None,
                    require: Sequence[str] = ()) -> Decision:
    """``decision`` with the node's unreadable reports counted as ERROR evidence: what was
    read still decides a drain (any readable FAIL drains); an unreadable report that is
    evidence for this decision (``relevant_unreadable``) blocks a resume and a join, and
    drains a node otherwise left in service; every one is named in ``why``. Someone else's
    drain and an upgrade hold stay untouched. ``level``: the join's level (its hold
    reason), None for periodic health; ``require``: the join's required suites."""
    if not unreadable:
        return decision
    names = "; ".join(f"{path}: {why}" for path, why in unreadable)
    unreadable = relevant_unreadable(unreadable, mode="health" if level is None else "join",
                                     require=require)
    if not unreadable:
        return dataclasses.replace(decision, why=f"{decision.why}; unreadable, not evidence "
                                   f"for this decision: {names}")
    first = unreadable[0][0].replace("\\", "/").rsplit("/", 1)[-1]
    note = f"unreadable report{'s' if len(unreadable) > 1 else ''} (ERROR): {names}"
    if decision.action is Action.DRAIN:
        return dataclasses.replace(decision, why=f"{decision.why}; also {note}")
    if _foreign(state) is not None or _upgrading(state) is not None or \
            _in_rma(state) is not None:
        return dataclasses.replace(decision, why=f"{decision.why}; {note}")
    if state.drained and is_nodegate_reason(state.reason) and decision.action is Action.NONE:
        return dataclasses.replace(decision, why=f"{decision.why}; {note}")
    core = f"report unreadable ({_clip(first, 60)})"
    reason = (f"{REASON_PREFIX} {core}" if level is None
              else f"{REASON_PREFIX} {level.value} {core}")
    if decision.action is Action.RESUME and state.drained and \
            is_nodegate_reason(state.reason):
        return Decision(state.node, Action.NONE, f"not resumed: {note}",
                        state.reason, decision.report_id)
    return _drain(state, reason, note, None)


def offered(decision: Decision, hold: _holds.Hold, reports: Sequence[NodeReport], *,
            join: bool = False) -> _holds.Evidence | None:
    """The evidence a resume offers to lift ``hold``: the report the decision rests on; for a
    suite hold, that suite's newest report (the join checked it is fresh and passing)."""
    if hold.kind is _holds.Kind.SUITE and join:
        mine = [r for r in reports if suite_of(r) == hold.suite]
        newest = max(mine, key=_order) if mine else None
        return _holds.evidence_of(newest, join=True) if newest is not None and \
            is_passing(newest) else None
    report = next((r for r in reports if r.report_id == decision.report_id), None)
    return _holds.evidence_of(report, join=join) if report is not None else None


def owned(decision: Decision, hold: _holds.Hold, reports: Sequence[NodeReport], *,
          join: bool = False) -> Decision:
    """``decision`` under the holds' one rule (``cluster.holds``): a resume only where the
    evidence it rests on may lift the node's hold, a drain only where it may replace it;
    otherwise the node is left as it is, and ``why`` says whose hold kept it."""
    if decision.action is Action.RESUME:
        evidence = offered(decision, hold, reports, join=join)
        if evidence is None:
            return dataclasses.replace(decision, action=Action.NONE,
                                       why=f"not resumed: no report to offer ({decision.why})")
        ruling = _holds.decide(hold, evidence)
    elif decision.action is Action.DRAIN:
        assert decision.reason is not None
        ruling = _holds.may_replace(hold, *_holds.kind_of_reason(decision.reason), join=join)
    else:
        if not hold.ours and hold.kind is _holds.Kind.PERSON and \
                is_nodegate_reason(hold.reason):
            return dataclasses.replace(decision, why=f"{decision.why}; not in nodegate's "
                                       "record, so a person's drain")
        return decision
    if ruling.allowed:
        return decision
    return dataclasses.replace(decision, action=Action.NONE, reason=None,
                              why=f"left as it is: {ruling.why}")


def apply(decision: Decision, scheduler: Scheduler) -> Change | None:
    """Carry a decision out; the adapter is idempotent, so a repeat is harmless."""
    if decision.action is Action.DRAIN:
        assert decision.reason is not None
        return scheduler.drain(decision.node, decision.reason)
    if decision.action is Action.RESUME:
        return scheduler.resume(decision.node)
    return None
