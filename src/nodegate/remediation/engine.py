"""One step of a node's remediation: what ``nodegate remediate`` runs from the gate's timer.

Each call holds the node's remediation lock, reads the state, the node's Slurm state and the
evidence, and moves the state machine at most one action forward:

* remediation off in the profile: nothing (exit 0);
* drained or down by anyone else: never touched, whatever our state says. "Anyone else" is
  decided by the holds record (``cluster.holds``), not the reason's text: only a health or
  standard hold nodegate recorded is remediation's (its own rank or below); an acceptance,
  cluster-check, multinode, maintenance or upgrade hold and any drain not in the record (a
  person's, whatever its words) are left as they are, and a recorded RMA hold stays an RMA
  hold even when ``remediation.json`` is gone;
* drained by nodegate while jobs still run (DRAINING, DRAIN+ALLOC/MIXED/COMPLETING): wait;
* drained and idle: the action the evidence calls for (``actions``), unless the card's
  count is past the profile's limit or the finding is RMA-class (``escalation``): then RMA;
* an action recorded as started without an outcome (a killed run, a reboot): re-check, never
  act again (a new boot id proves a reboot; anything else the re-qualification proves);
* re-qualification: ``nodegate validate --level standard``; PASS resumes, FAIL escalates.

Everything that touches the world goes through ``Runners`` so tests use fakes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodegate.cluster import holds as _holds
from nodegate.cluster.gate import battery_reports, latest
from nodegate.cluster.holds import Evidence, HoldStore, Kind
from nodegate.cluster.holds import HoldScheduler as Scheduler
from nodegate.cluster.reasons import REASON_PREFIX, clean_reason
from nodegate.cluster.scheduler import NodeState
from nodegate.errors import ExitCode
from nodegate.remediation import actions as _actions
from nodegate.remediation import bundle as _bundle
from nodegate.remediation.actions import Plan, Remedy
from nodegate.remediation.escalation import Policy, over_limit, rma_reason
from nodegate.remediation.state import ActionRecord, NodeRemediation, Phase, StateStore
from nodegate.report.model import NodeReport
from nodegate.results import Verdict

#: Slurm base states meaning jobs still run on the node (``man sinfo``, NODE STATE CODES).
BUSY_STATES = frozenset({"allocated", "mixed", "completing", "draining"})


@dataclass
class BoardView:
    """What the remediation reads from the live board (``nodegate.probes.nvml``)."""

    gpus: dict[str, dict[str, Any]] = field(default_factory=dict)  # entity -> identity fields
    processes: dict[str, list[int]] = field(default_factory=dict)  # entity -> compute pids
    recovery_actions: dict[str, Any] = field(default_factory=dict)  # entity -> NVML value/None
    driver_version: str | None = None
    fabricmanager_running: bool | None = None
    fabricmanager_version: str | None = None


@dataclass
class Runners:
    """Everything that acts on or reads the node; the CLI passes the real ones."""

    board: Callable[[], BoardView]
    reset_gpus: Callable[[Sequence[str]], None]  # GPU UUIDs (empty: every GPU); raises
    reboot: Callable[[], None]
    power_cycle: Callable[[], None] | None  # None: not available on this side (no BMC)
    requalify: Callable[[], bool | None]  # PASS True, FAIL False, could not run None
    boot_id: Callable[[], str | None]
    kernel_log: Callable[[], str | None] = lambda: None
    bug_report: _bundle.BugReportRunner | None = None
    chassis: Callable[[], dict[str, Any] | None] = lambda: None
    bmc: Callable[[], dict[str, Any] | None] = lambda: None
    no_power_cycle: str = ""  # why ``power_cycle`` is None, for the operator


@dataclass(frozen=True)
class Outcome:
    """What one step did: the phase after it, one line for the operator, the exit code."""

    phase: Phase
    step: str
    message: str
    code: ExitCode = ExitCode.PASSED
    plan: Plan | None = None
    bundle: Path | None = None


@dataclass
class Context:
    node: str
    scheduler: Scheduler
    store: StateStore
    reports: Callable[[], list[NodeReport]]
    profile: Mapping[str, Any]
    runners: Runners
    bundle_dir: Path
    dry_run: bool = False
    now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.timezone.utc)
    #: the record of nodegate's drains (``cluster.holds``): whose each hold is
    holds: HoldStore = field(default_factory=HoldStore)
    #: the node as this step read it: every drain is compare-and-set against it
    seen: NodeState | None = None


def jobs_running(state: NodeState) -> bool:
    """DRAINING, DRAIN+ALLOC/MIXED/COMPLETING: a job still runs; never act."""
    return state.state in BUSY_STATES or "COMPLETING" in state.flags


#: The holds remediation may act on: its own rank (a standard re-qualification) or below.
OWN_HOLDS = frozenset({Kind.HEALTH, Kind.STANDARD})


def foreign_hold(node: NodeState, store: HoldStore) -> str | None:
    """Why the node is someone else's to bring back (None: a health or standard hold in
    nodegate's record, or no hold): the record decides, never the reason's text."""
    hold = _holds.classify(node, store.get(node.node))
    if hold.kind is Kind.NONE or hold.kind in OWN_HOLDS:
        return None
    if hold.kind is Kind.PERSON:
        return (f"{node.describe()}: taken out by someone else (not in nodegate's record); "
                "remediation never touches it")
    return (f"{hold.describe()}: ranks above remediation's standard re-qualification or is "
            f"another kind; lifted by {_holds.LIFTED_BY[hold.kind]}; remediation never "
            "rewrites it")


def step(ctx: Context) -> Outcome:
    """One locked step (see the module docstring)."""
    with ctx.store.locked():
        return _step(ctx)


def _step(ctx: Context) -> Outcome:
    policy = Policy.from_profile(ctx.profile)
    st = ctx.store.load(ctx.node)
    if not policy.enabled:
        return Outcome(st.phase, "off", "remediation is off (profile remediation.enabled)")
    node = ctx.scheduler.state(ctx.node)
    ctx.seen = node
    hold = _holds.classify(node, ctx.holds.get(ctx.node))
    if hold.kind is Kind.RMA:  # the record says RMA, whatever remediation.json says
        return Outcome(Phase.RMA, "rma", f"in RMA ({node.reason}, nodegate's record); stays "
                       "drained until a person resumes it", ExitCode.FAILED)
    foreign = foreign_hold(node, ctx.holds)
    if foreign is not None:
        return Outcome(st.phase, "foreign", foreign)
    now = ctx.now()
    if st.phase is Phase.RMA:
        return _in_rma(ctx, st, node, now)
    if not node.drained:
        return _in_service(ctx, st, now)
    return _drained(ctx, st, node, policy, now)


def _drained(ctx: Context, st: NodeRemediation, node: NodeState, policy: Policy,
             now: dt.datetime) -> Outcome:
    """The node is drained by nodegate: wait for jobs, settle, re-qualify, or act. Nothing
    runs on a node whose jobs still run, the re-qualification's load included."""
    if st.phase is Phase.IN_SERVICE:
        _move(ctx, st, Phase.DRAINED, now, reason=node.reason)
    if jobs_running(node):
        if st.phase is Phase.DRAINED:
            _move(ctx, st, Phase.WAITING_FOR_JOBS, now)
        waiting = Phase.WAITING_FOR_JOBS if st.phase in (
            Phase.IN_SERVICE, Phase.DRAINED, Phase.WAITING_FOR_JOBS) else st.phase
        return Outcome(waiting, "wait", f"{node.describe()}: jobs still run; waiting for "
                       "them to end, nothing is done meanwhile")
    if st.phase is Phase.REMEDIATING:
        outcome = _resume(ctx, st, now)
        if outcome is not None:
            return outcome
    if st.phase is Phase.REQUALIFYING:
        return _requalify(ctx, st, policy, now)
    if st.phase is Phase.WAITING_FOR_JOBS:
        _move(ctx, st, Phase.DRAINED, now)
    return _act(ctx, st, policy, now)


def _move(ctx: Context, st: NodeRemediation, to: Phase, now: dt.datetime,
          reason: str | None = None) -> None:
    if ctx.dry_run:
        return
    st.move(to, now)
    if reason is not None:
        st.reason = reason
    ctx.store.save(st)


def _in_service(ctx: Context, st: NodeRemediation, now: dt.datetime) -> Outcome:
    if st.in_flight:
        return Outcome(st.phase, "report", f"the node is in service but an action "
                       f"({st.action.action if st.action else '?'}) is recorded as started "
                       "without an outcome: read the node and the state file by hand",
                       ExitCode.FAILED)
    if st.phase not in (Phase.IN_SERVICE, Phase.REMEDIATING):
        _move(ctx, st, Phase.IN_SERVICE, now)
    return Outcome(Phase.IN_SERVICE, "none", "in service: nothing to remediate")


def _in_rma(ctx: Context, st: NodeRemediation, node: NodeState,
            now: dt.datetime) -> Outcome:
    if not node.drained:  # resumed by a person once the card was replaced
        _move(ctx, st, Phase.IN_SERVICE, now)
        return Outcome(Phase.IN_SERVICE, "none", "resumed by hand after an RMA: in service")
    return Outcome(Phase.RMA, "rma", f"in RMA ({st.rma_reason}); stays drained until a "
                   "person resumes it", ExitCode.FAILED)


# --- deciding and acting ---------------------------------------------------------------------


def evidence(ctx: Context, board: BoardView) -> Plan:
    """The plan from the latest battery report's failures and NVML's recovery actions."""
    reports = ctx.reports()
    newest = latest(battery_reports(reports)) or latest(reports)
    findings = _actions.findings_from_results(newest.results if newest else ())
    findings += _actions.findings_from_recovery_actions(board.recovery_actions)
    return _actions.decide(findings)


def identities(ctx: Context, board: BoardView) -> dict[str, dict[str, Any]]:
    """entity -> identity: the live board's, else the latest report's."""
    reports = ctx.reports()
    newest = latest(battery_reports(reports)) or latest(reports)
    out: dict[str, dict[str, Any]] = {e: dict(i) for e, i in (newest.gpus if newest
                                                                else {}).items()}
    for entity, ident in board.gpus.items():
        out[entity] = {**out.get(entity, {}), **ident}
    return out


def _act(ctx: Context, st: NodeRemediation, policy: Policy, now: dt.datetime) -> Outcome:
    board = ctx.runners.board()
    plan = evidence(ctx, board)
    remedy = plan.remedy
    if st.escalate_from is not None:  # a re-qualification failed after that action
        stronger = Remedy(st.escalate_from).next_rung()
        if stronger.rank > remedy.rank:
            remedy = stronger
    idents = identities(ctx, board)
    # only what the evidence names: a node-level failure after a cured GPU is the node's
    # (a node-level rung, or a person), never that card's again
    targets = list(plan.targets)
    if remedy is Remedy.RMA:
        entity = (plan.rma_entities or tuple(targets) or (None,))[0]
        return _rma(ctx, st, plan, entity=entity, idents=idents, now=now,
                    why="RMA-class finding" if plan.rma_entities
                    else f"re-qualification failed after {st.escalate_from}")
    if remedy is Remedy.NONE:
        return Outcome(st.phase, "none", "no documented automatic remedy for "
                       f"{plan.describe()}; left drained for a person", plan=plan)
    past = over_limit(targets, idents, st.history, now, policy)
    if past:
        entity, key, count = past[0]
        return _rma(ctx, st, plan, entity=entity, idents=idents, now=now,
                    why=f"{count} remediation(s) of card {key} within {policy.window_h:g} h")
    if remedy is Remedy.RESET_GPU:
        return _reset(ctx, st, policy, plan=plan, targets=targets, board=board,
                      idents=idents, now=now)
    return _run(ctx, st, plan, remedy=remedy, targets=targets, idents=idents, now=now)


def _reset(ctx: Context, st: NodeRemediation, policy: Policy, *, plan: Plan,
           targets: list[str], board: BoardView, idents: Mapping[str, Mapping[str, Any]],
           now: dt.datetime) -> Outcome:
    nvlink = ctx.profile.get("nvlink") or {}
    gpu = ctx.profile.get("gpu") or {}
    all_gpus = sorted(board.gpus or idents, key=lambda g: int(g[3:]) if g[3:].isdigit() else 0)
    reset = _actions.reset_plan(
        targets, all_gpus=all_gpus, processes=board.processes,
        nvswitch=bool(nvlink.get("nvswitch")), architecture=gpu.get("architecture"),
        fabric_manager_running=board.fabricmanager_running, allowed=policy.gpu_reset)
    if reset.blocked is not None:
        return Outcome(st.phase, "blocked", f"GPU reset of {', '.join(targets) or 'no GPU'} "
                       f"not done: {reset.blocked}", ExitCode.PASSED, plan=plan)
    return _run(ctx, st, plan, remedy=Remedy.RESET_GPU, targets=list(reset.gpus),
                idents=idents, now=now, note=reset.why, every_gpu=set(reset.gpus) == set(all_gpus))


def _run(ctx: Context, st: NodeRemediation, plan: Plan, *, remedy: Remedy,
         targets: list[str], idents: Mapping[str, Mapping[str, Any]], now: dt.datetime,
         note: str = "",
         every_gpu: bool = False) -> Outcome:
    what = f"{remedy.value} {', '.join(targets) or 'node'}" + (f" ({note})" if note else "")
    if remedy is Remedy.POWER_CYCLE and ctx.runners.power_cycle is None:
        why = f" ({ctx.runners.no_power_cycle})" if ctx.runners.no_power_cycle else ""
        return Outcome(st.phase, "blocked", f"{what} is needed but no BMC power cycle is "
                       f"available here{why}; power-cycle the node by hand (the next run "
                       "re-checks)", ExitCode.FAILED, plan=plan)
    if ctx.dry_run:
        return Outcome(st.phase, "dry-run", f"would {what}: {plan.describe()}", plan=plan)
    # a standard hold first: a reset or a boot may clear the symptom, and a quick health pass
    # (the cron gate) must not resume the node before the standard re-qualification does
    _holds.drain(ctx.scheduler, ctx.holds, ctx.seen or ctx.scheduler.state(ctx.node),
                 requalify_reason(remedy.value, targets), kind=Kind.STANDARD,
                 evidence="remediation")
    serials = {t: _actions_key(t, idents) for t in targets}
    record = ActionRecord(remedy.value, list(targets), serials, now, ctx.runners.boot_id())
    ctx.store.record_intent(st, record, now)  # on disk before the action runs
    try:
        if remedy is Remedy.RESET_GPU:
            uuids = [str(idents.get(t, {}).get("uuid") or t) for t in targets]
            ctx.runners.reset_gpus([] if every_gpu else uuids)
        elif remedy is Remedy.REBOOT_NODE:
            ctx.runners.reboot()
        elif ctx.runners.power_cycle is not None:
            ctx.runners.power_cycle()
    except Exception as exc:  # the runner's failure is the action's outcome, never a crash
        ctx.store.record_outcome(st, "failed", ctx.now(), detail=str(exc)[:300])
        st.escalate_from = remedy.value
        ctx.store.save(st)
        return Outcome(st.phase, "failed", f"{what} failed: {exc}", ExitCode.FAILED, plan=plan)
    if remedy in (Remedy.REBOOT_NODE, Remedy.POWER_CYCLE):
        # the outcome is the new boot id the next run sees; nothing more this boot
        return Outcome(Phase.REMEDIATING, "acted", f"{what}: started; the next run after the "
                       "boot re-qualifies", plan=plan)
    ctx.store.record_outcome(st, "done", ctx.now())
    return _requalify(ctx, st, Policy.from_profile(ctx.profile), ctx.now(), acted=what)


def requalify_reason(action: str, targets: Sequence[str]) -> str:
    """``nodegate: standard re-qualification after power_cycle gpu3``: the gate's own hold
    grammar (``cluster.gate.hold_level``), so only a passing standard run lifts it."""
    return clean_reason(f"{REASON_PREFIX} standard re-qualification after {action} "
                        f"{', '.join(targets) or 'node'}")


def _actions_key(entity: str, idents: Mapping[str, Mapping[str, Any]]) -> str:
    from nodegate.remediation.escalation import card_key

    return card_key(entity, {k: str(v) for k, v in idents.get(entity, {}).items() if v})


def _resume(ctx: Context, st: NodeRemediation, now: dt.datetime) -> Outcome | None:
    """A run that finds ``remediating``: an action whose outcome is not recorded (killed
    run, reboot). Never act again: settle the outcome from what can be seen, then re-check."""
    action = st.action
    if action is None or not st.in_flight:
        return None
    boot = ctx.runners.boot_id()
    rebooted = action.boot_id is not None and boot is not None and boot != action.boot_id
    if action.action in (Remedy.REBOOT_NODE.value, Remedy.POWER_CYCLE.value) and rebooted:
        outcome, detail = "done", f"new boot {boot}"
    else:
        outcome, detail = "unknown", "the run was interrupted; re-checking instead of acting"
    if ctx.dry_run:
        return Outcome(st.phase, "dry-run", f"would record {action.action} as {outcome} "
                       f"({detail}) and re-qualify")
    ctx.store.record_outcome(st, outcome, now, detail=detail)
    return None


def _requalify(ctx: Context, st: NodeRemediation, policy: Policy, now: dt.datetime, *,
               acted: str = "") -> Outcome:
    done = f"{acted}; " if acted else ""
    if ctx.dry_run:
        return Outcome(st.phase, "dry-run", f"{done}would re-qualify (validate --level "
                       "standard) and resume on PASS")
    verdict = ctx.runners.requalify()
    if verdict is None:
        return Outcome(st.phase, "requalify", f"{done}re-qualification could not run; "
                       "retried at the next run", ExitCode.CANNOT_RUN)
    last = st.action.action if st.action else None
    if verdict:
        node = ctx.scheduler.state(ctx.node)  # it took minutes: read again
        foreign = foreign_hold(node, ctx.holds)
        if foreign is not None:
            st.move(Phase.DRAINED, ctx.now())
            st.action, st.escalate_from = None, None
            ctx.store.save(st)
            return Outcome(Phase.DRAINED, "foreign", f"{done}re-qualified at standard: PASS, "
                           f"but meanwhile {foreign}; not resumed")
        change = _holds.resume(ctx.scheduler, ctx.holds, node,
                               Evidence(level="standard", finished_at=ctx.now()))
        if node.drained and not change.changed:
            return Outcome(st.phase, "held", f"{done}re-qualified at standard: PASS, but "
                           f"{node.describe()} is not a hold it lifts; not resumed",
                           ExitCode.FAILED)
        st.move(Phase.IN_SERVICE, ctx.now())
        st.action, st.escalate_from, st.reason = None, None, None
        ctx.store.save(st)
        return Outcome(Phase.IN_SERVICE, "resumed", f"{done}re-qualified at standard: "
                       "PASS; resumed")
    st.escalate_from = last or Remedy.RESET_GPU.value
    st.move(Phase.DRAINED, ctx.now())
    ctx.store.save(st)
    return Outcome(Phase.DRAINED, "escalate", f"{done}re-qualification FAILED; the next run "
                   f"escalates past {st.escalate_from}", ExitCode.FAILED)


def _rma(ctx: Context, st: NodeRemediation, plan: Plan, *, entity: str | None,
         idents: Mapping[str, Mapping[str, Any]], now: dt.datetime, why: str) -> Outcome:
    ident = {k: str(v) for k, v in idents.get(entity or "", {}).items() if v}
    reason = rma_reason(entity, ident, why)
    if ctx.dry_run:
        return Outcome(st.phase, "dry-run", f"would drain with '{reason}' and write the RMA "
                       f"bundle: {plan.describe()}", plan=plan)
    path = write_rma_bundle(ctx, st, reason, now)
    _holds.drain(ctx.scheduler, ctx.holds, ctx.seen or ctx.scheduler.state(ctx.node), reason,
                 kind=Kind.RMA, evidence="remediation")
    st.move(Phase.RMA, now)
    st.rma_reason = reason
    ctx.store.save(st)
    return Outcome(Phase.RMA, "rma", f"{reason}; bundle {path}", ExitCode.FAILED, plan=plan,
                   bundle=path)


def write_rma_bundle(ctx: Context, st: NodeRemediation, reason: str, now: dt.datetime) -> Path:
    """The vendor's archive for this node (``bundle``), under ``ctx.bundle_dir``."""
    board = ctx.runners.board()
    idents = identities(ctx, board)
    reports = ctx.reports()
    failing = [r.to_dict() for rep in reports for r in rep.results
               if r.verdict in (Verdict.FAIL, Verdict.ERROR)]
    gpus = [{"entity": entity, **{k: v for k, v in ident.items()},
             "pci_bus_id": ident.get("pci_bus_id") or ident.get("bus_id")}
            for entity, ident in sorted(idents.items(),
                                        key=lambda kv: int(kv[0][3:]) if kv[0][3:].isdigit()
                                        else 0)]
    manifest = _bundle.build_manifest(
        node=ctx.node, reason=reason, now=now, gpus=gpus, failing=failing,
        history=[a.to_dict() for a in st.history], chassis=ctx.runners.chassis(),
        bmc=ctx.runners.bmc(), driver_version=board.driver_version,
        fabricmanager_version=board.fabricmanager_version)
    stamp = now.astimezone(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = ctx.bundle_dir / f"rma-{ctx.node}-{stamp}.tar.gz"
    return _bundle.write_bundle(path, manifest, kernel_log=ctx.runners.kernel_log(),
                                bug_report=ctx.runners.bug_report)
