"""The gate against a real Slurm: join, drain, administrator drains, health, controller down."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path

import pytest

from nodegate.cluster.gate import Action, apply, decide_health, decide_join
from nodegate.cluster.slurm import RetryPolicy
from nodegate.errors import CannotRunError, ConfigError
from tests.cluster.conftest import MESSAGE_TIMEOUT, SlurmCluster
from tests.cluster.helpers import report
from tests.conftest import run_cli

pytestmark = pytest.mark.slow


def _join(slurm: SlurmCluster, node: str, *reports: object) -> Action:
    scheduler = slurm.scheduler()
    decision = decide_join(scheduler.state(node), list(reports))  # type: ignore[arg-type]
    apply(decision, scheduler)
    return decision.action


def test_healthy_report_joins_idle(slurm: SlurmCluster) -> None:
    node = "ng1"
    slurm.reset(node)
    # a node being provisioned is held out first, as deploy.py does before the battery
    slurm.scheduler().drain(node, "nodegate: standard report missing")
    assert slurm.sinfo(node) == ("drained", "nodegate: standard report missing")
    assert _join(slurm, node, report(node)) is Action.RESUME
    slurm.wait_state(node, "idle")
    assert _join(slurm, node, report(node)) is Action.NONE  # second run: nothing to do


def test_faulty_report_drains_naming_the_check(slurm: SlurmCluster) -> None:
    node = "ng2"
    slurm.reset(node)
    faulty = report(node, faults=("nvlink-down@gpu3.link5",))
    assert _join(slurm, node, faulty) is Action.DRAIN
    state, reason = slurm.sinfo(node)
    assert state == "drained"
    assert reason == "nodegate: standard failed nvlink_state[gpu3.link5]"
    # idempotent: the same decision again sends no update
    change = slurm.scheduler().drain(node, reason)
    assert not change.changed


def test_administrator_drain_stays(slurm: SlurmCluster) -> None:
    node = "ng3"
    slurm.reset(node)
    slurm.run("scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=bad fan, RMA 4711")
    scheduler = slurm.scheduler()
    for decision in (
        decide_join(scheduler.state(node), [report(node)]),
        decide_health(scheduler.state(node), report(node, level="quick")),
        decide_health(scheduler.state(node),
                      report(node, level="quick", faults=("nvlink-down@gpu0.link1",))),
    ):
        assert decision.action is Action.NONE, decision
        apply(decision, scheduler)
        assert slurm.sinfo(node) == ("drained", "bad fan, RMA 4711")


def test_health_fail_drains_then_pass_resumes_only_nodegate_drain(slurm: SlurmCluster) -> None:
    sick, admin, held = "ng4", "ng5", "ng6"
    for node in (sick, admin, held):
        slurm.reset(node)
    scheduler = slurm.scheduler()
    slurm.run("scontrol", "update", f"NodeName={admin}", "State=DRAIN", "Reason=firmware update")
    faulty = report(sick, level="quick", age=dt.timedelta(minutes=5),
                    faults=("xid@node",))
    decision = decide_health(scheduler.state(sick), faulty)
    assert decision.action is Action.DRAIN
    apply(decision, scheduler)
    assert slurm.sinfo(sick) == ("drained", "nodegate: xid_events[node]")
    # acceptance failed earlier on `held`: a health pass must not lift that
    failed_acceptance = report(held, level="acceptance", faults=("slow-gpu@gpu1", "xid@node"))
    apply(decide_join(scheduler.state(held), [failed_acceptance]), scheduler)
    assert slurm.sinfo(held)[1].startswith("nodegate: acceptance failed xid_events[node]")

    for node in (sick, admin, held):
        passing = report(node, level="quick", age=dt.timedelta(minutes=1))
        apply(decide_health(scheduler.state(node), passing), scheduler)
    slurm.wait_state(sick, "idle")
    assert slurm.sinfo(admin) == ("drained", "firmware update")
    assert slurm.sinfo(held)[0] == "drained"
    # validated again at acceptance level: now it may come back
    apply(decide_health(scheduler.state(held), report(held, level="acceptance")), scheduler)
    slurm.wait_state(held, "idle")


def test_stale_report_does_not_join(slurm: SlurmCluster) -> None:
    node = "ng1"
    slurm.reset(node)
    slurm.scheduler().drain(node, "nodegate: standard report missing")
    old = report(node, age=dt.timedelta(days=2))
    assert _join(slurm, node, old) is Action.DRAIN
    state, reason = slurm.sinfo(node)
    assert state == "drained"
    assert reason.startswith("nodegate: standard report stale (finished ")


def test_unknown_node_is_a_config_error(slurm: SlurmCluster) -> None:
    with pytest.raises(ConfigError, match=r"'nosuchnode' is not known to slurmctld localhost"):
        slurm.scheduler().state("nosuchnode")
    with pytest.raises(ConfigError, match="not a single node name"):
        slurm.scheduler().drain("ng[1-3]", "nodegate: x")


def test_nodes_lists_every_node_once(slurm: SlurmCluster) -> None:
    names = [state.node for state in slurm.scheduler().nodes()]
    assert sorted(names) == sorted(slurm.nodes)


def test_gate_cli_health_mode(slurm: SlurmCluster, tmp_path: Path) -> None:
    node = "ng2"
    slurm.reset(node)
    report(node, level="quick", age=dt.timedelta(minutes=2),
           faults=("nvlink-down@gpu3.link5",)).write(tmp_path / "quick-latest.json")
    args = ("gate", "--report-dir", str(tmp_path), "--slurm-conf", str(slurm.conf), "--json")
    result = run_cli(*args, env={"SLURMD_NODENAME": node})
    assert result.returncode == 0, result.stderr
    decision = json.loads(result.stdout)
    assert decision["action"] == "drain" and decision["changed"] is True
    assert slurm.sinfo(node) == ("drained", "nodegate: nvlink_state[gpu3.link5]")
    report(node, level="quick", age=dt.timedelta(seconds=30)).write(
        tmp_path / "quick-latest.json")
    result = run_cli(*args[:-1], "--node", node)
    assert result.returncode == 0, result.stderr
    assert f"nodegate gate: {node} resume" in result.stdout
    slurm.wait_state(node, "idle")


def test_controller_down_changes_nothing(slurm: SlurmCluster, tmp_path: Path) -> None:
    node = "ng3"
    slurm.reset(node)
    scheduler = slurm.scheduler(retry=RetryPolicy(attempts=2, initial_delay_s=0.5))
    slurm.stop_controller()
    try:
        started = time.monotonic()
        with pytest.raises(CannotRunError) as caught:
            scheduler.drain(node, "nodegate: xid_events[node]")
        elapsed = time.monotonic() - started
        message = str(caught.value)
        assert f"slurmctld localhost:{slurm.ctld_port} (from {slurm.conf}) unreachable" in message
        assert "failed 2 times" in message and "no state was changed" in message
        # each scontrol try gives up after about MessageTimeout; 2 tries + 0.5 s backoff
        assert elapsed < 2 * (MESSAGE_TIMEOUT + 2) + 0.5, elapsed
        print(f"controller down: error after {elapsed:.1f} s")
        report(node, level="quick", faults=("xid@node",)).write(tmp_path / "quick-latest.json")
        result = run_cli("gate", "--report-dir", str(tmp_path), "--slurm-conf",
                         str(slurm.conf), "--node", node, "--retries", "1")
        assert result.returncode == 3, result.stdout + result.stderr
        assert "unreachable" in result.stderr and "Traceback" not in result.stderr
    finally:
        slurm.start_controller()
    # the restarted controller recovers its state; the node was never drained
    state, reason = slurm.sinfo(node)
    assert "drain" not in state and reason == "none"
    assert not slurm.scheduler().state(node).drained


def test_join_plan_reads_and_changes_nothing(slurm: SlurmCluster, tmp_path: Path) -> None:
    """``gate --mode join --dry-run``, the deploy's JoinPlan fact: the decision without acting;
    ``drain``/``resume`` exactly when the real join changes the state, ``none`` after it."""
    node = "ng4"
    slurm.reset(node)
    report(node, faults=("nvlink-down@gpu3.link5",)).write(tmp_path / "standard-latest.json")
    join = ("gate", "--mode", "join", "--report-dir", str(tmp_path), "--slurm-conf",
            str(slurm.conf), "--node", node, "--json")

    def plan() -> dict[str, object]:
        result = run_cli(*join, "--dry-run")
        assert result.returncode == 0, result.stderr
        return dict(json.loads(result.stdout))

    first = plan()
    assert (first["action"], first["changed"], first["dry_run"]) == ("drain", False, True)
    assert slurm.sinfo(node) == ("idle", "none")  # read, not drained
    acted = json.loads(run_cli(*join).stdout)
    assert (acted["action"], acted["changed"]) == ("drain", True)
    again = plan()
    assert again["action"] == "none" and str(again["why"]).startswith("already drained")
    report(node).write(tmp_path / "standard-latest.json")
    assert plan()["action"] == "resume"
    assert "drain" in slurm.sinfo(node)[0]  # still drained: the plan resumed nothing
    assert json.loads(run_cli(*join).stdout)["changed"] is True
    slurm.wait_state(node, "idle")
    assert plan()["action"] == "none"
