"""Cluster acceptance through Slurm: rounds of disjoint 2-node jobs, the pair matrix, the
localisation, and the evidence it leaves on each node.

Each pair runs as one ``srun`` across its two nodes (``--exclusive``, one task per node), and
each task runs the existing ``nodegate multinode`` on its node: the pair's first node hosts
the rendezvous, the second joins, told apart by ``$SLURMD_NODENAME`` (the name Slurm gave the
task's node), so the collective check is the one ``deploy/multinode.py`` runs, not a second
implementation. Both sides are under test here (no known-good peer), so both sides' reports
are read and the pair's verdict is the worse of the two. One round at a time, the pairs of a
round at once (their nodes are disjoint, ``pairs.rounds``).

Every ``srun`` is bounded in time and output (``jobrun``) and its outcome classified
(``job_outcome``): a pair whose job never started (pending past the timeout, refused, the
controller unreachable) is no evidence about either node: it is retried, reported and kept
out of the matrix, and an unreachable controller stops the check (exit 3). A pair that
started and then hung, printed no valid framed report or no collective figure, or printed
more than the cap, is ERROR for that pair, never PASS. The matrix is then read by
``pairs.localise`` (the collectives, then each rail ``ib_write_bw`` measured), and:

- each node gets a suite report (``cluster-check-latest.json``, label ``suite=cluster-check``)
  with its pairs and the localisation's word on it, written into its report folder through a
  one-task job (so the gate and the fleet read it where they read every other report), and a
  copy in the controller's output folder;
- a node the localisation names is drained with ``pairs.reason_for``'s reason, which names
  the failing pairs, within the drain budget when one is given; the gate keeps that hold
  (``gate.suite_hold``) until a passing cluster check and a join lift it.

The plan is every pair (``n - 1`` rounds, ``n(n-1)/2`` jobs) by default; ``bisection``
(``pairs.bisection_rounds``) runs about ``log2(n)`` rounds instead, each node meeting about
``log2(n)`` others: enough to name one bad node on a large partition, not to tell a bad path
between two good nodes from the other pairs it was never run against.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from nodegate.cluster import job_outcome as jo
from nodegate.cluster import jobrun
from nodegate.cluster import pairs as pr
from nodegate.cluster.jobrun import GRACE_S, MAX_OUTPUT, run_bounded
from nodegate.cluster.scheduler import Change, NodeState
from nodegate.errors import CannotRunError, ConfigError

if TYPE_CHECKING:
    from nodegate.cluster.holds_store import HoldStore

#: Every pair job's name is this plus ``a+b``: how an operator (and a cancel) finds them.
PAIR_JOB_PREFIX = "nodegate-pair."
#: The suite label and report name the cluster check leaves on each node.
SUITE = "cluster-check"
#: Schema name of the controller's JSON report.
REPORT_SCHEMA = "nodegate.cluster-check/1"
#: The report folder on a node (the agent role's default).
NODE_REPORT_DIR = "/var/lib/nodegate/reports"
#: The collective whose bus bandwidth fills the matrix's cells.
MATRIX_CHECK = "multinode_allreduce_busbw"
RAIL_CHECK = "multinode_ib_write_bw"
_RANK = {v: i for i, v in enumerate(pr.PAIR_VERDICTS)}
#: Re-exported: the pair job's output is read by ``job_outcome``.
task_outputs = jo.task_outputs


#: The pairing plans: every pair, or about log2(n) rounds (module docstring).
PLANS: dict[str, Callable[[Sequence[str]], list[list[tuple[str, str]]]]] = {
    "all-pairs": pr.rounds, "bisection": pr.bisection_rounds}


@dataclass(frozen=True)
class CheckPolicy:
    """What the site chose for one cluster check."""

    partition: str
    nodegate: str = "/opt/nodegate/venv/bin/nodegate"  # on the nodes
    timeout_s: float = 600.0  # each pair's srun, start to end
    port: int = 29500
    join_timeout_s: float = 120.0
    ranks_per_node: int | None = None
    profile: str | None = None  # on the nodes; None: the installed profile
    qos: str | None = None
    time_limit: str = "20:00"
    report_dir: str = NODE_REPORT_DIR
    drain: bool = True
    drain_budget: float | None = None
    plan: str = "all-pairs"  # or "bisection" (PLANS)
    start_retries: int = 1  # more tries of a pair whose job never started


#: One srun's end (``jobrun.Run``), what a ``Runner`` returns.
Run = jobrun.Run
#: Runs one srun ``argv`` (stdin ``text`` when given) within ``timeout_s``.
Runner = Callable[[Sequence[str], float, str | None], Run]


class CheckScheduler(Protocol):
    """What a cluster check asks of the scheduler (``SlurmScheduler`` has it)."""

    def partition_nodes(self, partition: str) -> list[NodeState]: ...

    def node_address(self, node: str) -> str: ...

    def state(self, node: str) -> NodeState: ...

    def drain(self, node: str, reason: str, *, expect: NodeState | None = None) -> Change: ...

    def resume(self, node: str, *, expect: NodeState | None = None) -> Change: ...

    def set_comment(self, node: str, comment: str | None, *,
                    expect: NodeState | None = None) -> Change: ...


def srun_runner(srun: str = "srun", scancel: str = "scancel", *,
                max_output: int = MAX_OUTPUT, grace_s: float = GRACE_S) -> Runner:
    """The real runner: ``srun`` in its own process group, bounded by its timeout and its
    output (``jobrun.run_bounded``: SIGTERM, which makes srun cancel its step and job, then
    SIGKILL of the whole group), then ``scancel`` by the job's name, so an abandoned pair
    holds no node."""

    def run(argv: Sequence[str], timeout_s: float, text: str | None) -> Run:
        got = run_bounded([srun, *argv], timeout_s, text, max_output=max_output,
                          grace_s=grace_s)
        if got.returncode is None:
            name = next((a.split("=", 1)[1] for a in argv if a.startswith("--job-name=")),
                        None)
            if name:
                run_bounded([scancel, f"--name={name}"], 30.0, max_output=64 * 1024,
                            grace_s=grace_s)
        return got

    return run


# --- one pair --------------------------------------------------------------------------------

def pair_job_name(a: str, b: str) -> str:
    return f"{PAIR_JOB_PREFIX}{a}+{b}"


def pair_script(a: str, b: str, addresses: tuple[str, str], policy: CheckPolicy,
                port: int) -> str:
    """What each of the pair's two tasks runs: ``TASK_STARTED`` first (a job where no task
    printed it never started), then ``nodegate multinode`` as host on ``a``, as join on ``b``,
    its JSON report written to a scratch file (a pair's run is not the node's join evidence:
    its record is the suite report written later) and printed between ``REPORT_BEGIN`` and
    ``REPORT_END`` once it is done (``job_outcome``: whatever else the task prints stays
    outside the frame). Each side advertises the address Slurm knows it by (``addresses``:
    a's, b's)."""
    q = shlex.quote
    common = [q(policy.nodegate), "multinode", "--endpoint", q(f"{addresses[0]}:{port}"),
              "--nnodes", "2", "--rdzv-id", q(f"nodegate-pair-{a}-{b}"),
              "--join-timeout", f"{policy.join_timeout_s:g}", "--node-name",
              '"$SLURMD_NODENAME"', "--json", "--quiet", "--color", "never",
              "--report-dir", '"$d"']
    if policy.ranks_per_node is not None:
        common += ["--ranks-per-node", str(policy.ranks_per_node)]
    if policy.profile:
        common += ["--profile", q(policy.profile)]
    return (f'echo {jo.TASK_STARTED}; d=$(mktemp -d) || exit 3; '
            f'if [ "$SLURMD_NODENAME" = {q(a)} ]; then set -- --role host --peer-name {q(b)} '
            f'--local-addr {q(addresses[0])}; else set -- --role join --peer-name {q(a)} '
            f'--local-addr {q(addresses[1])}; fi; '
            f'{" ".join(common)} "$@" > "$d/pair-report.json"; rc=$?; '
            f"printf '%s\\n' {q(jo.REPORT_BEGIN)}; cat \"$d/pair-report.json\"; "
            f"printf '\\n%s\\n' {q(jo.REPORT_END)}; rm -rf \"$d\"; exit $rc")


def pair_argv(a: str, b: str, addresses: tuple[str, str], policy: CheckPolicy,
              round_index: int = 0) -> list[str]:
    """The srun options and command of one pair (``srun`` itself added by the runner); each
    round its own port (``--port`` + ``round_index``), as deploy/multinode.py gives each
    group, so a round never meets the last one's closing sockets."""
    argv = ["--nodes=2", "--ntasks=2", "--ntasks-per-node=1", f"--nodelist={a},{b}",
            "--exclusive", f"--partition={policy.partition}", f"--time={policy.time_limit}",
            f"--job-name={pair_job_name(a, b)}", "--label", "--kill-on-bad-exit=0"]
    if policy.qos:
        argv.append(f"--qos={policy.qos}")
    return [*argv, "sh", "-c", pair_script(a, b, addresses, policy, policy.port + round_index)]


def port_span(rounds: int) -> int:
    """How many ports a check of ``rounds`` rounds uses (``--port`` and the next ones): one
    per round, at least two, so a retry round never reuses the round before's port."""
    return max(2, rounds)


def check_ports(policy: CheckPolicy, rounds: int) -> None:
    """ConfigError (exit 2, naming ``--port``) when a round's port would pass 65535."""
    last = policy.port + port_span(rounds) - 1
    if last > 65535:
        raise ConfigError(f"{policy.port} with {rounds} round(s) would use ports up to "
                          f"{last}; at most {65536 - port_span(rounds)} here", key="--port")


def _result(report: Mapping[str, Any], check: str) -> list[Mapping[str, Any]]:
    return [r for r in report.get("results") or [] if r.get("check") == check]


def _side_verdict(report: Mapping[str, Any]) -> str:
    verdict = str(report.get("verdict") or "ERROR")
    return verdict if verdict in _RANK else "ERROR"  # SKIP: nothing measured is no pass


def _clip(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _measured(report: Mapping[str, Any]) -> bool:
    """The side measured what a pair is for: a numeric ``MATRIX_CHECK`` figure."""
    return any(isinstance(r.get("measured"), (int, float))
               and not isinstance(r.get("measured"), bool)
               for r in _result(report, MATRIX_CHECK))


def judge_pair(a: str, b: str, run: Run, timeout_s: float
               ) -> list[pr.PairResult] | jo.NotStarted:
    """The pair's results from its srun: the collectives (rail None), then each rail the join
    side measured; or ``NotStarted`` when no task started (never evidence about a node).
    Output over the cap, a side hung after the start, a side without a valid framed report,
    or one without the collective's figure is ERROR, never PASS."""
    if run.over_cap is not None:
        return [pr.PairResult(a, b, "ERROR", detail=(
            f"output over {run.over_cap} bytes; the job was stopped and its output not read"))]
    not_started = jo.never_started(a, b, run, timeout_s)
    if not_started is not None:
        return not_started
    if run.returncode is None:
        return [pr.PairResult(a, b, "ERROR", detail=(
            f"no answer within {timeout_s:g} s after the tasks started (a side hung); "
            f"cancelled. {_clip(run.stderr)}").strip())]
    sides, problems = jo.side_reports(run.stdout, (a, b))
    missing = [n for n in (a, b) if n not in sides]
    if missing:
        why = "; ".join(f"{k}: {v}" for k, v in problems.items())
        return [pr.PairResult(a, b, "ERROR", detail=_clip(
            f"{', '.join(missing)} printed no valid report (srun exit {run.returncode})"
            + (f"; {why}" if why else "") + f": {run.stderr}"))]
    empty = [n for n in (a, b) if not _measured(sides[n])]
    if empty:
        return [pr.PairResult(a, b, "ERROR", detail=(
            f"{', '.join(empty)}: the report has no {MATRIX_CHECK} figure (nothing measured "
            "is no pass)"))]
    verdict = max((_side_verdict(sides[n]) for n in (a, b)), key=_RANK.__getitem__)
    figures = [r.get("measured") for n in (a, b) for r in _result(sides[n], MATRIX_CHECK)]
    numbers = [float(f) for f in figures if isinstance(f, (int, float))]
    failing = [f"{n}: {r['check']}[{r['entity']}] {r['verdict']}" for n in (a, b)
               for r in sides[n].get("results") or [] if r.get("verdict") in ("FAIL", "ERROR")]
    out = [pr.PairResult(a, b, verdict, busbw_gbps=min(numbers) if numbers else None,
                         detail="; ".join(failing)[:300])]
    for r in _result(sides[b], RAIL_CHECK):  # the join side: entity rail@peer
        rail = str(r.get("entity", "")).partition("@")[0]
        measured = r.get("measured")
        out.append(pr.PairResult(a, b, _side_verdict({"verdict": r.get("verdict")}),
                                 rail=rail or None,
                                 busbw_gbps=float(measured) if isinstance(
                                     measured, (int, float)) else None))
    return out


# --- the check -------------------------------------------------------------------------------

@dataclass
class Outcome:
    """What one cluster check found and did. ``not_started``: the pairs whose job never
    started after every try (pair key -> why); they are in no result and no localisation."""

    nodes: list[str]
    rounds: list[list[tuple[str, str]]]
    results: list[pr.PairResult] = field(default_factory=list)
    localisations: dict[str | None, pr.Localisation] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    drained: dict[str, str] = field(default_factory=dict)
    delivered: dict[str, str] = field(default_factory=dict)
    not_started: dict[tuple[str, str], jo.NotStarted] = field(default_factory=dict)
    started: float = 0.0
    finished: float = 0.0

    @property
    def named(self) -> dict[str, str]:
        """node -> its drain reason, every rail (and the collectives) together."""
        out: dict[str, str] = {}
        for rail, loc in self.localisations.items():
            for node in loc.nodes:
                out.setdefault(node, pr.reason_for(node, loc, rail))
        return out

    @property
    def failed(self) -> bool:
        """A pair ran and did not pass: evidence (exit 1)."""
        return any(not r.passed for r in self.results)

    @property
    def passed(self) -> bool:
        return bool(self.results) and not self.failed and not self.not_started

    @property
    def verdict(self) -> str:
        """PASS, FAIL (a pair ran and did not pass) or NOT_STARTED (nothing failed, but a
        pair never started: not measured is not passed)."""
        return "PASS" if self.passed else "FAIL" if self.failed else "NOT_STARTED"

    def unmeasured(self, node: str) -> list[str]:
        """The partners of ``node`` whose pair never started."""
        return sorted(ns.b if ns.a == node else ns.a for ns in self.not_started.values()
                      if node in (ns.a, ns.b))


def choose_nodes(members: Sequence[NodeState], wanted: Sequence[str] | None
                 ) -> tuple[list[str], dict[str, str]]:
    """The nodes to pair: ``wanted`` (all of them, in service or not: an operator named them)
    or else the partition's idle nodes in service; why every other one is left out."""
    if wanted is not None:
        known = {m.node for m in members}
        skipped = {n: "not in the partition" for n in wanted if n not in known}
        return [n for n in dict.fromkeys(wanted) if n in known], skipped
    chosen, skipped = [], {}
    for m in members:
        if not m.available:
            skipped[m.node] = f"not in service: {m.describe()}"
        elif m.state != "idle" or m.flags:
            skipped[m.node] = f"busy: {m.describe()} (users' jobs first)"
        else:
            chosen.append(m.node)
    return chosen, skipped


def ask_members(scheduler: CheckScheduler, partition: str) -> list[NodeState]:
    """The partition's nodes, the answer verified: an empty answer, a name that is not a
    node's or a node listed twice is "could not ask" (CannotRunError, exit 3), never bad
    input and never a verdict."""
    from nodegate.cluster.slurm import NODE_NAME

    try:
        members = scheduler.partition_nodes(partition)
    except ConfigError as exc:  # sinfo answered nothing for it
        raise CannotRunError(f"could not ask Slurm for partition {partition}'s nodes: "
                             f"{exc.message}") from None
    names = [m.node for m in members]
    bad = [n for n in names if not NODE_NAME.fullmatch(n)]
    twice = sorted({n for n in names if names.count(n) > 1})
    if not members or bad or twice:
        raise CannotRunError(f"a garbled answer for partition {partition}'s nodes "
                             f"({len(members)} node(s); not names: {bad[:3]}; listed twice: "
                             f"{twice[:3]}): nothing run")
    return members


def ask_address(scheduler: CheckScheduler, node: str) -> str:
    """Where ``node`` is reached, once Slurm's answer about it names ``node`` itself: an
    answer for another node is "could not ask" (exit 3), never that node's address."""
    answered = scheduler.state(node).node
    if answered != node:
        raise CannotRunError(f"asked Slurm about {node}, it answered for {answered[:60]!r}: "
                             "nothing run", host=node)
    return scheduler.node_address(node)


def _disjoint(pairs: Sequence[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """``pairs`` packed into rounds where no node is in two pairs at once."""
    out: list[list[tuple[str, str]]] = []
    for pair in pairs:
        for round_pairs in out:
            if not any(node in p for p in round_pairs for node in pair):
                round_pairs.append(pair)
                break
        else:
            out.append([pair])
    return out


def run_check(scheduler: CheckScheduler, policy: CheckPolicy, runner: Runner, *,
              nodes: Sequence[str] | None = None, log: Callable[[str], None] = lambda _: None
              ) -> Outcome:
    """Pair the nodes round by round (the pairs of a round at once), retry the pairs that
    never started (``policy.start_retries`` more tries, in rounds of their own), then
    localise from what ran. An unreachable controller stops the check (CannotRunError,
    exit 3) before anything is judged or drained."""
    members = ask_members(scheduler, policy.partition)
    chosen, skipped = choose_nodes(members, nodes)
    outcome = Outcome(chosen, PLANS[policy.plan](chosen), skipped=skipped, started=time.time())
    check_ports(policy, len(outcome.rounds))
    addresses = {n: ask_address(scheduler, n) for n in chosen}
    span = port_span(len(outcome.rounds))
    index = 0

    def one_round(round_pairs: Sequence[tuple[str, str]], title: str) -> None:
        nonlocal index
        log(f"{title}: " + ", ".join(f"{a}+{b}" for a, b in round_pairs))
        argvs = [pair_argv(a, b, (addresses[a], addresses[b]), policy, index % span)
                 for a, b in round_pairs]
        index += 1
        with ThreadPoolExecutor(max_workers=max(1, len(argvs))) as pool:
            runs = list(pool.map(lambda argv: runner(argv, policy.timeout_s, None), argvs))
        unreachable: jo.NotStarted | None = None
        for (a, b), run in zip(round_pairs, runs, strict=True):
            got = judge_pair(a, b, run, policy.timeout_s)
            key = (a, b) if a <= b else (b, a)
            if isinstance(got, jo.NotStarted):
                before = outcome.not_started.get(key)
                outcome.not_started[key] = dataclasses.replace(
                    got, attempts=before.attempts + 1 if before else 1)
                log(f"  {a}+{b}: NOT STARTED ({got.why})")
                if got.unreachable:
                    unreachable = got
                continue
            outcome.not_started.pop(key, None)
            log(f"  {a}+{b}: {got[0].verdict}"
                + (f" {got[0].busbw_gbps:.2f} GB/s" if got[0].busbw_gbps is not None else "")
                + (f" ({got[0].detail})" if got[0].detail and not got[0].passed else ""))
            outcome.results += got
        if unreachable is not None:
            raise CannotRunError(
                f"srun for {unreachable.a}+{unreachable.b}: {unreachable.why}; the check "
                "stopped: nothing judged, nothing drained")

    for number, round_pairs in enumerate(outcome.rounds, start=1):
        one_round(round_pairs, f"round {number}/{len(outcome.rounds)}")
    for attempt in range(1, policy.start_retries + 1):
        if not outcome.not_started:
            break
        again = _disjoint([(ns.a, ns.b) for ns in outcome.not_started.values()])
        for number, round_pairs in enumerate(again, start=1):
            one_round(round_pairs, f"try {attempt + 1} of the pairs that never started, "
                                   f"round {number}/{len(again)}")
    outcome.localisations = {rail: pr.localise(rs) for rail, rs in
                             sorted(pr.by_rail(outcome.results).items(),
                                    key=lambda kv: kv[0] or "")}
    outcome.finished = time.time()
    return outcome


# --- evidence --------------------------------------------------------------------------------

def node_report(node: str, outcome: Outcome, *, profile: str = "cluster-check") -> Any:
    """The suite report ``node`` keeps: one result per pair (and rail) it was in, then the
    localisation's word on it. A failing pair whose other node the matrix names (and this one
    not) is WARN here: the evidence stays, the blame is the other's."""
    from nodegate import __version__
    from nodegate.report import build
    from nodegate.results import CheckResult
    from nodegate.vocabulary import Severity, Verdict

    named = outcome.named
    results = []
    for r in outcome.results:
        if node not in (r.a, r.b):
            continue
        other = r.b if r.a == node else r.a
        verdict = r.verdict
        if not r.passed and other in named and node not in named:
            verdict = "WARN"
        results.append(CheckResult(
            check=pr.RESULT_PREFIX + ("rail_bw" if r.rail else "busbw"),
            entity=pr.result_entity(other, r.rail),
            measured=r.busbw_gbps, threshold=None, unit="GB/s", verdict=Verdict(verdict),
            severity=Severity.INFO if verdict in ("PASS", "WARN") else Severity.CRITICAL,
            evidence={"pair": [r.a, r.b], "pair_verdict": r.verdict, "detail": r.detail}))
    why = named.get(node)
    results.append(CheckResult(
        check="cluster_check_localisation", entity="node",
        measured=why or "not named", threshold="not named", unit="",
        verdict=Verdict.FAIL if why else Verdict.PASS,
        severity=Severity.CRITICAL if why else Severity.INFO,
        evidence={"nodes": sorted(outcome.nodes)}))
    return build(results, node=node, profile=profile, level="standard",
                 started_at=outcome.started, finished_at=outcome.finished, backend="slurm",
                 nodegate_version=__version__, labels={"suite": SUITE})


def deliver_argv(node: str, policy: CheckPolicy) -> list[str]:
    """A one-task job writing its stdin as the node's ``cluster-check-latest.json`` (atomic:
    a temporary file renamed over it)."""
    q = shlex.quote
    final = f"{policy.report_dir}/{SUITE}-latest.json"
    script = (f"umask 022; mkdir -p {q(policy.report_dir)} && cat > {q(final + '.tmp')} && "
              f"mv -f {q(final + '.tmp')} {q(final)}")
    return ["--nodes=1", "--ntasks=1", f"--nodelist={node}", f"--partition={policy.partition}",
            "--time=2", f"--job-name={PAIR_JOB_PREFIX}report.{node}", "sh", "-c", script]


def act(scheduler: CheckScheduler, policy: CheckPolicy, runner: Runner, outcome: Outcome,
        out_dir: Path, *, log: Callable[[str], None] = lambda _: None,
        store: HoldStore | None = None) -> None:
    """Write each node's suite report (controller copy, then onto the node), then drain the
    nodes the matrix named (within the budget when one is set).

    A node with a pair that never started gets no new suite report unless the matrix named
    it: what it was not measured against is neither a pass nor a failure, and its last
    report stays. A controller copy that cannot be written is noted, never a reason to leave
    a named node in service (the output folder was checked before any pair ran,
    ``preflight_out``)."""
    from nodegate import fileio
    from nodegate.errors import NodegateError
    from nodegate.report import to_json

    named = outcome.named
    for node in outcome.nodes:
        unmeasured = outcome.unmeasured(node)
        if unmeasured and node not in named:
            outcome.delivered[node] = (f"not written: its pair(s) with {', '.join(unmeasured)} "
                                       "never started (its last report stays)")
            log(f"{node}: report {outcome.delivered[node]}")
            continue
        text = to_json(node_report(node, outcome)) + "\n"
        try:
            fileio.atomic_write_text(out_dir / "nodes" / node / f"{SUITE}-latest.json", text)
        except NodegateError as exc:
            log(f"{node}: controller copy not written: {exc}")
        run = runner(deliver_argv(node, policy), 120.0, text)
        outcome.delivered[node] = "written" if run.returncode == 0 else (
            "no answer in 120 s" if run.returncode is None
            else f"srun exit {run.returncode}: {_clip(run.stderr, 200)}")
        if run.returncode != 0:
            log(f"{node}: report not written on the node ({outcome.delivered[node]})")
    if not policy.drain:
        return
    from nodegate.cluster import holds
    from nodegate.cluster.budget import DrainBudget, drain_within_budget
    from nodegate.cluster.holds_store import HoldStore

    store = store if store is not None else HoldStore()
    for node, reason in named.items():
        # the hold rule and compare-and-set (docs/gate.md, "Holds"): a person's drain, an RMA
        # or another suite's hold is left as it is, never rewritten with the check's reason
        decided = scheduler.state(node)
        if policy.drain_budget is not None:
            result = drain_within_budget(node, reason, scheduler,
                                         DrainBudget(policy.drain_budget), log=log,
                                         store=store, decided=decided, evidence=SUITE)
            change = result.change
            warn = result.warn
        else:
            change = holds.drain(scheduler, store, decided, reason, evidence=SUITE)
            warn = None
        if warn:
            outcome.drained[node] = warn
        elif change is not None and change.changed:
            outcome.drained[node] = "drained: " + reason
        else:
            outcome.drained[node] = (f"not drained: already held ({decided.describe()}); "
                                     "a hold nodegate may not replace is kept")
        log(f"{node}: {outcome.drained[node]}")


def preflight_out(out_dir: Path) -> None:
    """Check, before any pair runs, every file the check will write under ``out_dir``
    (``cluster-check.json``, ``.html``, ``nodes/``): a regular file, a link, a device where
    a folder belongs, or a folder that takes no file, is ConfigError (exit 2) naming it."""
    from nodegate import fileio

    for folder in (out_dir, out_dir / "nodes"):
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            what = "a symbolic link" if folder.is_symlink() else "not a folder"
            raise ConfigError(f"cannot write the cluster check's output here: {what}",
                              file=str(folder), key="--out")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the output folder: {exc.strerror or exc}",
                          file=str(out_dir), key="--out") from None
    for name in (f"{SUITE}.json", f"{SUITE}.html"):
        fileio.preflight_file(out_dir / name)


def pair_matrix(outcome: Outcome, rail: str | None = None) -> Any:
    """The fleet's ``PairMatrix`` of one rail (None: the collectives)."""
    return pr.pair_matrix(outcome.nodes, [r for r in outcome.results if r.rail == rail],
                          outcome.localisations.get(rail, pr.Localisation((), ())))


def report_dict(policy: CheckPolicy, outcome: Outcome) -> dict[str, Any]:
    """The controller's JSON report: every pair, the localisation per rail, what was done."""
    def stamp(t: float) -> str:
        return dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat(timespec="seconds")

    return {
        "schema": REPORT_SCHEMA, "partition": policy.partition,
        "started_at": stamp(outcome.started), "finished_at": stamp(outcome.finished),
        "nodes": outcome.nodes, "skipped": outcome.skipped, "plan": policy.plan,
        "rounds": [[list(p) for p in r] for r in outcome.rounds],
        "pairs": [{"a": r.a, "b": r.b, "rail": r.rail, "verdict": r.verdict,
                   "busbw_gbps": r.busbw_gbps, "detail": r.detail} for r in outcome.results],
        "localisation": {rail or "collectives": {
            "nodes": list(loc.nodes), "pairs": [list(p) for p in loc.pairs], "why": loc.why,
            "undetermined": loc.undetermined} for rail, loc in outcome.localisations.items()},
        "named": outcome.named, "drained": outcome.drained, "delivered": outcome.delivered,
        "not_started": [{"a": ns.a, "b": ns.b, "why": ns.why, "attempts": ns.attempts}
                        for _, ns in sorted(outcome.not_started.items())],
        "verdict": outcome.verdict,
    }


def write_outputs(policy: CheckPolicy, outcome: Outcome, out_dir: Path) -> tuple[Path, Path]:
    """``cluster-check.json`` and ``cluster-check.html`` (the heat map) under ``out_dir``."""
    from nodegate import fileio

    json_path, html_path = out_dir / f"{SUITE}.json", out_dir / f"{SUITE}.html"
    fileio.atomic_write_text(json_path, json.dumps(report_dict(policy, outcome), indent=1,
                                                   sort_keys=True) + "\n")
    collectives = [r for r in outcome.results if r.rail is None]
    fileio.atomic_write_text(html_path, pr.matrix_html(
        outcome.nodes, collectives,
        outcome.localisations.get(None, pr.Localisation((), ())),
        title=f"nodegate cluster-check: partition {policy.partition}"))
    return json_path, html_path
