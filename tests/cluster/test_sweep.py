"""The sweep: which nodes get the active battery as a Slurm job, and how it is submitted.

The scheduler here is ``SlurmScheduler`` itself over a fake runner that answers sinfo, squeue
and sbatch in Slurm 22.05's formats; the lab test runs the same against real daemons.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from nodegate.cli import main
from nodegate.cluster import sweep as sw
from nodegate.cluster.scheduler import NodeState
from nodegate.cluster.slurm import RetryPolicy, SlurmScheduler
from nodegate.errors import ConfigError

DAY = 86400.0
NOW = 1_800_000_000.0


def node(name: str, state: str = "idle", flags: Sequence[str] = (),
         reason: str | None = None) -> NodeState:
    return NodeState(name, state, frozenset(flags), reason)


def policy(**kw: object) -> sw.SweepPolicy:
    base: dict[str, object] = {"partition": "gpu", "period_s": 7 * DAY, "max_concurrent": 8}
    base.update(kw)
    return sw.SweepPolicy(**base)  # type: ignore[arg-type]


class FakeSlurm:
    """sinfo for one partition, squeue of what was submitted, sbatch that queues a job."""

    def __init__(self, states: Mapping[str, str]) -> None:
        self.states = dict(states)  # node -> StateComplete, e.g. "idle", "mixed", "idle+drain"
        self.reasons: dict[str, str] = {}
        self.jobs: list[tuple[str, str, str]] = []  # (id, name, state)
        self.calls: list[list[str]] = []
        self.sbatch_fails: str | None = None  # "timeout" or an error text
        self.queued = 0

    def __call__(self, argv: Sequence[str], env: Mapping[str, str],
                 timeout: float) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        tool = argv[0].rsplit("/", 1)[-1]
        if tool == "sinfo":
            out = "".join(f"{n}|{s}|Unknown|{self.reasons.get(n, 'none')}\n"
                          for n, s in self.states.items())
            return subprocess.CompletedProcess(argv, 0, out, "")
        if tool == "squeue":
            out = "".join(f"{i}|{name}|{state}\n" for i, name, state in self.jobs)
            out += "99|users-training-run|RUNNING\n"  # a user's job: never a sweep job
            return subprocess.CompletedProcess(argv, 0, out, "")
        assert tool == "sbatch", argv
        if self.sbatch_fails == "timeout":
            raise subprocess.TimeoutExpired(list(argv), timeout)
        if self.sbatch_fails:
            return subprocess.CompletedProcess(argv, 1, "", self.sbatch_fails)
        name = next(a.split("=", 1)[1] for a in argv if a.startswith("--job-name="))
        job_id = str(1000 + self.queued)
        self.queued += 1
        self.jobs.append((job_id, name, "PENDING"))
        return subprocess.CompletedProcess(argv, 0, f"{job_id};lab\n", "")

    def sbatch_calls(self) -> list[list[str]]:
        return [c for c in self.calls if c[0].endswith("sbatch")]


def scheduler(fake: FakeSlurm) -> SlurmScheduler:
    return SlurmScheduler(runner=fake, retry=RetryPolicy(attempts=3), sleep=lambda _s: None,
                          controller="slurmctl:6817")


# --- which nodes ------------------------------------------------------------------------------

def test_only_idle_available_due_nodes_without_a_sweep_job_are_picked() -> None:
    members = [node("n1"), node("n2", "mixed"), node("n3", "allocated"),
               node("n4", "idle", ["DRAIN"], "bad fan, RMA 4711"), node("n5", "down"),
               node("n6"), node("n7"), node("n8", "idle", ["RESERVED"])]
    jobs = [sw.SweepJob("7", "n6", "RUNNING"), sw.SweepJob("6", "n1", "COMPLETED")]
    ledger = {"n7": NOW - DAY}
    out = sw.plan(members, jobs, ledger, policy(), NOW)
    assert out.submit == ("n1",)
    assert out.skipped["n2"].startswith("busy: MIXED")
    assert out.skipped["n3"].startswith("busy: ALLOCATED")
    assert out.skipped["n4"] == "not in service: IDLE+DRAIN (bad fan, RMA 4711)"
    assert out.skipped["n5"].startswith("not in service: DOWN")
    assert out.skipped["n6"] == "sweep job 7 is running"
    assert out.skipped["n7"] == "swept 1.0d ago, due in 6.0d"
    assert out.skipped["n8"].startswith("busy: IDLE+RESERVED")


def test_the_longest_waiting_go_first_within_the_concurrency() -> None:
    members = [node(f"n{i}") for i in range(1, 6)]
    ledger = {"n1": NOW - 8 * DAY, "n2": NOW - 30 * DAY, "n3": NOW - 9 * DAY}
    jobs = [sw.SweepJob("41", "elsewhere", "PENDING")]  # a sweep job in another partition
    out = sw.plan(members, jobs, ledger, policy(max_concurrent=3), NOW)
    # never swept (n4, n5) first, then by age: n2 (30 d), n3 (9 d), n1 (8 d)
    assert out.submit == ("n4", "n5")
    assert out.skipped["n2"] == "concurrency: 3 sweep job(s) at once, at most 3"
    assert set(out.skipped) == {"n1", "n2", "n3"}


def test_the_drain_budget_counts_nodegate_drains_and_held_nodes_not_an_administrators() -> None:
    members = [node("n1", "idle", ["DRAIN"], "nodegate: xid_events[node]"),
               node("n2", "idle", ["DRAIN"], "memory upgrade"), node("n3"), node("n4"),
               node("n5"), node("n6"), node("n7"), node("n8")]
    out = sw.plan(members, [], {}, policy(drain_budget=0.25), NOW)  # 2 of 8 may be out
    assert out.submit == ("n3",)  # n1 (nodegate's drain) + n3 = 2; n2 is not counted
    assert out.skipped["n4"] == ("drain budget: 2 of 8 node(s) already out, 25 % allows 2")
    held = [sw.SweepJob("5", "n3", "RUNNING")]
    assert sw.plan(members, held, {}, policy(drain_budget=0.25), NOW).submit == ()
    assert sw.plan(members, [], {}, policy(drain_budget=0.0), NOW).submit == ()


def test_a_record_from_the_future_means_the_clock_stepped_back_and_the_node_is_due() -> None:
    members = [node("n1"), node("n2")]
    ledger = {"n1": NOW + 3 * DAY, "n2": NOW - 3 * DAY}
    out = sw.plan(members, [], ledger, policy(), NOW)
    assert out.submit == ("n1",) and out.skipped["n2"].startswith("swept 3.0d ago")


# --- how it is submitted ----------------------------------------------------------------------

def test_a_sweep_submits_exclusive_named_jobs_and_records_each(tmp_path: Path) -> None:
    fake = FakeSlurm({"n1": "idle", "n2": "mixed", "n3": "idle"})
    ledger = tmp_path / "sweep" / "ledger.json"
    site = policy(qos="sweep", nice=5000, output_dir="/var/log/nodegate-sweep")
    out = sw.sweep(scheduler(fake), site, ledger, now=NOW)
    assert out.submitted == {"n1": "1000", "n3": "1001"} and out.error is None
    first = fake.sbatch_calls()[0]
    assert first[1:] == ["--parsable", "--job-name=nodegate-sweep.n1", "--nodelist=n1",
                         "--nodes=1", "--exclusive", "--partition=gpu", "--time=30:00",
                         "--qos=sweep", "--nice=5000",
                         "--output=/var/log/nodegate-sweep/%x-%j.out",
                         f"--wrap={sw.DEFAULT_COMMAND}"]
    budgeted = policy(drain_budget=0.25).job_command()
    assert budgeted == f"{sw.DEFAULT_COMMAND} --drain-budget 0.25"
    assert budgeted.startswith(sw.LOAD_POWER_ENV
                               + "/opt/nodegate/venv/bin/nodegate validate --level standard")
    assert "done < /etc/nodegate/power-poller.env; fi; " in sw.LOAD_POWER_ENV
    assert policy(command="true").job_command() == "true"
    data = json.loads(ledger.read_text())
    assert data["schema"] == sw.LEDGER_SCHEMA
    assert data["nodes"]["n1"] == {"submitted": NOW, "job": "1000"}
    again = sw.sweep(scheduler(fake), site, ledger, now=NOW + 60)
    assert again.submitted == {} and again.plan.skipped["n1"] == "sweep job 1000 is pending"
    fake.jobs.clear()  # both jobs ended: not due before the period
    later = sw.sweep(scheduler(fake), site, ledger, now=NOW + 3600)
    assert later.submitted == {} and later.plan.skipped["n3"].startswith("swept 1.0h ago")
    assert sw.sweep(scheduler(fake), site, ledger, now=NOW + 8 * DAY).submitted == {
        "n1": "1002", "n3": "1003"}


def test_a_lost_sbatch_answer_is_not_retried_and_not_recorded(tmp_path: Path) -> None:
    fake = FakeSlurm({"n1": "idle", "n2": "idle"})
    fake.sbatch_fails = "timeout"
    ledger = tmp_path / "ledger.json"
    out = sw.sweep(scheduler(fake), policy(), ledger, now=NOW)
    assert len(fake.sbatch_calls()) == 1  # tried once; n2 not attempted after the fault
    assert out.submitted == {} and out.error is not None
    assert out.error.startswith("n1: slurmctld slurmctl:6817 unreachable: submit a job failed "
                                "once")
    assert out.error.endswith("(sbatch timed out after 30 s); the job may or may not be queued")
    assert not ledger.exists()
    fake.sbatch_fails = None
    assert sw.sweep(scheduler(fake), policy(), ledger, now=NOW).submitted == {
        "n1": "1000", "n2": "1001"}


def test_a_refused_submission_stops_the_sweep_and_keeps_what_was_submitted(
        tmp_path: Path) -> None:
    fake = FakeSlurm({"n1": "idle", "n2": "idle"})
    ledger = tmp_path / "ledger.json"
    real = fake.__call__

    def second_refused(argv: Sequence[str], env: Mapping[str, str],
                       timeout: float) -> subprocess.CompletedProcess[str]:
        if argv[0].endswith("sbatch") and fake.jobs:
            return subprocess.CompletedProcess(argv, 1, "", "sbatch: error: Invalid qos "
                                               "specification")
        return real(argv, env, timeout)

    out = sw.sweep(SlurmScheduler(runner=second_refused, sleep=lambda _s: None,
                                  controller="slurmctl:6817"), policy(), ledger, now=NOW)
    assert out.submitted == {"n1": "1000"}
    assert out.error == ("n2: submit a job failed at slurmctld slurmctl:6817: sbatch: error: "
                         "Invalid qos specification")
    assert json.loads(ledger.read_text())["nodes"].keys() == {"n1"}


def test_a_dry_run_submits_and_records_nothing(tmp_path: Path) -> None:
    fake = FakeSlurm({"n1": "idle"})
    out = sw.sweep(scheduler(fake), policy(), tmp_path / "l.json", dry_run=True, now=NOW)
    assert out.plan.submit == ("n1",) and fake.sbatch_calls() == []
    assert out.lines(dry_run=True) == ["would submit n1"]
    assert not (tmp_path / "l.json").exists()


@pytest.mark.parametrize("body", ["{not json", '{"schema": "other/1", "nodes": {}}',
                                  '{"schema": "nodegate.sweep-ledger/1", "nodes": {"n1": {}}}'])
def test_a_damaged_ledger_is_bad_input_naming_the_file(tmp_path: Path, body: str) -> None:
    path = tmp_path / "ledger.json"
    path.write_text(body)
    with pytest.raises(ConfigError) as err:
        sw.read_ledger(path)
    assert str(path) in str(err.value)


def test_a_fifo_where_the_ledger_belongs_is_refused_not_read(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    os.mkfifo(path)
    with pytest.raises(ConfigError, match=r"ledger\.json"):
        sw.read_ledger(path)


def test_parsers_take_slurms_own_formats() -> None:
    assert sw.parse_sbatch_id("1234\n") == sw.parse_sbatch_id("1234;cluster1\n") == "1234"
    with pytest.raises(ValueError):
        sw.parse_sbatch_id("sbatch: error: Batch job submission failed")
    jobs = sw.parse_squeue("12|nodegate-sweep.n1|RUNNING\n13|train|PENDING\n\nbad line\n")
    assert jobs == [sw.SweepJob("12", "n1", "RUNNING")]


# --- the command ------------------------------------------------------------------------------

def test_the_command_refuses_a_bad_period_and_a_busy_ledger_with_their_codes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "--partition", "gpu", "--period", "boot",
                 "--ledger", str(tmp_path / "l.json")]) == 2
    assert "--period" in capsys.readouterr().err
    assert main(["sweep", "--partition", "gpu", "--period=-1d",
                 "--ledger", str(tmp_path / "l.json")]) == 2
    from nodegate import flock

    ledger = tmp_path / "l.json"
    with flock.exclusive(tmp_path / "l.json.lock", busy=lambda pid: pid):
        assert main(["sweep", "--partition", "gpu", "--ledger", str(ledger),
                     "--slurm-conf", str(tmp_path / "none.conf"), "--retries", "1"]) == 3
    assert "another sweep" in capsys.readouterr().err


def test_the_default_job_loads_the_power_credentials_literally(tmp_path: Path) -> None:
    env = tmp_path / "power-poller.env"
    env.write_text("NODEGATE_PDU_SECRET=a$b c\n# a comment\nnot a line\n")
    loader = sw.LOAD_POWER_ENV.replace(sw.POWER_ENV_FILE, str(env))
    out = subprocess.run(["sh", "-c", loader + 'printf "%s" "$NODEGATE_PDU_SECRET"'],
                         capture_output=True, text=True, check=True, env={"PATH": "/bin:/usr/bin"})
    assert out.stdout == "a$b c"  # nothing expanded
    gone = sw.LOAD_POWER_ENV.replace(sw.POWER_ENV_FILE, str(tmp_path / "absent"))
    assert subprocess.run(["sh", "-c", gone + "true"], check=False).returncode == 0
