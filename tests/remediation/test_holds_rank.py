"""Remediation acts only on holds of its own rank or below, by the record, and only on what
the evidence names."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from nodegate.cluster.holds import HoldStore, Kind, Record
from nodegate.errors import ConfigError, ExitCode
from nodegate.remediation.engine import step
from nodegate.remediation.escalation import Policy
from nodegate.remediation.state import ActionRecord, NodeRemediation, Phase, StateStore
from tests.conftest import run_cli
from tests.remediation.helpers import (
    NODE,
    NOW,
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


@pytest.mark.parametrize("reason", [
    "nodegate: cluster-check: failed with n2, n4; passed with none",
    "nodegate: acceptance failed thermal_peak[gpu3]",
    "nodegate: multinode failed all_reduce_busbw[node]",
])
def test_a_higher_hold_is_never_rewritten_reset_or_resumed(store: StateStore, tmp_path: Path,
                                                           reason: str) -> None:
    """Fails on main: remediation rewrote the hold into its own standard one, reset the GPU
    and resumed the node on a standard pass that never re-ran what failed."""
    scheduler = FakeScheduler(reason=reason)
    recorder = Recorder(board())
    outcome = step(context(store, scheduler, recorder, [RESET], tmp_path))
    assert outcome.step == "foreign" and outcome.code is ExitCode.PASSED, outcome
    assert recorder.done == [] and scheduler.calls == []
    assert scheduler.current.reason == reason


def test_an_rma_hold_stays_one_when_remediation_json_is_gone(store: StateStore,
                                                             tmp_path: Path) -> None:
    """Fails on main: with the state file removed (as its exit-2 message invites) the RMA
    hold was remediated like a fresh health drain."""
    reason = "nodegate: RMA gpu3 serial 1654922001234 (2 remediation(s) within 168 h)"
    scheduler = FakeScheduler(reason=reason)
    recorder = Recorder(board())
    outcome = step(context(store, scheduler, recorder, [RESET], tmp_path))
    assert outcome.phase is Phase.RMA and outcome.code is ExitCode.FAILED, outcome
    assert recorder.done == [] and scheduler.calls == []


def test_a_persons_drain_in_nodegates_words_is_not_remediated(store: StateStore,
                                                             tmp_path: Path) -> None:
    """Fails on main: the ``nodegate:`` prefix made it remediation's."""
    scheduler = FakeScheduler(reason="nodegate: xid_events[gpu3]")
    recorder = Recorder(board())
    outcome = step(context(store, scheduler, recorder, [RESET], tmp_path,
                           holds=HoldStore(tmp_path / "empty-record")))
    assert outcome.step == "foreign" and "not in nodegate's record" in outcome.message
    assert recorder.done == [] and scheduler.calls == []


def test_remediations_own_drains_are_recorded(store: StateStore, tmp_path: Path) -> None:
    holds = HoldStore(tmp_path / "holds")
    scheduler = FakeScheduler()
    holds.put(Record(NODE, "nodegate: xid_events[gpu3]", Kind.HEALTH))
    recorder = Recorder(board(), requalify_result=False)
    step(context(store, scheduler, recorder, [RESET], tmp_path, holds=holds))
    record = holds.get(NODE)
    assert record is not None and record.kind is Kind.STANDARD
    assert record.reason == scheduler.current.reason
    assert record.reason.startswith("nodegate: standard re-qualification after reset_gpu")


def _after_cured_gpu0(store: StateStore, targets: list[str], action: str) -> None:
    done = ActionRecord(action, targets, {t: serial(int(t[3:])) for t in targets
                                          if t[3:].isdigit()},
                        NOW - dt.timedelta(hours=1), "boot-a", outcome="done",
                        finished_at=NOW - dt.timedelta(minutes=50))
    store.save(NodeRemediation(NODE, phase=Phase.DRAINED, history=[done],
                               escalate_from=action))


NODE_LEVEL = make_report(failed("nvme_mount", "node"), failed("nccl_conf", "node"),
                         failed("nvidia_module", "node"))


def test_a_node_level_failure_after_a_cured_gpu_never_sends_the_card_to_rma(
        store: StateStore, tmp_path: Path) -> None:
    """Fails on main: the targets fell back to the last action's gpu0, over its limit of
    one, so gpu0's card went to RMA for an NVMe mount."""
    _after_cured_gpu0(store, ["gpu0"], "reset_gpu")
    scheduler = FakeScheduler(reason="nodegate: standard re-qualification after reset_gpu gpu0")
    recorder = Recorder(board())
    outcome = step(context(store, scheduler, recorder, [NODE_LEVEL], tmp_path))
    assert not any("RMA gpu" in str(reason) for _, reason in scheduler.calls), scheduler.calls
    assert outcome.phase is not Phase.RMA, outcome
    assert recorder.done == [("reboot", ())], recorder.done  # the node-level rung


def test_a_last_action_on_node_with_a_report_naming_none_is_no_traceback(
        store: StateStore, tmp_path: Path) -> None:
    """Fails on main: ``int('e')`` sorting the fallback targets (a traceback)."""
    _after_cured_gpu0(store, ["node"], "reboot_node")
    scheduler = FakeScheduler(reason="nodegate: standard re-qualification after reboot_node "
                                     "node")
    outcome = step(context(store, scheduler, Recorder(board()), [NODE_LEVEL], tmp_path))
    assert outcome.phase is not Phase.RMA or "RMA gpu" not in outcome.message


@pytest.mark.parametrize(("key", "value"), [("window_h", 1e8), ("max_per_gpu", 10**9),
                                            ("window_h", 0)])
def test_every_remediation_number_has_a_maximum(key: str, value: float) -> None:
    """Fails on main: window_h 1e8 passed and ended in an OverflowError."""
    from nodegate.profiles.loader import _validate
    from nodegate.profiles.schema import resolved_schema

    with pytest.raises(ConfigError) as caught:
        Policy.from_profile({"remediation": {"enabled": True, key: value}})
    assert caught.value.key == f"remediation.{key}"
    schema = resolved_schema()
    section = schema["properties"]["remediation"]["properties"][key]
    assert "maximum" in section
    with pytest.raises(ConfigError) as schema_caught:
        _validate({"remediation": {key: value}}, {"type": "object", "properties": {
            "remediation": schema["properties"]["remediation"]}}, file="site.yaml")
    assert "remediation" in str(schema_caught.value.key)


def test_a_state_dir_naming_a_file_is_exit_2(tmp_path: Path) -> None:
    """Fails on main: exit 3 (the lock could not be created)."""
    reports = tmp_path / "reports"
    reports.mkdir()
    RESET.write(reports / "quick-latest.json")
    blocker = tmp_path / "state"
    blocker.write_text("not a folder")
    proc = run_cli("remediate", "--report-dir", str(reports), "--state-dir", str(blocker),
                   "--profile", "sim-h100-hgx", "--node", NODE, "--enable")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert str(blocker) in proc.stderr and "--state-dir" in proc.stderr
    assert "Traceback" not in proc.stderr
