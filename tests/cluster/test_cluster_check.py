"""The cluster check: pairs as srun jobs, read back, localised, left on the nodes, drained.

srun is a fake runner here that answers as ``srun --label`` does with each side's
``nodegate multinode --json`` report; the lab test (tests/roles/test_lab_sweep.py) runs the
same against the lab's real slurmctld/slurmd and torchrun.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from nodegate.cluster import cluster_check as cc
from nodegate.cluster import job_outcome as jo
from nodegate.cluster import pairs as pr
from nodegate.cluster.gate import Action, decide_health, decide_join
from nodegate.cluster.reasons import suite_hold
from nodegate.cluster.scheduler import Change, NodeState
from nodegate.report import build, to_json
from nodegate.report.model import validate
from nodegate.results import CheckResult, Severity, Verdict
from tests.cluster.helpers import report as battery_report

NODES = ["n1", "n2", "n3", "n4"]


class FakeSlurm:
    """A partition's nodes; drains recorded as scontrol would make them."""

    def __init__(self, members: Sequence[NodeState]) -> None:
        self.members = {m.node: m for m in members}
        self.drains: dict[str, str] = {}

    def partition_nodes(self, partition: str) -> list[NodeState]:
        return list(self.members.values())

    def node_address(self, node: str) -> str:
        return f"10.0.0.{node[1:]}"

    def state(self, node: str) -> NodeState:
        return self.members[node]

    def drain(self, node: str, reason: str, *, expect: NodeState | None = None) -> Change:
        before = self.members[node]
        after = NodeState(node, "idle", frozenset({"DRAIN"}), reason, partitions=("gpu",))
        self.members[node] = after
        self.drains[node] = reason
        return Change(node, "drain", True, before, after)

    def resume(self, node: str, *, expect: NodeState | None = None) -> Change:
        raise AssertionError("a cluster check never resumes")

    def set_comment(self, node: str, comment: str | None, *,
                    expect: NodeState | None = None) -> Change:
        before = self.members[node]
        return Change(node, "comment", False, before, before)


def side(node: str, peer: str, busbw: float, *, floor: float = 10.0,
         verdict: Verdict | None = None) -> str:
    """What ``nodegate multinode --json`` prints on one side of a pair (``verdict``: the
    collective's, whatever the figure)."""
    verdict = verdict or (Verdict.PASS if busbw >= floor else Verdict.FAIL)
    results = [
        CheckResult("multinode_completed", f"peer-{peer}", 2, "completed", "ranks",
                    Verdict.PASS, Severity.INFO, {}),
        CheckResult(cc.MATRIX_CHECK, f"peer-{peer}", busbw, {"min": floor}, "GB/s", verdict,
                    Severity.INFO if verdict is Verdict.PASS else Severity.CRITICAL, {})]
    return to_json(build(results, node=node, profile="h100-hgx", level="standard",
                         started_at=1_700_000_000.0, backend="cpu",
                         labels={"suite": "multinode"}))


def labelled(*tasks: str) -> str:
    """What ``srun --label`` prints of the pair script's tasks: each starts, then prints its
    report in a frame (``cluster_check.pair_script``)."""
    printed = [f"{jo.TASK_STARTED}\n{jo.REPORT_BEGIN}\n{text}\n{jo.REPORT_END}"
               for text in tasks]
    return "\n".join(f"{i}: {line}" for i, text in enumerate(printed) for line in
                     text.splitlines())


class FakeSrun:
    """Answers each pair job as srun --label would: a pair with ``bad`` runs at 2 GB/s on
    ``bad``'s side; ``silent`` pairs never answer; report deliveries succeed."""

    def __init__(self, bad: str | None = None, silent: frozenset[str] = frozenset(),
                 barrier: threading.Barrier | None = None) -> None:
        self.bad, self.silent, self.barrier = bad, silent, barrier
        self.pair_jobs: list[list[str]] = []
        self.delivered: dict[str, str] = {}
        self.lock = threading.Lock()

    def __call__(self, argv: Sequence[str], timeout_s: float, text: str | None) -> cc.Run:
        nodelist = next(a for a in argv if a.startswith("--nodelist=")).split("=")[1]
        if text is not None:  # a report delivery
            with self.lock:
                self.delivered[nodelist] = text
            return cc.Run(0, "", "", 0.1)
        with self.lock:
            self.pair_jobs.append(list(argv))
        if self.barrier is not None:
            self.barrier.wait(timeout=5)  # both pairs of a round at once, or this breaks
        a, b = nodelist.split(",")
        if a in self.silent or b in self.silent:
            return cc.Run(None, "", "srun: job 17 queued and waiting for resources", timeout_s)
        speed = {n: 2.0 if n == self.bad else 40.0 for n in (a, b)}
        return cc.Run(0, labelled(side(a, b, speed[a]), side(b, a, speed[b])), "", 3.0)


def members(*busy: str) -> list[NodeState]:
    return [NodeState(n, "allocated" if n in busy else "idle", partitions=("gpu",))
            for n in NODES]


def test_a_pair_job_is_one_exclusive_srun_whose_sides_take_their_roles_by_node_name() -> None:
    argv = cc.pair_argv("n1", "n3", ("10.0.0.1", "10.0.0.3"),
                        cc.CheckPolicy("gpu", ranks_per_node=1), round_index=2)
    assert argv[:argv.index("sh")] == [
        "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--nodelist=n1,n3", "--exclusive",
        "--partition=gpu", "--time=20:00", "--job-name=nodegate-pair.n1+n3", "--label",
        "--kill-on-bad-exit=0"]
    script = argv[-1]
    assert 'if [ "$SLURMD_NODENAME" = n1 ]; then set -- --role host --peer-name n3 ' \
           "--local-addr 10.0.0.1; else set -- --role join --peer-name n1 --local-addr " \
           "10.0.0.3; fi" in script
    assert "--endpoint 10.0.0.1:29502 --nnodes 2" in script  # the third round's port
    assert "--ranks-per-node 1" in script and '--report-dir "$d"' in script


def test_one_slow_node_of_four_is_named_drained_and_every_node_keeps_its_pairs(
        tmp_path: Path) -> None:
    slurm, srun = FakeSlurm(members()), FakeSrun(bad="n3")
    policy = cc.CheckPolicy("gpu")
    outcome = cc.run_check(slurm, policy, srun)
    assert len(srun.pair_jobs) == 6 and len(outcome.rounds) == 3
    assert outcome.localisations[None].nodes == ("n3",)
    assert outcome.localisations[None].pairs == ()
    cc.act(slurm, policy, srun, outcome, tmp_path)
    assert slurm.drains == {"n3": "nodegate: cluster-check: failed with n1, n2, n4; passed "
                                  "with none"}
    assert suite_hold(slurm.drains["n3"]) == "cluster-check"
    assert sorted(srun.delivered) == NODES == sorted(outcome.delivered)
    for name in NODES:
        data = json.loads(srun.delivered[name])
        validate(data)
        assert data["labels"]["suite"] == "cluster-check" and data["node"] == name
        assert (tmp_path / "nodes" / name / "cluster-check-latest.json").read_text() \
            == srun.delivered[name]
        got = {(r["check"], r["entity"]): r["verdict"] for r in data["results"]}
        assert got[("cluster_check_localisation", "node")] == \
            ("FAIL" if name == "n3" else "PASS")
        peers = [n for n in NODES if n != name]
        assert sorted(e for c, e in got if c == "cluster_pair_busbw") == \
            [f"peer-{p}" for p in peers]
    n3 = json.loads(srun.delivered["n3"])
    assert n3["verdict"] == "FAIL"
    n1 = {r["entity"]: r for r in json.loads(srun.delivered["n1"])["results"]}
    # the failing pair stays in n1's evidence, the blame is n3's: WARN, the pair's own FAIL
    assert n1["peer-n3"]["verdict"] == "WARN" and n1["peer-n3"]["evidence"]["pair_verdict"] \
        == "FAIL" and n1["peer-n3"]["measured"] == 2.0
    assert n1["peer-n2"]["verdict"] == "PASS" and n1["peer-n2"]["measured"] == 40.0


def test_a_persons_drain_on_a_named_node_is_never_rewritten(tmp_path: Path) -> None:
    """`--nodes` pairs an administrator's drained node; its failure is reported, the drain
    and its reason stay the person's (fails on main: rewritten to the check's reason)."""
    nodes = members()
    nodes[2] = NodeState("n3", "idle", frozenset({"DRAIN"}), "bad fan", partitions=("gpu",))
    slurm, srun = FakeSlurm(nodes), FakeSrun(bad="n3")
    policy = cc.CheckPolicy("gpu")
    outcome = cc.run_check(slurm, policy, srun, nodes=list(NODES))
    assert outcome.localisations[None].nodes == ("n3",)
    cc.act(slurm, policy, srun, outcome, tmp_path)
    assert slurm.drains == {} and slurm.members["n3"].reason == "bad fan"
    assert outcome.drained["n3"].startswith("not drained: already held")


def test_a_pair_that_never_starts_is_no_evidence_and_is_retried() -> None:
    srun = FakeSrun(silent=frozenset({"n4"}))
    outcome = cc.run_check(FakeSlurm(members()), cc.CheckPolicy("gpu", timeout_s=30), srun)
    assert all("n4" not in r.key() for r in outcome.results)
    assert sorted(outcome.not_started) == [("n1", "n4"), ("n2", "n4"), ("n3", "n4")]
    why = outcome.not_started[("n1", "n4")]
    assert why.attempts == 2 and why.why.startswith("not started within 30 s: pending")
    assert outcome.localisations[None].nodes == () and not outcome.passed
    assert not outcome.failed and outcome.verdict == "NOT_STARTED"
    assert len(srun.pair_jobs) == 6 + 3  # the three retried, one round each (all hold n4)


def test_a_side_that_hangs_after_the_start_is_error() -> None:
    started = f"0: {jo.TASK_STARTED}\n1: {jo.TASK_STARTED}"
    got = cc.judge_pair("n1", "n2", cc.Run(None, started, "", 30.0), 30)
    assert isinstance(got, list) and [r.verdict for r in got] == ["ERROR"]
    assert got[0].detail.startswith("no answer within 30 s after the tasks started")


def test_a_side_without_a_report_is_error() -> None:
    one_side = labelled(side("n1", "n2", 40.0)) + f"\n1: {jo.TASK_STARTED}"
    got = cc.judge_pair("n1", "n2", cc.Run(1, one_side, "torchrun: connection refused", 2.0),
                        60)
    assert isinstance(got, list) and [r.verdict for r in got] == ["ERROR"]
    assert got[0].detail.startswith("n2 printed no valid report (srun exit 1)")


def test_a_report_for_another_node_is_no_ones() -> None:
    got = cc.judge_pair("n1", "n2", cc.Run(0, labelled(side("n1", "n2", 40.0),
                                                       side("n7", "n1", 40.0)), "", 2.0), 60)
    assert isinstance(got, list) and got[0].verdict == "ERROR"
    assert "a report for 'n7', not one of n1, n2" in got[0].detail


def test_a_bisection_plan_names_the_slow_node_in_fewer_jobs(tmp_path: Path) -> None:
    nodes = [f"b{i:02d}" for i in range(16)]
    slurm = FakeSlurm([NodeState(n, "idle", partitions=("gpu",)) for n in nodes])
    srun = FakeSrun(bad="b05")
    policy = cc.CheckPolicy("gpu", plan="bisection")
    outcome = cc.run_check(slurm, policy, srun)
    assert len(outcome.rounds) == 4 and len(srun.pair_jobs) == 32  # all pairs: 15 and 120
    assert outcome.localisations[None].nodes == ("b05",)
    assert cc.report_dict(policy, outcome)["plan"] == "bisection"


def test_the_pairs_of_a_round_run_at_once() -> None:
    srun = FakeSrun(barrier=threading.Barrier(2))
    outcome = cc.run_check(FakeSlurm(members()), cc.CheckPolicy("gpu"), srun)
    assert outcome.passed and len(srun.pair_jobs) == 6  # no barrier broke


def test_only_idle_nodes_in_service_pair_unless_named() -> None:
    got = members("n2")
    got[3] = NodeState("n4", "idle", frozenset({"DRAIN"}), "bad fan", partitions=("gpu",))
    chosen, skipped = cc.choose_nodes(got, None)
    assert chosen == ["n1", "n3"]
    assert skipped["n2"].startswith("busy") and skipped["n4"].startswith("not in service")
    assert cc.choose_nodes(got, ["n4", "n2", "n9"]) == (["n4", "n2"],
                                                        {"n9": "not in the partition"})


def test_a_health_pass_never_lifts_the_cluster_check_hold() -> None:
    reason = "nodegate: cluster-check: failed with n1, n2; passed with none"
    state = NodeState("n3", "idle", frozenset({"DRAIN"}), reason)
    passing = battery_report("n3", level="quick", age=dt.timedelta(minutes=1))
    decision = decide_health(state, passing)
    assert decision.action is Action.NONE and "held until a passing cluster-check" \
        in decision.why


def test_the_report_and_the_heat_map_use_the_fleet_renderer(tmp_path: Path) -> None:
    slurm, srun = FakeSlurm(members()), FakeSrun(bad="n3")
    policy = cc.CheckPolicy("gpu")
    outcome = cc.run_check(slurm, policy, srun)
    json_path, html_path = cc.write_outputs(policy, outcome, tmp_path)
    data = json.loads(json_path.read_text())
    assert data["schema"] == cc.REPORT_SCHEMA and data["verdict"] == "FAIL"
    assert data["localisation"]["collectives"]["nodes"] == ["n3"]
    assert len(data["pairs"]) == 6 and data["rounds"][0] == [["n1", "n4"], ["n2", "n3"]]
    page = html_path.read_text()
    assert page.count("<svg") == 1 and 'id="pairs"' in page  # fleet's pair_matrix_section
    assert "Named by the localisation: n3" in page
    matrix = cc.pair_matrix(outcome)
    assert matrix.nodes == NODES and matrix.named == ["n3"]
    assert matrix.values[0][2] == 2.0 and matrix.values[2][0] == 2.0
    assert matrix.values[0][1] == 40.0 and matrix.values[1][1] is None


@pytest.mark.parametrize("verdicts", [("PASS", "WARN"), ("WARN", "FAIL"), ("FAIL", "ERROR")])
def test_a_pair_is_the_worse_of_its_two_sides(verdicts: tuple[str, str]) -> None:
    texts = [side(name, peer, 40.0, verdict=Verdict(verdict)) for name, peer, verdict in
             (("a", "b", verdicts[0]), ("b", "a", verdicts[1]))]
    got = cc.judge_pair("a", "b", cc.Run(0, labelled(*texts), "", 1.0), 60)
    assert isinstance(got, list)
    assert got[0].verdict == verdicts[1]
    assert got[0].passed == (verdicts[1] in ("PASS", "WARN"))
    assert pr.PAIR_VERDICTS.index(got[0].verdict) == max(pr.PAIR_VERDICTS.index(v)
                                                         for v in verdicts)


def test_a_passing_cluster_check_and_a_join_lift_the_hold_a_failing_one_keeps_it() -> None:
    reason = "nodegate: cluster-check: failed with n1, n2, n4; passed with none"
    state = NodeState("n3", "idle", frozenset({"DRAIN"}), reason)
    standard = battery_report("n3", level="standard")
    good = cc.run_check(FakeSlurm(members()), cc.CheckPolicy("gpu"), FakeSrun())
    assert decide_join(state, [standard, cc.node_report("n3", good)]).action is Action.RESUME
    bad = cc.run_check(FakeSlurm(members()), cc.CheckPolicy("gpu"), FakeSrun(bad="n3"))
    kept = decide_join(state, [standard, cc.node_report("n3", bad)])
    assert kept.action is Action.DRAIN and suite_hold(kept.reason) == "cluster-check"
    assert decide_join(state, [standard]).reason == "nodegate: cluster-check report missing"
