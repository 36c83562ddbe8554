"""One remediation step at a time, with fake Slurm and fake runners."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from nodegate.errors import ExitCode
from nodegate.remediation.engine import step
from nodegate.remediation.state import ActionRecord, NodeRemediation, Phase, StateStore
from tests.remediation.helpers import (
    NOW,
    PROFILE,
    FakeScheduler,
    Recorder,
    board,
    context,
    failed,
    make_report,
    serial,
    xid_result,
)

RESET = make_report(xid_result("gpu3", 48, "reset_gpu"))


@pytest.mark.parametrize(("state", "flags", "reason"), [
    ("idle", ("DRAIN",), "bad fan, ticket ops-4711"),
    ("down", (), "Not responding"),
    ("idle", ("DRAIN",), None),
    ("idle", ("DRAIN",), "nodegate: upgrade 570.133.20 -> 580.65.06"),
])
def test_an_administrators_drain_is_never_acted_on(store: StateStore, tmp_path: Path,
                                                   state: str, flags: tuple[str, ...],
                                                   reason: str | None) -> None:
    scheduler = FakeScheduler(state, flags, reason)
    recorder = Recorder(board())
    # even with an action in our own state, someone else's drain wins
    store.save(NodeRemediation("gpu-node-01", phase=Phase.DRAINED))
    outcome = step(context(store, scheduler, recorder, [RESET], tmp_path))
    assert outcome.step == "foreign" and outcome.code is ExitCode.PASSED
    assert recorder.done == [] and scheduler.calls == []
    assert store.load("gpu-node-01").phase is Phase.DRAINED


@pytest.mark.parametrize("state", ["mixed", "allocated", "completing", "draining"])
def test_a_node_whose_jobs_still_run_waits(store: StateStore, tmp_path: Path,
                                           state: str) -> None:
    scheduler = FakeScheduler(state, ("DRAIN",))
    recorder = Recorder(board())
    outcome = step(context(store, scheduler, recorder, [RESET], tmp_path))
    assert outcome.phase is Phase.WAITING_FOR_JOBS and recorder.done == []
    assert store.load("gpu-node-01").phase is Phase.WAITING_FOR_JOBS
    scheduler.current = FakeScheduler("idle", ("DRAIN",)).current  # the job ended
    outcome = step(context(store, scheduler, recorder, [RESET], tmp_path))
    assert recorder.done == [("reset", ("GPU-00000003",)), ("requalify", ())]
    # a standard hold before the reset (no quick pass may lift it), lifted by the resume
    assert outcome.step == "resumed" and scheduler.calls == [
        ("drain", "nodegate: standard re-qualification after reset_gpu gpu3"), ("resume", None)]
    assert store.load("gpu-node-01").phase is Phase.IN_SERVICE


def test_a_node_with_gpu_processes_is_never_reset(store: StateStore, tmp_path: Path) -> None:
    recorder = Recorder(board(processes={"gpu3": [], "gpu6": [31337]}))
    outcome = step(context(store, FakeScheduler(), recorder, [RESET], tmp_path))
    assert outcome.step == "blocked" and "31337" in outcome.message
    assert recorder.done == []
    assert not store.load("gpu-node-01").in_flight


def test_remediation_is_off_unless_the_profile_enables_it(store: StateStore,
                                                          tmp_path: Path) -> None:
    recorder = Recorder(board())
    profile = {**PROFILE, "remediation": {"enabled": False}}
    outcome = step(context(store, FakeScheduler(), recorder, [RESET], tmp_path,
                           profile=profile))
    assert outcome.step == "off" and recorder.done == [] and not store.path.exists()


def test_a_dry_run_says_what_it_would_do_and_changes_nothing(store: StateStore,
                                                            tmp_path: Path) -> None:
    scheduler, recorder = FakeScheduler(), Recorder(board())
    outcome = step(context(store, scheduler, recorder, [RESET], tmp_path, dry_run=True))
    assert outcome.step == "dry-run" and "would reset_gpu gpu3" in outcome.message
    assert recorder.done == [] and scheduler.calls == [] and not store.path.exists()


def test_a_killed_reset_is_re_checked_never_repeated(store: StateStore, tmp_path: Path
                                                     ) -> None:
    """The run died after recording the intent: the next run re-qualifies, no second reset."""
    state = NodeRemediation("gpu-node-01", phase=Phase.DRAINED,
                            reason="nodegate: xid_events[gpu3]")
    store.record_intent(state, ActionRecord("reset_gpu", ["gpu3"], {"gpu3": serial(3)},
                                            NOW, "boot-a"), NOW)
    scheduler, recorder = FakeScheduler(), Recorder(board())
    outcome = step(context(store, scheduler, recorder, [RESET], tmp_path))
    assert recorder.actions == [] and recorder.done == [("requalify", ())]
    assert outcome.step == "resumed"
    final = store.load("gpu-node-01")
    assert [a.outcome for a in final.history] == ["unknown"]


def test_a_reboot_is_settled_by_the_new_boot_id(store: StateStore, tmp_path: Path) -> None:
    reboot = make_report(xid_result("gpu2", 119, "reboot_node"))
    scheduler, recorder = FakeScheduler(), Recorder(board())
    outcome = step(context(store, scheduler, recorder, [reboot], tmp_path))
    assert recorder.done == [("reboot", ())] and outcome.phase is Phase.REMEDIATING
    assert store.load("gpu-node-01").in_flight  # intent on disk, outcome to come
    # the same boot again (the reboot never happened, or the timer ran before it): no 2nd
    again = step(context(store, scheduler, Recorder(board()), [reboot], tmp_path))
    assert again.step == "resumed"
    assert [a.outcome for a in store.load("gpu-node-01").history] == ["unknown"]


def test_after_a_reboot_the_next_boot_requalifies(store: StateStore, tmp_path: Path) -> None:
    reboot = make_report(xid_result("gpu2", 119, "reboot_node"))
    scheduler = FakeScheduler()
    step(context(store, scheduler, Recorder(board()), [reboot], tmp_path))
    after = Recorder(board(), boot="boot-b")
    outcome = step(context(store, scheduler, after, [reboot], tmp_path))
    assert after.actions == [] and outcome.step == "resumed"
    assert store.load("gpu-node-01").history[-1].outcome == "done"


def test_a_failed_requalification_escalates_then_ends_in_rma(store: StateStore,
                                                             tmp_path: Path) -> None:
    scheduler = FakeScheduler()
    recorder = Recorder(board(), requalify_result=False)
    profile = {**PROFILE, "remediation": {**PROFILE["remediation"], "max_per_gpu": 3}}
    first = step(context(store, scheduler, recorder, [RESET], tmp_path, profile=profile))
    assert first.code is ExitCode.FAILED and first.phase is Phase.DRAINED
    second = step(context(store, scheduler, recorder, [RESET], tmp_path, profile=profile))
    assert recorder.actions == ["reset", "reboot"] and second.phase is Phase.REMEDIATING


def test_escalation_follows_the_serial_across_an_index_change(store: StateStore,
                                                              tmp_path: Path) -> None:
    """Card 3 was reset as gpu3 yesterday; today it sits in slot gpu5 and fails again."""
    yesterday = NOW - dt.timedelta(days=1)
    store.save(NodeRemediation("gpu-node-01", phase=Phase.IN_SERVICE, history=[
        ActionRecord("reset_gpu", ["gpu3"], {"gpu3": serial(3)}, yesterday, "boot-0",
                     outcome="done", finished_at=yesterday)]))
    moved = (0, 1, 2, 5, 4, 3, 6, 7)  # cards 3 and 5 swapped slots
    today = make_report(xid_result("gpu5", 48, "reset_gpu"), order=moved)
    scheduler, recorder = FakeScheduler(reason="nodegate: xid_events[gpu5]"), Recorder(
        board(moved))
    outcome = step(context(store, scheduler, recorder, [today], tmp_path))
    assert recorder.actions == [] and outcome.phase is Phase.RMA
    reason = f"nodegate: RMA gpu5 serial {serial(3)}"
    assert scheduler.calls[-1][0] == "drain" and str(scheduler.calls[-1][1]).startswith(reason)
    assert outcome.bundle is not None and outcome.bundle.is_file()
    # the card now in gpu3 (serial 5) has no history: it would be reset, not sent back
    other = make_report(xid_result("gpu3", 48, "reset_gpu"), order=moved)
    store2 = StateStore(tmp_path / "other")
    store2.save(NodeRemediation("gpu-node-01", history=store.load("gpu-node-01").history))
    result = step(context(store2, FakeScheduler(), Recorder(board(moved)), [other], tmp_path,
                          dry_run=True))
    assert "would reset_gpu gpu3" in result.message


def test_a_remap_failure_goes_straight_to_rma_and_stays(store: StateStore,
                                                        tmp_path: Path) -> None:
    scheduler, recorder = FakeScheduler(), Recorder(board())
    report = make_report(failed("remap_failure", "gpu4"))
    outcome = step(context(store, scheduler, recorder, [report], tmp_path))
    assert outcome.phase is Phase.RMA and recorder.done == []
    assert scheduler.current.reason is not None
    assert scheduler.current.reason.startswith(f"nodegate: RMA gpu4 serial {serial(4)}")
    again = step(context(store, scheduler, recorder, [report], tmp_path))
    assert again.phase is Phase.RMA and again.code is ExitCode.FAILED and recorder.done == []


def test_a_failed_action_is_recorded_never_left_in_flight(store: StateStore,
                                                         tmp_path: Path) -> None:
    recorder = Recorder(board(), fail_with=RuntimeError("nvidia-smi -r exited 3"))
    outcome = step(context(store, FakeScheduler(), recorder, [RESET], tmp_path))
    assert outcome.code is ExitCode.FAILED and "exited 3" in outcome.message
    state = store.load("gpu-node-01")
    assert not state.in_flight and state.history[-1].outcome == "failed"
    assert state.escalate_from == "reset_gpu"


def test_no_requalification_load_while_jobs_run(store: StateStore, tmp_path: Path) -> None:
    """A node re-qualifying that Slurm gave a job meanwhile: wait, run nothing."""
    state = NodeRemediation("gpu-node-01", phase=Phase.DRAINED)
    store.record_intent(state, ActionRecord("reset_gpu", ["gpu3"], {"gpu3": serial(3)},
                                            NOW, "boot-a"), NOW)
    store.record_outcome(state, "done", NOW)
    recorder = Recorder(board())
    outcome = step(context(store, FakeScheduler("mixed", ("DRAIN",)), recorder, [RESET],
                           tmp_path))
    assert outcome.step == "wait" and outcome.phase is Phase.REQUALIFYING
    assert recorder.done == []


def test_an_administrators_drain_during_requalification_is_not_resumed(
        store: StateStore, tmp_path: Path) -> None:
    scheduler = FakeScheduler()
    recorder = Recorder(board())
    runners = recorder.runners()

    def requalify_while_an_admin_drains() -> bool:
        scheduler.current = FakeScheduler(reason="hands off: DIMM swap").current
        return True

    runners.requalify = requalify_while_an_admin_drains
    ctx = context(store, scheduler, recorder, [RESET], tmp_path)
    ctx.runners = runners
    outcome = step(ctx)
    assert outcome.step == "foreign" and ("resume", None) not in scheduler.calls
    assert scheduler.current.reason == "hands off: DIMM swap"
    assert store.load("gpu-node-01").phase is Phase.DRAINED


def test_a_gpu_off_the_bus_without_a_bmc_runner_asks_a_person(store: StateStore,
                                                               tmp_path: Path) -> None:
    recorder = Recorder(board())
    runners = recorder.runners()
    runners.power_cycle = None
    ctx = context(store, FakeScheduler(), recorder,
                  [make_report(failed("gpu_reachable", "gpu6", "lost"))], tmp_path)
    ctx.runners = runners
    outcome = step(ctx)
    assert outcome.step == "blocked" and outcome.code is ExitCode.FAILED
    assert "by hand" in outcome.message and recorder.done == []
    assert not store.load("gpu-node-01").in_flight


def test_a_failed_reset_climbs_to_a_reboot_not_to_rma(store: StateStore,
                                                      tmp_path: Path) -> None:
    """A reset that could not run remediated nothing: it does not count against the card."""
    scheduler = FakeScheduler()
    failing = Recorder(board(), fail_with=RuntimeError("nvidia-smi -r exited 3"))
    step(context(store, scheduler, failing, [RESET], tmp_path))
    recorder = Recorder(board())
    outcome = step(context(store, scheduler, recorder, [RESET], tmp_path))
    assert recorder.done == [("reboot", ())] and outcome.phase is Phase.REMEDIATING


def test_the_hold_before_an_action_is_lifted_by_a_standard_pass_only() -> None:
    """After a reset or a boot the symptom may be gone: the cron gate's quick pass keeps the
    node drained; the standard re-qualification's pass is what resumes it."""
    import datetime as dt

    from nodegate.cluster.gate import Action, decide_health
    from nodegate.cluster.reasons import hold_level
    from nodegate.cluster.scheduler import NodeState
    from nodegate.remediation.engine import requalify_reason
    from nodegate.vocabulary import Level
    from tests.cluster.helpers import report

    reason = requalify_reason("power_cycle", ["gpu3"])
    assert reason == "nodegate: standard re-qualification after power_cycle gpu3"
    assert hold_level(reason) is Level.STANDARD
    held = NodeState("n1", "idle", frozenset({"DRAIN"}), reason)
    recent = dt.timedelta(minutes=1)
    quick = decide_health(held, report("n1", level="quick", age=recent))
    assert quick.action is Action.NONE and "standard" in quick.why
    assert decide_health(held, report("n1", level="standard", age=recent)).action \
        is Action.RESUME
