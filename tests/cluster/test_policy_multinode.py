"""The join gate's multi-node requirement and its hold (policy only, no scheduler)."""

from __future__ import annotations

import datetime as dt

from nodegate.cluster.gate import Action, JoinPolicy, battery_reports, decide_health, decide_join
from nodegate.cluster.reasons import suite_hold
from nodegate.cluster.scheduler import NodeState
from nodegate.judge import load as verdicts
from nodegate.profiles.loader import Threshold
from nodegate.report import NodeReport, build
from nodegate.results import Verdict
from tests.cluster.helpers import report

DRAINED_NEW = NodeState("n1", "idle", frozenset({"DRAIN"}), "nodegate: standard report missing")
REQUIRE = JoinPolicy(require=("multinode",))


def pair_report(verdict: Verdict, *, age: dt.timedelta = dt.timedelta(minutes=5),
                busbw: float = 0.3) -> NodeReport:
    """What ``nodegate multinode --role join`` writes on n1 after a run with node9 (the real
    judge on a canned sweep; ``verdict`` picks a threshold the figure clears or not)."""
    floor = busbw / 2 if verdict is Verdict.PASS else busbw * 2
    th = {"multinode_allreduce_busbw_gbps_min": Threshold(
        "multinode_allreduce_busbw_gbps_min", "min", floor, "GB/s", "policy: test")}
    value = {"world": 2, "hosts": ["n1", "node9"], "backend": "cpu/gloo",
             "sweep": [{"bytes": 4 << 20, "seconds": 0.01, "iters": 8,
                        "algbw_gbps": busbw, "busbw_gbps": busbw}]}
    results = verdicts.multinode(True, value, {"duration_s": 12.0}, th, "peer-node9")
    assert results[-1].verdict is verdict
    finished = dt.datetime.now(dt.timezone.utc) - age
    return build(results, node="n1", profile="sim-h100-hgx", level="standard",
                 started_at=finished.timestamp() - 12, finished_at=finished, duration_s=12.0,
                 backend="cpu/gloo",
                 nodegate_version="0.1.0", labels={"suite": "multinode", "peer": "node9"})


def test_required_and_missing_drains_with_a_multinode_hold() -> None:
    decision = decide_join(DRAINED_NEW, [report("n1")], policy=REQUIRE)
    assert decision.action is Action.DRAIN
    assert decision.reason == "nodegate: multinode report missing"
    assert suite_hold(decision.reason) == "multinode"


def test_required_and_failing_names_the_check_and_the_peer() -> None:
    decision = decide_join(DRAINED_NEW, [report("n1"), pair_report(Verdict.FAIL, busbw=0.01)],
                           policy=REQUIRE)
    assert decision.action is Action.DRAIN
    assert decision.reason == "nodegate: multinode failed multinode_allreduce_busbw[peer-node9]"


def test_required_and_passing_resumes() -> None:
    decision = decide_join(DRAINED_NEW, [report("n1"), pair_report(Verdict.PASS)],
                           policy=REQUIRE)
    assert decision.action is Action.RESUME


def test_stale_pair_report_does_not_join() -> None:
    old = pair_report(Verdict.PASS, age=dt.timedelta(days=3))
    decision = decide_join(DRAINED_NEW, [report("n1"), old], policy=REQUIRE)
    assert decision.action is Action.DRAIN
    assert decision.reason is not None and decision.reason.startswith(
        "nodegate: multinode report stale")


def test_a_pair_report_never_stands_in_for_the_battery() -> None:
    # the multinode report is labelled level standard; it must not count as a standard run
    decision = decide_join(NodeState("n1", "idle"), [pair_report(Verdict.PASS)],
                           policy=REQUIRE)
    assert decision.action is Action.DRAIN
    assert decision.reason == "nodegate: standard report missing"
    assert battery_reports([pair_report(Verdict.PASS)]) == []


def test_not_required_ignores_pair_reports() -> None:
    decision = decide_join(DRAINED_NEW, [report("n1"), pair_report(Verdict.FAIL)])
    assert decision.action is Action.RESUME


def test_health_pass_never_lifts_a_multinode_hold() -> None:
    held = NodeState("n1", "idle", frozenset({"DRAIN"}),
                     "nodegate: multinode failed multinode_allreduce_busbw[peer-node9]")
    decision = decide_health(held, report("n1", level="quick", age=dt.timedelta(minutes=1)))
    assert decision.action is Action.NONE
    assert "multinode" in decision.why
    # and a health failure keeps the hold rather than overwriting it
    sick = decide_health(held, report("n1", level="quick", faults=("nvlink-down@gpu3.link5",),
                                      age=dt.timedelta(minutes=1)))
    assert sick.action is Action.NONE


def test_join_without_the_requirement_still_honours_the_hold() -> None:
    held = NodeState("n1", "idle", frozenset({"DRAIN"}),
                     "nodegate: multinode failed multinode_allreduce_busbw[peer-node9]")
    stays = decide_join(held, [report("n1"), pair_report(Verdict.FAIL)])
    assert stays.action is Action.NONE and stays.reason == held.reason
    lifted = decide_join(held, [report("n1"), pair_report(Verdict.PASS)])
    assert lifted.action is Action.RESUME


def netload_report(floor: float) -> NodeReport:
    """What ``nodegate netload`` writes: the real judge on a real perftest capture."""
    from pathlib import Path

    from nodegate.judge.network_load import rail_bw
    from nodegate.probes.perftest import BwOutcome, parse_bw

    capture = Path(__file__).parents[1] / "network" / "data" / "perftest" / \
        "dranet-h200-cx7-roce-use-cuda-dmabuf.txt"
    ok = BwOutcome(True, parse_bw(capture.read_text()), None, "", 6.0)
    th = {"ib_write_bw_gdr_gbps_min": Threshold("ib_write_bw_gdr_gbps_min", "min", floor,
                                                "Gb/s", "policy: test")}
    results = rail_bw("ib_write_bw_gdr", {"mlx5_3.port1": ok}, th)
    finished = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=5)
    return build(results, node="n1", profile="sim-h100-hgx", level="standard",
                 started_at=finished.timestamp() - 6, finished_at=finished, duration_s=6.0,
                 backend="perftest", nodegate_version="0.1.0", labels={"suite": "netload"})


def test_a_required_netload_suite_fails_on_its_rail_and_never_stands_in_for_the_battery() -> None:
    policy = JoinPolicy(require=("netload",))
    low = decide_join(DRAINED_NEW, [report("n1"), netload_report(380.0)], policy=policy)
    assert low.action is Action.DRAIN
    assert low.reason == "nodegate: netload failed ib_write_bw_gdr[mlx5_3.port1]"
    assert suite_hold(low.reason) == "netload"
    ok = decide_join(DRAINED_NEW, [report("n1"), netload_report(100.0)], policy=policy)
    assert ok.action is Action.RESUME
    assert battery_reports([netload_report(100.0)]) == []
