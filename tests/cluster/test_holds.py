"""Holds have owners: the gate lifts only a drain it recorded, never
rewrites or clears a person's reason or comment, acts compare-and-set against a Slurm that
changes under it, and takes no verdict from an answer about another node or from none.

Slurm is the fake on PATH (``tests.cluster.fake_slurm``) that can lie: another node's answer,
an empty or garbled one, and a slow controller during which a person drains the node.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from nodegate.cluster import holds
from nodegate.cluster.budget import DrainBudget, drain_within_budget
from nodegate.cluster.holds import Evidence, Hold, HoldStore, Kind, Record
from nodegate.cluster.scheduler import NodeState
from nodegate.cluster.slurm import RetryPolicy, SlurmScheduler
from tests.cluster.fake_slurm import FakeSlurm
from tests.cluster.helpers import report
from tests.conftest import run_cli

DRAINED = "IDLE+DRAIN"


@pytest.fixture
def fake(tmp_path: Path) -> FakeSlurm:
    return FakeSlurm(tmp_path, {"n1": {}, "n2": {}})


def _gate(fake: FakeSlurm, tmp_path: Path, *, fail: bool = False,
          extra: Sequence[str] = ()) -> tuple[int, dict[str, object], str]:
    """``nodegate gate --node n1`` on a fresh quick report (FAIL with ``fail``)."""
    reports = tmp_path / "reports"
    reports.mkdir(exist_ok=True)
    faults = ("xid@gpu2",) if fail else ()
    report("n1", level="quick", age=dt.timedelta(seconds=30), faults=faults).write(
        reports / "quick-latest.json")
    result = run_cli("gate", "--node", "n1", "--report-dir", str(reports), "--retries", "2",
                     "--json", *extra, env=fake.env(tmp_path / "holds"))
    out = json.loads(result.stdout) if result.stdout.strip().startswith("{") else {}
    return result.returncode, out, result.stderr


# --- 1. ownership is a record, not a prefix ---------------------------------------------------


@pytest.mark.parametrize("reason", ["nodegate:bad psu",
                                    "nodegate: vendor hold, DO NOT RESUME (alice)",
                                    "nodegate: xid_events[gpu2]"])
def test_a_persons_drain_in_nodegates_words_survives_a_quick_pass(
        fake: FakeSlurm, tmp_path: Path, reason: str) -> None:
    """Fails on main: a quick PASS lifted any reason starting ``nodegate:``."""
    fake.set("n1", state=DRAINED, reason=reason)
    code, decision, err = _gate(fake, tmp_path)
    assert code == 0, err
    assert decision["action"] == "none" and "person" in str(decision["why"])
    assert fake.node("n1")["reason"] == reason and fake.node("n1")["state"] == DRAINED
    assert fake.updates() == []


def test_the_gates_own_drain_is_lifted_and_a_redrain_by_a_person_is_not(
        fake: FakeSlurm, tmp_path: Path) -> None:
    code, decision, err = _gate(fake, tmp_path, fail=True)
    assert code == 0 and decision["action"] == "drain", err
    ours = fake.node("n1")["reason"]
    assert ours.startswith("nodegate: xid_events[")
    record = HoldStore(tmp_path / "holds").get("n1")
    assert record is not None and record.reason == ours and record.kind is Kind.HEALTH
    assert record.slurm_time is not None and record.evidence
    code, decision, err = _gate(fake, tmp_path)
    assert code == 0 and decision["action"] == "resume", err
    assert fake.node("n1")["state"] == "IDLE"
    assert HoldStore(tmp_path / "holds").get("n1") is None  # lifted: forgotten
    # drained again by nodegate, then a person resumes and re-drains with the very same
    # words: the reason time differs, so that drain is the person's
    _gate(fake, tmp_path, fail=True)
    fake.set("n1", state=DRAINED, reason=ours, time="2026-12-05T09:30:00")
    code, decision, err = _gate(fake, tmp_path)
    assert code == 0 and decision["action"] == "none", (decision, err)
    assert fake.node("n1")["state"] == DRAINED


def test_the_budget_mark_goes_beside_a_persons_comment_and_only_ours_is_cleared(
        fake: FakeSlurm, tmp_path: Path) -> None:
    """Fails on main: the mark replaced ``ticket INC-42`` and a later PASS cleared it."""
    ticket = "ticket INC-42 (bob): PSU swap scheduled"
    fake.set("n2", state=DRAINED, reason="nodegate: nvlink_state[gpu0.link1]")
    fake.set("n1", comment=ticket)
    code, decision, err = _gate(fake, tmp_path, fail=True, extra=("--drain-budget", "0.5"))
    assert code == 0 and decision["action"] == "mark", (decision, err)
    comment = fake.node("n1")["comment"]
    assert comment.startswith(ticket + " | nodegate: over drain budget: "), comment
    assert fake.node("n1")["state"] == "IDLE"
    code, decision, err = _gate(fake, tmp_path, extra=("--drain-budget", "0.5"))
    assert code == 0, err
    assert fake.node("n1")["comment"] == ticket


def test_a_mark_nodegate_did_not_write_is_never_cleared(fake: FakeSlurm,
                                                        tmp_path: Path) -> None:
    """Fails on main: any comment starting with the mark's words was cleared on a PASS."""
    theirs = "nodegate: over drain budget: keep this, alice"
    fake.set("n1", comment=theirs)
    code, _, err = _gate(fake, tmp_path)
    assert code == 0, err
    assert fake.node("n1")["comment"] == theirs and fake.updates() == []


# --- 3. compare-and-set against a Slurm that changes under the gate ---------------------------


def test_a_person_draining_between_read_and_resume_keeps_the_drain(
        fake: FakeSlurm, tmp_path: Path) -> None:
    """Fails on main: the gate's resume lifted the administrator's fresh drain."""
    _gate(fake, tmp_path, fail=True)  # our drain, recorded
    fake.update(calls=[], shows=0, race={"after_show": 1, "sleep_s": 0.5, "person": {
        "node": "n1", "state": DRAINED, "reason": "bad fan (carol)"}})
    code, _, err = _gate(fake, tmp_path)
    assert code == 3, err
    assert "changed since the decision's read" in err and "Traceback" not in err
    assert fake.node("n1")["reason"] == "bad fan (carol)"
    assert fake.updates() == []


def test_a_person_draining_between_read_and_drain_keeps_the_reason(
        fake: FakeSlurm, tmp_path: Path) -> None:
    """Fails on main: the gate's drain overwrote the administrator's reason."""
    fake.update(race={"after_show": 1, "sleep_s": 0.5, "person": {
        "node": "n1", "state": DRAINED, "reason": "bad fan (carol)"}})
    code, _, err = _gate(fake, tmp_path, fail=True)
    assert code == 3, err
    assert fake.node("n1")["reason"] == "bad fan (carol)" and fake.updates() == []


class Tied:
    """scontrol/sinfo for a partition of two nodes whose clock never moves (every drain in
    the same second), where each gate's reads meet at a barrier: both read before either
    drains, and both check after both drained."""

    def __init__(self) -> None:
        self.nodes = {n: {"state": "IDLE", "reason": ""} for n in ("ng1", "ng2")}
        self.lock = threading.Lock()
        self.before = threading.Barrier(2, timeout=10)
        self.after = threading.Barrier(2, timeout=10)
        self.sinfos: dict[str, int] = {}

    def __call__(self, argv: Sequence[str], env: Mapping[str, str],
                 timeout: float) -> subprocess.CompletedProcess[str]:
        me = threading.current_thread().name
        tool = argv[0].rsplit("/", 1)[-1]
        if tool == "sinfo":
            seen = self.sinfos[me] = self.sinfos.get(me, 0) + 1
            if seen <= 2:
                (self.before if seen == 1 else self.after).wait()
        with self.lock:
            if tool == "sinfo":
                out = "".join(f"{n}|{v['state'].lower()}|2026-12-05T07:00:00|"
                              f"{v['reason'] or 'none'}\n" for n, v in self.nodes.items())
            elif argv[1] == "show":
                v = self.nodes[argv[4]]
                reason = f" Reason={v['reason']} [root@2026-12-05T07:00:00]" if v["reason"] \
                    else ""
                out = (f"NodeName={argv[4]} State={v['state']} Partitions=pair  "
                       f"BootTime=2026-12-04T13:27:44{reason}\n")
            else:
                fields = dict(item.split("=", 1) for item in argv[2:])
                node = self.nodes[fields["NodeName"]]
                if fields.get("State") == "DRAIN":
                    node.update(state="IDLE+DRAIN", reason=fields["Reason"])
                elif fields.get("State") == "RESUME":
                    node.update(state="IDLE", reason="")
                out = ""
        return subprocess.CompletedProcess(argv, 0, out, "")


def test_two_gates_in_the_same_second_under_a_budget_of_one_drain_exactly_one(
        tmp_path: Path) -> None:
    """Fails on main: both stepped back (docs/gate.md promised one drains)."""
    fake = Tied()
    results = {}

    def gate(node: str) -> None:
        slurm = SlurmScheduler(runner=fake, controller="ctl:6817")
        results[node] = drain_within_budget(node, "nodegate: xid_events[node]", slurm,
                                            DrainBudget(0.5),
                                            store=HoldStore(tmp_path / node))

    threads = [threading.Thread(target=gate, args=(n,), name=n) for n in ("ng1", "ng2")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    drained = sorted(n for n, v in fake.nodes.items() if v["state"] == "IDLE+DRAIN")
    assert drained == ["ng1"], (fake.nodes, results)
    assert results["ng2"].exceeded and not results["ng1"].exceeded


# --- 4. every answer names the node asked for -------------------------------------------------


def test_an_answer_about_another_node_is_could_not_ask(fake: FakeSlurm,
                                                       tmp_path: Path) -> None:
    """Fails on main: n2's answer made the gate drain the healthy n2."""
    fake.update(lie={"answer_for": "n2"})
    code, _, err = _gate(fake, tmp_path, fail=True)
    assert code == 3, err
    assert "could not ask" in err and "not n1" in err and "Traceback" not in err
    assert fake.updates() == []
    shows = [c for c in fake.read()["calls"] if c[:2] == ["scontrol", "show"]]
    assert len(shows) == 2  # retried within --retries 2


@pytest.mark.parametrize("lie", [{"empty": True}, {"garbled": True}])
def test_an_empty_or_garbled_answer_is_could_not_ask_not_bad_input(
        fake: FakeSlurm, tmp_path: Path, lie: dict[str, bool]) -> None:
    """Fails on main for the empty answer: exit 2, "bad input"."""
    fake.update(lie=lie)
    code, _, err = _gate(fake, tmp_path, fail=True)
    assert code == 3, err
    assert "could not ask" in err and fake.updates() == []


def test_an_empty_partition_answer_drains_nothing_and_is_exit_3(fake: FakeSlurm,
                                                                tmp_path: Path) -> None:
    """Fails on main: exit 2 ("no nodes ... unknown partition?")."""
    fake.update(lie={"empty_sinfo": True})
    code, _, err = _gate(fake, tmp_path, fail=True, extra=("--drain-budget", "0.5"))
    assert code == 3, err
    assert "could not ask" in err and fake.updates() == []


def test_a_node_address_from_another_nodes_answer_is_could_not_ask() -> None:
    from nodegate.errors import CannotRunError

    def runner(argv: Sequence[str], env: Mapping[str, str],
               timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 0, "NodeName=n2 NodeAddr=10.0.0.2 State=IDLE\n",
                                           "")

    slurm = SlurmScheduler(runner=runner, controller="ctl:6817", sleep=lambda _: None)
    with pytest.raises(CannotRunError, match="not n1"):
        slurm.node_address("n1")


def test_the_adapter_retries_a_wrong_answer_then_takes_the_right_one() -> None:
    answers = iter(["NodeName=n2 State=IDLE Partitions=gpu\n", "",
                    "NodeName=n1 State=IDLE Partitions=gpu\n"])

    def runner(argv: Sequence[str], env: Mapping[str, str],
               timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 0, next(answers), "")

    slurm = SlurmScheduler(runner=runner, controller="ctl:6817", sleep=lambda _: None,
                           retry=RetryPolicy(attempts=3))
    assert slurm.state("n1").node == "n1"


# --- 2. holds ranked: the one function ----------------------------------------------------------


def _hold(kind: Kind, suite: str | None = None, reason: str = "nodegate: x", *,
          made: dt.datetime | None = None) -> Hold:
    record = Record("n1", reason, kind, suite=suite, made_at=made)
    return holds.classify(NodeState("n1", "idle", frozenset({"DRAIN"}), reason), record)


QUICK = Evidence(level="quick")
STANDARD = Evidence(level="standard", finished_at=dt.datetime.now(dt.timezone.utc))
ACCEPTANCE = Evidence(level="acceptance")


@pytest.mark.parametrize(("hold", "evidence", "lifts"), [
    (_hold(Kind.HEALTH), QUICK, True),
    (_hold(Kind.STANDARD), QUICK, False),
    (_hold(Kind.STANDARD), STANDARD, True),
    (_hold(Kind.ACCEPTANCE), STANDARD, False),
    (_hold(Kind.ACCEPTANCE), ACCEPTANCE, True),
    (_hold(Kind.SUITE, "cluster-check"), ACCEPTANCE, False),
    (_hold(Kind.SUITE, "cluster-check"), Evidence(suite="multinode"), False),
    (_hold(Kind.SUITE, "cluster-check"), Evidence(suite="cluster-check"), True),
    (_hold(Kind.RMA, reason="nodegate: standard re-qualification after reset_gpu gpu0"),
     ACCEPTANCE, False),
    (_hold(Kind.MAINTENANCE, made=dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=1)),
     QUICK, False),
    (_hold(Kind.MAINTENANCE, made=dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=1)),
     STANDARD, True),
    (_hold(Kind.MAINTENANCE, made=dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)),
     STANDARD, False),  # a report older than the hold does not re-qualify the change
])
def test_evidence_of_a_lower_kind_never_lifts_a_higher_hold(hold: Hold, evidence: Evidence,
                                                            lifts: bool) -> None:
    assert holds.decide(hold, evidence).allowed is lifts


def test_an_unrecorded_hold_is_a_persons_and_nothing_lifts_or_replaces_it() -> None:
    state = NodeState("n1", "idle", frozenset({"DRAIN"}), "nodegate: RMA gpu0 serial 1")
    hold = holds.classify(state, None)
    assert hold.kind is Kind.PERSON and hold.rank == 4
    assert not holds.decide(hold, ACCEPTANCE).allowed
    assert not holds.may_replace(hold, Kind.ACCEPTANCE).allowed


@pytest.mark.parametrize(("held", "new", "allowed"), [
    (_hold(Kind.HEALTH), Kind.STANDARD, True),
    (_hold(Kind.STANDARD), Kind.STANDARD, True),
    (_hold(Kind.STANDARD), Kind.HEALTH, False),
    (_hold(Kind.SUITE, "cluster-check"), Kind.STANDARD, False),
    (_hold(Kind.ACCEPTANCE), Kind.STANDARD, False),
    (_hold(Kind.MAINTENANCE), Kind.STANDARD, False),
    (_hold(Kind.RMA), Kind.RMA, False),
    (_hold(Kind.STANDARD), Kind.RMA, True),
])
def test_a_drain_never_rewrites_a_hold_of_its_rank_or_higher(held: Hold, new: Kind,
                                                             allowed: bool) -> None:
    assert holds.may_replace(held, new).allowed is allowed


def test_an_unreadable_record_is_bad_input_naming_it(tmp_path: Path) -> None:
    (tmp_path / "holds.json").write_text("{not json")
    with pytest.raises(holds.StoreError, match="not a valid holds record"):
        HoldStore(tmp_path).check()
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(holds.StoreError, match="not a folder"):
        HoldStore(blocker).check()


# --- the maintenance hold (deploy/drain.py) and the deploy's own holds -------------------------


def test_a_maintenance_hold_outlives_a_quick_pass_and_lifts_on_a_newer_standard_pass(
        fake: FakeSlurm, tmp_path: Path) -> None:
    """Fails on main: there was no recorded maintenance hold, and a quick PASS lifted
    ``nodegate: maintenance ...``."""
    env = fake.env(tmp_path / "holds")
    done = run_cli("hold", "--node", "n1", "--maintenance", "psu swap", "--json", env=env)
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["kind"] == "maintenance" and shown["ours"] and shown["changed"]
    assert fake.node("n1")["reason"] == "nodegate: maintenance psu swap"
    code, decision, err = _gate(fake, tmp_path)  # a quick PASS
    assert code == 0 and decision["action"] == "none", (decision, err)
    assert fake.node("n1")["state"] == DRAINED
    # a standard PASS that finished before the hold was made re-qualified nothing
    reports = tmp_path / "reports"
    report("n1", level="standard", age=dt.timedelta(seconds=20)).write(
        reports / "standard-latest.json")
    code, decision, err = _gate(fake, tmp_path)
    assert code == 0 and fake.node("n1")["state"] == DRAINED, (decision, err)
    # the hold was made an hour ago: the same standard PASS is newer, and lifts it
    store = HoldStore(tmp_path / "holds")
    record = store.get("n1")
    assert record is not None and record.made_at is not None
    store.put(dataclasses.replace(record, made_at=record.made_at - dt.timedelta(hours=1),
                                  boot_id=None))
    code, decision, err = _gate(fake, tmp_path)
    assert code == 0 and decision["action"] == "resume", (decision, err)
    assert fake.node("n1")["state"] == "IDLE"


def test_hold_keeps_a_persons_drain_and_says_whose_it_is(fake: FakeSlurm,
                                                        tmp_path: Path) -> None:
    fake.set("n1", state=DRAINED, reason="nodegate: bad psu")
    done = run_cli("hold", "--node", "n1", "--maintenance", "psu swap", "--json",
                   env=fake.env(tmp_path / "holds"))
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["kind"] == "person" and not shown["ours"] and not shown["changed"]
    assert fake.node("n1")["reason"] == "nodegate: bad psu" and fake.updates() == []


def test_the_deploys_own_holds_are_known_by_the_deploys_record(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    upgrade = tmp_path / "upgrade.json"
    upgrade.write_text(json.dumps({"from": "570.133.20", "to": "580.65.06"}))
    monkeypatch.setenv("NODEGATE_UPGRADE_RECORD", str(upgrade))
    out = NodeState("n1", "idle", frozenset({"DRAIN"}), "nodegate: upgrade 570.133.20 -> "
                    "580.65.06")
    record = holds.deploy_record(out, join=False)
    assert record is not None and record.kind is Kind.UPGRADE
    held = holds.classify(out, record)
    assert not holds.decide(held, STANDARD).allowed  # the periodic health never lifts it
    assert holds.decide(held, dataclasses.replace(QUICK, join=True)).allowed  # a quick join
    other = dataclasses.replace(out, reason="nodegate: upgrade 570.133.20 -> 999")
    assert holds.deploy_record(other, join=False) is None  # not the recorded upgrade
    new = NodeState("n1", "idle", frozenset({"DRAIN"}), holds.INITIAL_REASON)
    assert holds.deploy_record(new, join=False) is None  # health never adopts it
    initial = holds.deploy_record(new, join=True)
    assert initial is not None and initial.kind is Kind.INITIAL
    assert not holds.decide(holds.classify(new, initial), ACCEPTANCE).allowed
    assert holds.decide(holds.classify(new, initial), dataclasses.replace(QUICK, join=True)
                        ).allowed


def test_a_joins_failure_replaces_the_holds_that_wait_for_it_and_health_does_not() -> None:
    new = holds.classify(NodeState("n1", "idle", frozenset({"DRAIN"}), holds.INITIAL_REASON),
                         Record("n1", holds.INITIAL_REASON, Kind.INITIAL))
    assert holds.may_replace(new, Kind.HEALTH, join=True).allowed
    assert not holds.may_replace(new, Kind.HEALTH).allowed
    acceptance = _hold(Kind.ACCEPTANCE)
    assert not holds.may_replace(acceptance, Kind.STANDARD, join=True).allowed


def test_a_join_lifts_a_recorded_suite_hold_on_that_suites_pass_only() -> None:
    from nodegate.cluster.gate import Action, JoinPolicy, decide_join, owned

    reason = "nodegate: multinode failed all_reduce_busbw[node]"
    state = NodeState("n1", "idle", frozenset({"DRAIN"}), reason)
    battery = report("n1", level="standard")
    suite = dataclasses.replace(report("n1", level="standard"),
                                labels={**battery.labels, "suite": "multinode"})
    policy = JoinPolicy(require=("multinode",))
    decision = decide_join(state, [battery, suite], policy=policy)
    assert decision.action is Action.RESUME, decision
    ours = holds.classify(state, Record("n1", reason, Kind.SUITE, suite="multinode"))
    assert owned(decision, ours, [battery, suite], join=True).action is Action.RESUME
    theirs = holds.classify(state, None)
    kept = owned(decision, theirs, [battery, suite], join=True)
    assert kept.action is Action.NONE and "person" in kept.why


def test_an_empty_partition_is_could_not_ask_unless_slurm_says_it_does_not_exist() -> None:
    """An empty ``sinfo -p`` is never room to drain: exit 3 after the retries; bad input
    (exit 2) only where ``scontrol show partition`` says there is no such partition."""
    from nodegate.errors import CannotRunError, ConfigError

    def runner_for(known: bool):  # type: ignore[no-untyped-def]
        def runner(argv: Sequence[str], env: Mapping[str, str],
                   timeout: float) -> subprocess.CompletedProcess[str]:
            if argv[0].endswith("sinfo"):
                return subprocess.CompletedProcess(argv, 0, "", "")
            if known:
                return subprocess.CompletedProcess(argv, 0, "PartitionName=gpu Nodes=n1\n", "")
            return subprocess.CompletedProcess(argv, 1, "", "Partition nosuch not found\n")
        return runner

    with pytest.raises(ConfigError, match="'nosuch' is not known") as bad:
        SlurmScheduler(runner=runner_for(False), controller="c:6817",
                       sleep=lambda _: None).partition_nodes("nosuch")
    assert bad.value.exit_code == 2
    with pytest.raises(CannotRunError, match="could not ask") as empty:
        SlurmScheduler(runner=runner_for(True), controller="c:6817",
                       sleep=lambda _: None).partition_nodes("gpu")
    assert empty.value.exit_code == 3


def test_a_person_draining_between_read_and_a_budgeted_drain_keeps_the_reason(
        fake: FakeSlurm, tmp_path: Path) -> None:
    """The same race through the drain budget (the lab's gate runs with one)."""
    fake.update(race={"after_show": 1, "sleep_s": 0.5, "person": {
        "node": "n1", "state": DRAINED, "reason": "bad fan (carol)"}})
    code, _, err = _gate(fake, tmp_path, fail=True, extra=("--drain-budget", "0.5"))
    assert code == 3, err
    assert fake.node("n1")["reason"] == "bad fan (carol)" and fake.updates() == []
