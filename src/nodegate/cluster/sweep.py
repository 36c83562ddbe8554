"""The sweep: the active battery on idle nodes, one exclusive Slurm job per node, on a period.

The cron health check only reads NVML and the kernel log; silent data corruption, a slow GPU
or a weak link show only under load. So the controller runs ``nodegate sweep`` from a timer:
it picks the partition's nodes that are idle and due, and submits one job per node that runs
the standard level and then the gate, which drains a node that fails (with its usual
``nodegate:`` reason and drain budget).

What a sweep never does:

- **run beside a user's job.** Only nodes whose base state is ``idle`` are picked (not
  ``mixed``, ``allocated``, ``completing``, ``reserved``...), and the job asks for the node
  whole (``--exclusive``) at the site's partition, QOS and nice value, so users' pending work
  comes first when the scheduler chooses.
- **take more of a partition than the site allows.** ``--max-concurrent`` bounds the sweep
  jobs queued or running at once; ``--drain-budget`` bounds nodes out of users' reach per
  partition: nodegate's drains plus the nodes a sweep holds, the same share the gate's drain
  budget uses.
- **submit twice.** An ``sbatch`` is tried once (a retried submission after a timeout could
  queue a second job). Queued or running sweep jobs are found by their name
  (``nodegate-sweep.<node>``), so a node with one is skipped however the last sweep ended;
  two sweeps at once are kept apart by a lock on the ledger.

When a node is due comes from the ledger, the controller's own record of each submission on
its own clock (one clock, so no comparison across machines). A record dated in the future
(the controller's clock stepped back) makes the node due at once: sweeping early is harmless,
skipping a node for the length of a clock step is not.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from nodegate.cluster.budget import DrainBudget, counts_against
from nodegate.cluster.scheduler import NodeState
from nodegate.errors import ConfigError

#: Every sweep job's name is this plus the node's: how a sweep finds its own jobs.
JOB_PREFIX = "nodegate-sweep."
#: Slurm job states of a job that still holds (or will hold) its node.
ACTIVE_JOB_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED",
                               "RESIZING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
                               "SIGNALING", "STAGE_OUT", "STOPPED"})
#: nodegate on a node, where the agent role installs it (its ``agent_venv`` default).
NODE_NODEGATE = "/opt/nodegate/venv/bin/nodegate"
#: The power poller's credentials on a node (the agent role's ``pdu_monitor_env_file``).
POWER_ENV_FILE = "/etc/nodegate/power-poller.env"
#: Loads them as the agent's cron entry does (``NAME=value`` lines taken literally, nothing
#: expanded), when the file is there: without them the power group of ``validate`` stops
#: with a missing variable, no report is written and the gate judges the last cron run.
LOAD_POWER_ENV = (f'if [ -r {POWER_ENV_FILE} ]; then while IFS= read -r l; do case "$l" in '
                  f'[A-Za-z_]*=*) export "$l";; esac; done < {POWER_ENV_FILE}; fi; ')
#: The command a sweep job runs by default: the standard level, then the gate in health mode
#: (a FAIL drains with the gate's reason, within the sweep's drain budget when one is set).
#: Joined with ``;``: a failing battery must still reach the gate. The profile and the report
#: folder are the agent role's defaults (/etc/nodegate/profile.json, /var/lib/nodegate/reports).
DEFAULT_COMMAND = (f"{LOAD_POWER_ENV}{NODE_NODEGATE} validate --level standard --quiet; "
                   f"{NODE_NODEGATE} gate --mode health")
#: Ledger schema name (the file is JSON, written atomically).
LEDGER_SCHEMA = "nodegate.sweep-ledger/1"


@dataclass(frozen=True)
class SweepPolicy:
    """What the site chose: where, how often, how many at once, at what priority."""

    partition: str
    period_s: float
    max_concurrent: int = 1
    drain_budget: float | None = None
    qos: str | None = None
    nice: int | None = None
    time_limit: str = "30:00"
    command: str | None = None  # None: DEFAULT_COMMAND, the gate given the drain budget
    output_dir: str | None = None

    def job_command(self) -> str:
        """What each sweep job runs on its node."""
        if self.command is not None:
            return self.command
        if self.drain_budget is None:
            return DEFAULT_COMMAND
        return f"{DEFAULT_COMMAND} --drain-budget {self.drain_budget:g}"


@dataclass(frozen=True)
class SweepJob:
    """One sweep job the scheduler still holds."""

    job_id: str
    node: str
    state: str


@dataclass(frozen=True)
class Plan:
    """The nodes to submit now, in order, and why every other node of the partition waits."""

    submit: tuple[str, ...]
    skipped: Mapping[str, str] = field(default_factory=dict)


def job_name(node: str) -> str:
    return f"{JOB_PREFIX}{node}"


#: Digits in a Slurm job id: a 32-bit counter (``MaxJobId`` at most 67,043,328) fits in 10;
#: an answer beyond this is garbled, never recorded.
JOB_ID_DIGITS = 20


def checked_job_id(text: str, *, tool: str) -> str:
    """A job id from ``tool``'s answer through the bounded converter (``bounds.digits``):
    ASCII digits, at most ``JOB_ID_DIGITS`` of them, ``_N`` of an array task allowed;
    ValueError naming the answer's length and start otherwise (a garbled answer)."""
    from nodegate.bounds import digits

    base, _, task = text.partition("_")
    if digits(base, max_chars=JOB_ID_DIGITS) is None or (
            task and digits(task, max_chars=JOB_ID_DIGITS) is None):
        raise ValueError(f"{tool} answered a garbled job id ({len(text)} characters: "
                         f"{text[:40]!r})")
    return text


def parse_squeue(text: str) -> list[SweepJob]:
    """Sweep jobs from ``squeue -h -o '%i|%j|%T'`` (other jobs and blank lines ignored); a
    sweep job with a garbled id is ValueError (the queue could not be read)."""
    jobs = []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 3 or not parts[1].startswith(JOB_PREFIX):
            continue
        job_id, name, state = parts
        jobs.append(SweepJob(checked_job_id(job_id, tool="squeue"),
                             name.removeprefix(JOB_PREFIX), state.upper()))
    return jobs


def parse_sbatch_id(text: str) -> str:
    """The job id ``sbatch --parsable`` printed (``123`` or ``123;cluster``)."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    if not first:
        raise ValueError("sbatch printed no job id")
    return checked_job_id(first.split(";")[0], tool="sbatch")


def sbatch_argv(node: str, policy: SweepPolicy) -> list[str]:
    """The options of one sweep job (the ``sbatch`` binary and ``--wrap`` added by the
    caller): the node alone, whole, at the site's partition, QOS and priority."""
    argv = ["--parsable", f"--job-name={job_name(node)}", f"--nodelist={node}", "--nodes=1",
            "--exclusive", f"--partition={policy.partition}", f"--time={policy.time_limit}"]
    if policy.qos:
        argv.append(f"--qos={policy.qos}")
    if policy.nice is not None:
        argv.append(f"--nice={policy.nice}")
    if policy.output_dir:
        argv.append(f"--output={policy.output_dir}/%x-%j.out")
    return argv


def _human(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"


def _due(node: str, ledger: Mapping[str, float], policy: SweepPolicy, now: float
         ) -> str | None:
    """None when ``node`` is due; else why not yet."""
    last = ledger.get(node)
    if last is None:
        return None
    age = now - last
    if age < 0:  # recorded in the future: the controller's clock stepped back
        return None
    if age < policy.period_s:
        return f"swept {_human(age)} ago, due in {_human(policy.period_s - age)}"
    return None


def plan(members: Sequence[NodeState], jobs: Sequence[SweepJob], ledger: Mapping[str, float],
         policy: SweepPolicy, now: float) -> Plan:
    """Which of the partition's ``members`` to sweep now: idle, available, due, without a
    sweep job, the longest-waiting first, within the concurrency and the drain budget."""
    active = {job.node: job for job in jobs if job.state in ACTIVE_JOB_STATES}
    budget = DrainBudget(policy.drain_budget) if policy.drain_budget is not None else None
    allowed = budget.allowed(len(members)) if budget is not None else None
    names = {m.node for m in members}
    held = sum(1 for node in active if node in names)
    out_of_reach = sum(1 for m in members if counts_against(m) and m.node not in active) + held
    running = len(active)  # across partitions: the concurrency bound is the sweep's own
    chosen: list[str] = []
    skipped: dict[str, str] = {}

    def waiting(m: NodeState) -> tuple[float, str]:
        last = ledger.get(m.node)
        return (float("-inf") if last is None or last > now else last, m.node)

    for m in sorted(members, key=waiting):
        job = active.get(m.node)
        if job is not None:
            skipped[m.node] = f"sweep job {job.job_id} is {job.state.lower()}"
        elif not m.available:
            skipped[m.node] = f"not in service: {m.describe()}"
        elif m.state != "idle" or m.flags:
            skipped[m.node] = f"busy: {m.describe()} (users' jobs first)"
        elif (why := _due(m.node, ledger, policy, now)) is not None:
            skipped[m.node] = why
        elif running + len(chosen) >= policy.max_concurrent:
            skipped[m.node] = (f"concurrency: {running + len(chosen)} sweep job(s) at once, "
                               f"at most {policy.max_concurrent}")
        elif allowed is not None and out_of_reach + len(chosen) + 1 > allowed:
            skipped[m.node] = (f"drain budget: {out_of_reach + len(chosen)} of {len(members)} "
                               f"node(s) already out, {budget.describe() if budget else ''} "
                               f"allows {allowed}")
        else:
            chosen.append(m.node)
    return Plan(tuple(chosen), skipped)


# --- the ledger ------------------------------------------------------------------------------

#: Largest ledger read (``fileio``'s cap for a config file); one past it is rotated.
LEDGER_CAP = 1024 * 1024


def check_ledger_path(path: Path) -> None:
    """Before anything is submitted: the ledger (and its lock) must be a regular file or
    absent, its folder creatable; a symbolic link, a folder or a device there is ConfigError
    (exit 2) naming it, so no job is ever submitted that could not be recorded."""
    from nodegate import fileio

    for target in (path, path.with_name(path.name + ".lock")):
        fileio.check_target(target)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the ledger's folder: {exc.strerror or exc}",
                          file=str(path.parent)) from None
    fileio.preflight_file(path)


def rotate_if_over(path: Path, cap: int = LEDGER_CAP, *, dry_run: bool = False
                   ) -> str | None:
    """A regular ledger over ``cap`` is renamed to ``<name>.1`` (replacing an older one) and
    the sweep starts a new one: its nodes are due at once, which is harmless, while refusing
    it would stop every later sweep until a person edits it. Returns what was done."""
    try:
        size = path.lstat().st_size
    except FileNotFoundError:
        return None
    if size <= cap:
        return None
    old = path.with_name(path.name + ".1")
    if dry_run:
        return (f"ledger {path} is {size} bytes, over its {cap}-byte cap: a sweep keeps it as "
                f"{old}")
    try:
        os.replace(path, old)
    except OSError as exc:
        raise ConfigError(f"ledger over its cap ({size} bytes) and could not be rotated: "
                          f"{exc.strerror or exc}", file=str(path)) from None
    return (f"ledger {path} was {size} bytes, over its {cap}-byte cap: kept as {old}, a new "
            "one started")


def read_ledger(path: Path) -> dict[str, dict[str, Any]]:
    """node -> its last submission (``submitted``: controller epoch seconds, ``job``); an
    absent file is an empty ledger, anything unreadable a ConfigError naming the file."""
    from nodegate import fileio

    if not path.exists():
        return {}
    text = fileio.read_text(path, kind="config")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"not JSON: {exc}", file=str(path)) from None
    if not isinstance(data, dict) or data.get("schema") != LEDGER_SCHEMA \
            or not isinstance(data.get("nodes"), dict):
        raise ConfigError(f"not a {LEDGER_SCHEMA} file", file=str(path))
    nodes: dict[str, dict[str, Any]] = {}
    for node, entry in data["nodes"].items():
        if not isinstance(entry, dict) or not isinstance(entry.get("submitted"), (int, float)):
            raise ConfigError(f"node {node!r}: no 'submitted' time", file=str(path),
                              key=f"nodes.{node}.submitted")
        nodes[str(node)] = dict(entry)
    return nodes


def submitted_times(ledger: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    return {node: float(entry["submitted"]) for node, entry in ledger.items()}


def write_ledger(path: Path, nodes: Mapping[str, Mapping[str, Any]]) -> None:
    from nodegate import fileio

    body = {"schema": LEDGER_SCHEMA, "nodes": {n: dict(nodes[n]) for n in sorted(nodes)}}
    fileio.atomic_write_text(path, json.dumps(body, indent=1, sort_keys=True) + "\n")


def record(ledger: dict[str, dict[str, Any]], node: str, job_id: str | None,
           now: float | None = None, *, note: str | None = None) -> None:
    """Note a submission (``job`` None: sbatch's answer was lost or garbled, ``note`` says
    which, bounded; squeue tells next time)."""
    ledger[node] = {"submitted": time.time() if now is None else now, "job": job_id}
    if note:
        ledger[node]["note"] = note[:200]


# --- one sweep -------------------------------------------------------------------------------

class SweepScheduler(Protocol):
    """What a sweep asks of the scheduler (``SlurmScheduler`` has it)."""

    def partition_nodes(self, partition: str) -> list[NodeState]: ...

    def queue(self, fmt: str) -> str: ...

    def submit(self, options: Sequence[str], wrap: str) -> str: ...


@dataclass
class Outcome:
    """What one sweep did: jobs submitted (node -> job id), why the others wait, and the
    error that stopped it early (the nodes after it were not submitted)."""

    plan: Plan
    submitted: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    notes: list[str] = field(default_factory=list)

    def lines(self, *, dry_run: bool) -> list[str]:
        out = []
        for node in self.plan.submit:
            if node in self.submitted:
                out.append(f"submit {node}: job {self.submitted[node]}")
            elif dry_run:
                out.append(f"would submit {node}")
        out += [f"skip {node}: {why}" for node, why in sorted(self.plan.skipped.items())]
        out += [f"note: {note}" for note in self.notes]
        if self.error:
            out.append(f"error: {self.error}")
        return out


def sweep(scheduler: SweepScheduler, policy: SweepPolicy, ledger_path: Path, *,
          dry_run: bool = False, now: float | None = None) -> Outcome:
    """One sweep of ``policy.partition``, under the ledger's lock: read, plan, submit one job
    at a time and record each in the ledger before the next (a fault loses nothing)."""
    from nodegate import flock
    from nodegate.errors import CannotRunError, NodegateError

    check_ledger_path(ledger_path)
    lock = ledger_path.with_name(ledger_path.name + ".lock")
    with flock.exclusive(lock, what="sweep lock",
                         busy=lambda pid: f"another sweep (pid {pid}) holds {lock}"):
        rotated = rotate_if_over(ledger_path, dry_run=dry_run)
        ledger = {} if rotated else read_ledger(ledger_path)
        members = scheduler.partition_nodes(policy.partition)
        try:
            jobs = parse_squeue(scheduler.queue("%i|%j|%T"))
        except ValueError as exc:
            raise CannotRunError(f"{exc}; nothing submitted") from None
        moment = time.time() if now is None else now
        outcome = Outcome(plan(members, jobs, submitted_times(ledger), policy, moment))
        if rotated:
            outcome.notes.append(rotated)
        if dry_run:
            return outcome
        for node in outcome.plan.submit:
            try:
                answer = scheduler.submit(sbatch_argv(node, policy), policy.job_command())
            except CannotRunError as exc:
                # not recorded: squeue shows the job next time if it was queued after all
                outcome.error = f"{node}: {exc}"
                return outcome
            try:
                job_id: str | None = parse_sbatch_id(answer)
                garbled = None
            except ValueError as exc:  # sbatch said yes in words we cannot read
                job_id, garbled = None, str(exc)
            record(ledger, node, job_id, moment, note=garbled)
            try:
                write_ledger(ledger_path, ledger)
            except NodegateError as exc:
                outcome.error = (f"{node}: job {job_id or '(id unreadable)'} submitted but not "
                                 f"recorded: {exc}")
                return outcome
            if garbled is not None:
                outcome.error = f"{node}: {garbled}; recorded without an id, sweep stopped"
                return outcome
            assert job_id is not None
            outcome.submitted[node] = job_id
        return outcome
