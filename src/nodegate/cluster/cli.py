"""``nodegate gate``: apply the gate policy to one node from its latest report(s).

The agent's cron entry runs ``nodegate health --quiet; nodegate gate`` (health mode); Slurm's
``HealthCheckProgram`` runs a wrapper calling ``nodegate gate --healthcheck``, which runs the
quick battery first and takes the node name from ``SLURMD_NODENAME``. ``--mode join`` is the
per-node core of ``deploy/join.py``. Module-level imports: argparse only (cron start-up time).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodegate.arguments import add_holds_dir, add_profile, add_report_dir, add_slurm_client
from nodegate.bounds import arg_number
from nodegate.vocabulary import LEVELS

if TYPE_CHECKING:
    from nodegate.cluster.budget import BudgetOutcome
    from nodegate.cluster.gate import Decision
    from nodegate.cluster.holds import Hold, HoldStore
    from nodegate.cluster.scheduler import Change, NodeState
    from nodegate.cluster.slurm import SlurmScheduler
    from nodegate.report.model import NodeReport


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "gate", help="drain or resume this node in Slurm from its latest report",
        description="Periodic health (--mode health, the default): a FAIL drains the node "
                    "with a 'nodegate:' reason and records the drain (--holds-dir); a PASS "
                    "lifts only a drain nodegate recorded making whose reason Slurm still "
                    "shows, and only where its evidence ranks high enough: a health drain, or a "
                    "level's hold when the passing run is of that level or higher. The other "
                    "kinds (a suite's, a maintenance or upgrade hold, an RMA hold, ...) need "
                    "their own evidence or a person, and a person's drain is never touched "
                    "whatever its words (docs/concepts.md, 'Holds'; docs/gate.md). --mode join "
                    "resumes only on a fresh passing report of --level. Exit 0 done (any "
                    "action), 2 bad input, 3 scheduler unreachable, its answer not about the "
                    "node, or the node changed since it was read (nothing changed), 1 done but "
                    "the --textfile-dir metrics could not be written after it.")
    parser.add_argument("--mode", choices=("health", "join"), default="health",
                        help="health: judge the newest report (cron, HealthCheckProgram); "
                             "join: resume only on a fresh pass of --level (deploy/join.py) "
                             "(default %(default)s)")
    parser.add_argument("--level", choices=LEVELS,
                        default="standard", help="join: the level that must pass (default "
                        "%(default)s)")
    parser.add_argument("--require", action="append",
                        choices=("multinode", "netload", "cluster-check"),
                        default=[],
                        help="join: a suite that must also pass and be fresh (repeatable)")
    add_profile(parser, "join: the profile whose checks a report must cover",
                then=", then the report's profile by name")
    parser.add_argument("--max-age", help="newest report older than this decides nothing "
                        "(health) or does not join (join): 90s, 15m, 6h, 2d "
                        "(default 1h health, 24h join)")
    parser.add_argument("--node", help="scheduler node name (default $SLURMD_NODENAME, the "
                        "report's slurm_node label, then its node)")
    add_report_dir(parser, "reports to judge")
    add_slurm_client(parser)
    parser.add_argument("--run-health", action="store_true",
                        help="run 'nodegate health' first (its exit 1 is not an error here)")
    parser.add_argument("--healthcheck", action="store_true",
                        help="Slurm HealthCheckProgram mode: --mode health --run-health, "
                             "node from $SLURMD_NODENAME, 2 tries")
    parser.add_argument("--drain-budget", type=arg_number(float, 0, 1),
                        help="health: the share of each of the node's partitions nodegate may "
                             "hold drained at once (0.5: 2 of 4); beyond it the node stays in "
                             "service, marked in its Slurm comment, with a WARN (default: no "
                             "budget; the site file's slurm.drain_budget via the agent role)")
    parser.add_argument("--textfile-dir", type=Path,
                        help="health: write nodegate_gate.prom there (the decision, whether "
                             "the node is held, when the gate ran; with --drain-budget the "
                             "budget's counts too); not written by --dry-run (default: none)")
    add_holds_dir(parser)
    parser.add_argument("--dry-run", action="store_true", help="decide and print, change nothing")
    parser.add_argument("--json", action="store_true", help="print the decision as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from nodegate.battery.engine import parse_duration
    from nodegate.cluster.gate import (
        HealthPolicy,
        JoinPolicy,
        battery_reports,
        decide_health,
        decide_join,
        health_evidence,
        owned,
        with_unreadable,
    )
    from nodegate.cluster.slurm import RetryPolicy, SlurmScheduler
    from nodegate.errors import ConfigError
    from nodegate.report.order import Clock
    from nodegate.report.outputs import default_report_dir
    from nodegate.vocabulary import Level

    if args.healthcheck:
        args.mode, args.run_health = "health", True
        args.retries = min(args.retries, 2)
    if args.retries < 1:
        raise ConfigError("--retries must be at least 1", key="--retries")
    report_dir: Path = args.report_dir or default_report_dir()
    if _writes_textfile(args):
        check_textfile_dir(args.textfile_dir)
    from nodegate.cluster.holds import HoldStore

    store = HoldStore(args.holds_dir)
    store.check()  # before anything is changed: a record that cannot be read is exit 2
    node_hint = args.node or os.environ.get("SLURMD_NODENAME") or None
    fresh = _run_health(report_dir, node_hint) if args.run_health else None
    max_age = parse_duration(args.max_age, key="--max-age") if args.max_age else None
    reports, unreadable, newest, node = _evidence(report_dir, node_hint, fresh,
                                                  own=args.run_health)
    scheduler = SlurmScheduler(conf=args.slurm_conf, retry=RetryPolicy(attempts=args.retries))
    state = scheduler.state(node)
    clock = Clock.here()
    if args.mode == "join":
        join = JoinPolicy(level=Level(args.level), require=tuple(args.require))
        if max_age is not None:
            join = JoinPolicy(level=join.level, max_age_s=max_age, require=join.require)
        decision = decide_join(state, reports, policy=join, now=clock,
                               profile=join_profile(args.profile, newest.profile if newest
                                                    else ""))
        decision = with_unreadable(decision, state, unreadable, level=join.level,
                                   require=join.require)
    else:
        health = HealthPolicy(max_age_s=max_age) if max_age is not None else HealthPolicy()
        decision = decide_health(state, health_evidence(
            battery_reports(reports), clock, health.clock_skew_s), policy=health, now=clock)
        decision = with_unreadable(decision, state, unreadable)
    hold = _hold(args, state, store)
    decision = owned(decision, hold, reports, join=args.mode == "join")
    for path, why in unreadable:
        print(f"nodegate gate: unreadable report {path}: {why}", file=sys.stderr)
    change, outcome, unwritten = _act(args, decision, state, reports, scheduler,
                                      store=store, hold=hold, clear=not unreadable)
    _print(args, node, decision, state, change=change, outcome=outcome)
    if unwritten is not None:  # after the change: exit 2 would say nothing was changed
        print(f"nodegate gate: error: {unwritten} (the decision above was carried out)",
              file=sys.stderr)
        return 1
    return 0


def _hold(args: argparse.Namespace, state: NodeState, store: HoldStore) -> Hold:
    """The node's hold by the record; a hold the deploy set from outside it (an upgrade's, a
    new node's at a join: ``holds.deploy_record``) is recorded now (not in a dry run)."""
    from nodegate.cluster.holds import classify, deploy_record

    record = store.get(state.node)
    if record is None or not record.shown(state):
        adopted = deploy_record(state, join=args.mode == "join")
        if adopted is not None:
            record = adopted
            if not args.dry_run:
                store.put(adopted)
    return classify(state, record)


def _evidence(report_dir: Path, node_hint: str | None, fresh: NodeReport | None, *,
              own: bool) -> tuple[list[NodeReport], list[tuple[str, str]],
                                  NodeReport | None, str]:
    """The node's reports, the unreadable ones (ERROR evidence, a full report disk
    included), the newest and the node's scheduler name; ConfigError (exit 2) where there is
    nothing to judge."""
    from nodegate.cluster.gate import battery_reports, latest
    from nodegate.errors import ConfigError
    from nodegate.report.order import reconcile

    reports, unreadable = read_node_reports(report_dir, node_hint)
    reports, unreadable = _own_evidence(report_dir, reports, unreadable, fresh, own=own)
    reports, went_back = reconcile(reports)
    for note in went_back:
        print(f"nodegate gate: note: {note}", file=sys.stderr)
    newest = latest(battery_reports(reports)) or latest(reports)
    full = any(path.endswith("[disk full]") for path, _ in unreadable)
    if newest is None and not (full and node_hint):
        # nothing readable: nothing was judged, nothing is changed (exit 2)
        raise ConfigError(
            "no report" + (f" for node {node_hint}" if node_hint else "") + " to judge"
            + "".join(f"; unreadable: {path}: {why}" for path, why in unreadable[:3]),
            file=str(report_dir),
        )
    node = node_hint or scheduler_name(newest)  # type: ignore[arg-type]
    return reports, unreadable, newest, node


def _writes_textfile(args: argparse.Namespace) -> bool:
    return args.textfile_dir is not None and args.mode == "health" and not args.dry_run


def check_textfile_dir(folder: Path) -> None:
    """Before anything is changed in Slurm: the drain budget's textfile can be written in
    ``folder`` (created at the write when missing, as the battery's is), or ConfigError
    (exit 2, nothing changed) naming it."""
    from nodegate.cluster.budget import TEXTFILE_NAME
    from nodegate.errors import ConfigError
    from nodegate.report._atomic import check_target, preflight_file

    target = folder / TEXTFILE_NAME
    try:
        if folder.is_dir():
            preflight_file(target)
            return
        check_target(target)
    except ConfigError as exc:
        raise ConfigError(exc.message, file=exc.file, key="--textfile-dir") from None
    existing = folder
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    try:  # a temp file made and removed there: os.access says yes to root even in /proc
        if not existing.is_dir():
            raise NotADirectoryError(20, "not a directory")
        os.rmdir(tempfile.mkdtemp(dir=existing, prefix=".nodegate-check-"))
    except OSError as exc:
        raise ConfigError(f"cannot create {folder}: {existing}: {exc.strerror or exc}",
                          file=str(folder), key="--textfile-dir") from None


def _act(args: argparse.Namespace, decision: Decision, state: NodeState,
         reports: list[NodeReport], scheduler: SlurmScheduler, *, store: HoldStore,
         hold: Hold | None = None, clear: bool = True,
         ) -> tuple[Change | None, BudgetOutcome | None, str | None]:
    """Carry the decision out; in health mode with a budget, a drain goes through the budget
    (docs/gate.md, "The drain budget") and its metrics are written (the third value: why
    they could not be, after the change)."""
    from nodegate.cluster import holds
    from nodegate.cluster.budget import (
        TEXTFILE_NAME,
        DrainBudget,
        clear_mark,
        drain_within_budget,
        render_metrics,
    )
    from nodegate.cluster.gate import Action, offered
    from nodegate.errors import ConfigError
    from nodegate.report._atomic import atomic_write_text

    budget = DrainBudget(args.drain_budget) if args.drain_budget is not None else None
    outcome = None
    if args.dry_run:
        return None, None, None
    holds.reconcile(state, store)  # a record Slurm no longer shows is forgotten
    change: Change | None = None
    if budget is not None and args.mode == "health" and decision.action is Action.DRAIN:
        assert decision.reason is not None
        outcome = drain_within_budget(
            decision.node, decision.reason, scheduler, budget, store=store, decided=state,
            evidence=decision.report_id,
            log=lambda line: print(f"nodegate gate: {line}", file=sys.stderr))
        change = outcome.change
    elif decision.action is Action.DRAIN:
        assert decision.reason is not None
        change = holds.drain(scheduler, store, state, decision.reason,
                             evidence=decision.report_id, join=args.mode == "join")
    elif decision.action is Action.RESUME:
        evidence = offered(decision, hold or holds.classify(state, store.get(state.node)),
                           reports, join=args.mode == "join")
        if evidence is not None:  # ``gate.owned`` turned a resume without one into NONE
            change = holds.resume(scheduler, store, state, evidence)
    if args.mode == "health" and decision.action is not Action.DRAIN and clear and \
            newest_health_passes(reports):
        clear_mark(change.after if change is not None else state, scheduler, store)
    if _writes_textfile(args):
        import time

        from nodegate.cluster import gate_metrics

        action = "mark" if outcome is not None and outcome.exceeded else decision.action.value
        text = gate_metrics.render(decision.node, action, change.after if change else state,
                                   time.time())
        if budget is not None:
            text += render_metrics(decision.node, state.partitions, outcome, budget)
        try:
            atomic_write_text(args.textfile_dir / TEXTFILE_NAME, text)
        except ConfigError as exc:
            return change, outcome, str(exc)
    return change, outcome, None


def _print(args: argparse.Namespace, node: str, decision: Decision, state: NodeState, *,
           change: Change | None, outcome: BudgetOutcome | None) -> None:
    changed = bool(change and change.changed)
    after = change.after if change else state
    action = "mark" if outcome is not None and outcome.exceeded else decision.action.value
    if outcome is not None and outcome.warn:
        print(f"nodegate gate: {outcome.warn}", file=sys.stderr)
    if args.json:
        print(json.dumps({
            "node": node, "mode": args.mode, "action": action,
            "reason": decision.reason, "why": decision.why, "report_id": decision.report_id,
            "changed": changed, "dry_run": bool(args.dry_run),
            "before": state.describe(), "after": after.describe(),
            "marked": outcome.marked if outcome else None,
            "warn": outcome.warn if outcome else None,
        }, indent=2))
    else:
        verb = action + (" (dry run)" if args.dry_run else
                         "" if changed or action in ("none", "mark") else " (already so)")
        why = outcome.warn if outcome is not None and outcome.warn else decision.why
        print(f"nodegate gate: {node} {verb}: {why}  [{after.describe()}]")


def newest_health_passes(reports: list[NodeReport]) -> bool:
    """The latest battery report passes: the only time the gate lifts its budget mark."""
    from nodegate.cluster.gate import battery_reports, is_passing, latest

    newest = latest(battery_reports(reports))
    return newest is not None and is_passing(newest)


def join_profile(value: str | None, report_profile: str) -> dict[str, Any]:
    """The resolved profile data a join judges completeness against: the node's own (as
    ``nodegate health`` picks it), else the one the report names; unknown is a ConfigError."""
    from nodegate.profiles.installed import node_profile_file, select_profile

    if value is None and not os.environ.get("NODEGATE_PROFILE") and \
            not node_profile_file().is_file():
        value = report_profile
    return select_profile(value).data


def _run_health(report_dir: Path, node: str | None) -> NodeReport | None:
    """The quick battery in its own process (its lock, its outputs), named as Slurm names
    this node; FAIL is exit 1, fine. Returns the report it printed (``--json``): judged
    even where it could not be written (a full report disk), so a FAIL still drains."""
    from nodegate.errors import CannotRunError, ConfigError
    from nodegate.report.model import NodeReport

    argv = [sys.executable, "-m", "nodegate.cli", "health", "--quiet", "--json",
            "--report-dir", str(report_dir), *(["--node-name", node] if node else [])]
    proc = subprocess.run(argv, check=False, stdout=subprocess.PIPE)
    if proc.returncode not in (0, 1):
        raise CannotRunError(f"nodegate health exited {proc.returncode}; not gating on it")
    try:
        return NodeReport.from_dict(json.loads(proc.stdout), source="nodegate health")
    except (ValueError, TypeError, KeyError, ConfigError):
        return None


#: Below this many free bytes the report folder's filesystem counts as full: no report
#: (~100 KiB to a few MiB) can be written there.
FULL_DISK_BYTES = 64 * 1024


def disk_full(report_dir: Path) -> str | None:
    """Why no new report can be written in ``report_dir`` (its filesystem is full), or None."""
    try:
        info = os.statvfs(report_dir)
    except OSError:
        return None
    free = info.f_bavail * info.f_frsize
    if free >= FULL_DISK_BYTES and (info.f_files == 0 or info.f_favail > 0):
        return None
    what = "no free inode" if free >= FULL_DISK_BYTES else f"{free} bytes free"
    return (f"report disk full ({what}): no new report can be written, the newest one "
            "present is not this run's (ERROR)")


def _own_evidence(report_dir: Path, reports: list[NodeReport],
                  unreadable: list[tuple[str, str]], fresh: NodeReport | None, *,
                  own: bool = False) -> tuple[list[NodeReport], list[tuple[str, str]]]:
    """The node's evidence on the node itself: the report ``health`` just judged (added when
    it could not be written), and a full report disk as ERROR evidence (drains; a node
    whose reports cannot be written is never "nothing to judge")."""
    if fresh is not None and fresh.report_id not in {r.report_id for r in reports}:
        print(f"nodegate gate: judging the report nodegate health printed ({fresh.report_id}, "
              f"{fresh.verdict.value}): it was not written to {report_dir}", file=sys.stderr)
        # newer than every report present: give it the next sequence of their order
        top = max((r.sequence for r in reports if r.sequence is not None), default=0)
        reports = [*reports, dataclasses.replace(fresh, sequence=top + 1)]
    # a node's own folder (a bastion's full disk is not the node's)
    own = own or (report_dir.is_dir() and any(report_dir.glob("*-latest.json")))
    full = disk_full(report_dir) if own and report_dir.is_dir() else None
    if full is not None:
        unreadable = [*unreadable, (f"{report_dir} [disk full]", full)]
    return reports, unreadable


def scheduler_name(report: NodeReport) -> str:
    return report.labels.get("slurm_node") or report.node


def node_reports(report_dir: Path, node: str | None) -> list[NodeReport]:
    """``read_node_reports`` where every report must be readable (the first that is not is
    a ConfigError naming it)."""
    from nodegate.errors import ConfigError

    reports, unreadable = read_node_reports(report_dir, node)
    if unreadable:
        path, why = unreadable[0]
        raise ConfigError(why, file=path)
    return reports


def _stand_ins(report_dir: Path, unreadable: list[str]) -> list[NodeReport]:
    """For each unreadable ``<level>-latest.json``, the newest readable dated report of that
    level, newest by the reports' own order (sequence, boot time: ``nodegate.report.order``,
    read from the small summaries), never by the stamp in a name. A readable FAIL beside a
    broken latest copy must still drain; the broken copy stays ERROR evidence."""
    from nodegate.errors import ConfigError
    from nodegate.fileio import read_bytes
    from nodegate.report import load
    from nodegate.report.fleet_summary import SUFFIX
    from nodegate.report.history import DATED_RE
    from nodegate.report.order import dict_key

    out = []
    for path in unreadable:
        name = Path(path).name
        if not name.endswith("-latest.json"):
            continue
        level = name[: -len("-latest.json")]
        ranked = []
        for summary in report_dir.glob(f"{level}-*{SUFFIX}"):
            report = summary.with_name(summary.name[: -len(SUFFIX)] + ".json")
            if not DATED_RE.match(report.name) or report.name[: len(level) + 1] != f"{level}-":
                continue
            try:
                data = json.loads(read_bytes(summary, kind="summary"))
            except (ConfigError, ValueError):
                continue
            if isinstance(data, dict):
                ranked.append((dict_key(data), report))
        for _, report in sorted(ranked, key=lambda item: item[0], reverse=True):
            try:
                out.append(load(report))
                break
            except ConfigError:
                continue
    return out


def _here() -> str | None:
    """This machine's id: a node's own report folder holds its reports whatever their names."""
    from nodegate.report.order import read_machine_id

    return read_machine_id()


def read_node_reports(report_dir: Path, node: str | None
                      ) -> tuple[list[NodeReport], list[tuple[str, str]]]:
    """The node's reports and the (path, why) of those that cannot be read: the
    ``<level>-latest.json`` files when there are any (a node's own report dir holds up to a
    thousand dated ones), else every ``*.json`` below ``report_dir`` (a bastion's fetched
    reports). Filtered to ``node`` (node or slurm_node label) if given. An unreadable file is
    the gate's ERROR evidence, never a reason to act on nothing (``gate.with_unreadable``)."""
    from nodegate.errors import ConfigError
    from nodegate.report import load
    from nodegate.report.fleet_summary import is_report_name

    if not report_dir.is_dir():
        raise ConfigError("report directory not found", file=str(report_dir))
    own = sorted(report_dir.glob("*-latest.json"))
    paths = own or sorted(
        path for path in report_dir.rglob("*.json") if is_report_name(path.name))
    reports = []
    unreadable = []
    for path in paths:
        try:
            reports.append(load(path))
        except ConfigError as exc:
            unreadable.append((str(path), exc.message + (f" (key {exc.key})" if exc.key
                                                         else "")))
    if node is None:
        names = {scheduler_name(r) for r in reports}
        if len(names) > 1:
            raise ConfigError(f"reports for several nodes ({', '.join(sorted(names)[:5])}); "
                              "pass --node", file=str(report_dir))
        return reports, unreadable
    if own:  # an unreadable latest copy: the newest dated report of its level stands in
        reports += _stand_ins(report_dir, [p for p, _ in unreadable])
    mine = [r for r in reports if node in (r.node, r.labels.get("slurm_node"))
            or (own and r.machine_id is not None and r.machine_id == _here())]
    for other in (r for r in mine if node not in (r.node, r.labels.get("slurm_node"))):
        print(f"nodegate gate: note: report {other.report_id} names this machine "
              f"({other.machine_id}) {other.node!r} (host {other.labels.get('host', '?')!r}),"
              f" not {node!r}: judged as this node's by its machine id", file=sys.stderr)
    if not own:  # a bastion's tree: an unreadable file is this node's by where it lies
        folders = {Path(p).parent for p, r in zip(
            [p for p in paths if str(p) not in dict(unreadable)], reports, strict=True)
            if node in (r.node, r.labels.get("slurm_node"))}
        unreadable = [(p, why) for p, why in unreadable
                      if Path(p).parent in folders or Path(p).parent.name == node]
    return mine, unreadable
