"""The gate after a wall-clock step, and beside reports it cannot read.

``nodegate gate`` runs here for real (argument parsing, report loading, policy), with only the
Slurm adapter replaced by a recorder: what is under test is which report the gate believes
and what it does with an unreadable one (docs/gate.md, "Time" and "Unreadable reports").
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path

import pytest

from nodegate import cli
from nodegate.cluster.scheduler import Change, NodeState
from nodegate.report import NodeReport
from tests.cluster.helpers import report

NOW = dt.datetime.now(dt.timezone.utc)
BOOT = "8a1c6f0e-2b5d-4c1a-9f3e-0d6b7a5c4e21"
XID = ("xid@gpu2",)


class Recorder:
    """The Slurm adapter's place: every node idle (or as ``STATES`` says); drains and
    resumes are recorded, never sent."""

    STATES: dict[str, NodeState] = {}
    DONE: list[tuple[str, str, str | None]] = []

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def state(self, node: str) -> NodeState:
        return self.STATES.get(node, NodeState(node, "idle"))

    def drain(self, node: str, reason: str, *, expect: NodeState | None = None) -> Change:
        self.DONE.append(("drain", node, reason))
        before = self.state(node)
        after = NodeState(node, "idle", frozenset({"DRAIN"}), reason)
        return Change(node, "drain", True, before, after)

    def resume(self, node: str, *, expect: NodeState | None = None) -> Change:
        self.DONE.append(("resume", node, None))
        before = self.state(node)
        return Change(node, "resume", True, before, NodeState(node, "idle"))


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
         capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]
    """``gate(*argv)`` -> (exit code, the decision's JSON, stderr), against the recorder."""
    from nodegate.cluster import slurm

    monkeypatch.setattr(slurm, "SlurmScheduler", Recorder)
    boot_file = tmp_path / "boot_id"
    boot_file.write_text(BOOT + "\n")
    monkeypatch.setenv("NODEGATE_BOOT_ID_FILE", str(boot_file))
    Recorder.STATES = {}
    Recorder.DONE = []

    def run(*argv: str) -> tuple[int, dict[str, object], str]:
        code = cli.main(["gate", "--json", "--node", "n1", *argv])
        out = capsys.readouterr()
        return code, json.loads(out.out) if out.out.strip() else {}, out.err
    return run


def _at(base: NodeReport, finished: dt.datetime, **fields: object) -> NodeReport:
    """``base`` moved to finish at ``finished`` (its duration kept)."""
    span = base.finished_at - base.started_at
    return dataclasses.replace(base, started_at=finished - span, finished_at=finished,
                               **fields)  # type: ignore[arg-type]


def _dir(tmp_path: Path, *reports: tuple[str, NodeReport]) -> Path:
    folder = tmp_path / "reports"
    folder.mkdir(exist_ok=True)
    for name, item in reports:
        item.write(folder / name)
    return folder


def test_a_future_dated_passing_sibling_does_not_hide_a_fail(gate, tmp_path: Path) -> None:
    """Fails before this change: the standard PASS dated five years ahead was "latest", in
    the future, so the gate changed nothing and the ECC DBE stayed in service."""
    fail = _at(report("n1", level="quick", faults=XID), NOW - dt.timedelta(minutes=2))
    ahead = _at(report("n1", level="standard"), NOW + dt.timedelta(days=5 * 365))
    folder = _dir(tmp_path, ("quick-latest.json", fail), ("standard-latest.json", ahead))
    code, decision, _ = gate("--report-dir", str(folder))
    assert code == 0
    assert code == 0 and decision["action"] == "drain", decision
    assert "xid_events" in str(decision["reason"]), decision
    assert Recorder.DONE and Recorder.DONE[0][0] == "drain"


def test_a_fail_dated_before_its_boot_still_drains(gate, tmp_path: Path) -> None:
    """Fails before this change: the node's RTC was reset to 2000 before NTP ran, so the
    FAIL of this boot read as 26 years old ("stale") and decided nothing."""
    fail = _at(report("n1", level="quick", faults=XID),
               dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc), boot_id=BOOT)
    folder = _dir(tmp_path, ("quick-latest.json", fail))
    code, decision, _ = gate("--report-dir", str(folder))
    assert (code, decision["action"]) == (0, "drain"), decision


def test_sequence_decides_latest_over_the_wall_clock(gate, tmp_path: Path) -> None:
    """The report numbered later is the latest, whatever its date says: today's FAIL (9)
    over an older PASS (8) whose clock ran a year ahead."""
    fail = _at(report("n1", level="quick", faults=XID), NOW - dt.timedelta(minutes=1),
               sequence=9)
    ahead = _at(report("n1", level="standard"), NOW + dt.timedelta(days=365), sequence=8)
    folder = _dir(tmp_path, ("quick-latest.json", fail), ("standard-latest.json", ahead))
    code, decision, _ = gate("--report-dir", str(folder))
    assert code == 0 and decision["action"] == "drain", decision


def test_a_suspect_pass_lifts_nothing(gate, tmp_path: Path) -> None:
    """A PASS dated in the future decides nothing: its time cannot be believed."""
    Recorder.STATES = {"n1": NodeState("n1", "idle", frozenset({"DRAIN"}),
                                       "nodegate: ecc_dbe_volatile[gpu2]")}
    ahead = _at(report("n1", level="quick"), NOW + dt.timedelta(days=30))
    folder = _dir(tmp_path, ("quick-latest.json", ahead))
    code, decision, _ = gate("--report-dir", str(folder))
    assert code == 0 and decision["action"] == "none", decision
    assert "suspect" in str(decision["why"])
    assert Recorder.DONE == []


def test_a_report_of_this_boot_is_aged_by_the_boot_clock() -> None:
    """Within one boot CLOCK_BOOTTIME ages a report, whatever its wall date says: one
    written a minute ago is fresh though dated 90 minutes back (the clock was stepped
    forward since); one written three hours ago is stale though dated a minute back."""
    from nodegate.cluster.gate import freshness
    from nodegate.report.order import Clock

    clock = Clock(NOW, BOOT, 5 * 3600.0)
    base = report("n1", level="quick")
    recent = _at(base, NOW - dt.timedelta(minutes=90), boot_id=BOOT,
                 boottime_s=5 * 3600.0 - 60)
    assert freshness(recent, clock, 3600.0, 300.0) == (None, False)
    old = _at(base, NOW - dt.timedelta(minutes=1), boot_id=BOOT, boottime_s=3600.0)
    problem, suspicious = freshness(old, clock, 3600.0, 300.0)
    assert problem is not None and "older than 1h" in problem and not suspicious
    other_boot = _at(base, NOW - dt.timedelta(minutes=1), boot_id="another",
                     boottime_s=3600.0)
    assert freshness(other_boot, clock, 3600.0, 300.0) == (None, False)


# --- unreadable siblings --------------------------------------------------------------------


def test_an_unreadable_sibling_does_not_block_the_drain(gate, tmp_path: Path) -> None:
    """Fails before this change: an invalid netload-latest.json beside a FAIL made the gate
    exit 2 and drain nothing."""
    fail = _at(report("n1", level="quick", faults=XID), NOW - dt.timedelta(minutes=1))
    folder = _dir(tmp_path, ("quick-latest.json", fail))
    (folder / "netload-latest.json").write_text('{"schema": "nodegate.report/1"')
    code, decision, err = gate("--report-dir", str(folder))
    assert (code, decision["action"]) == (0, "drain"), (decision, err)
    assert "xid_events" in str(decision["reason"])
    assert "netload-latest.json" in str(decision["why"]) and "netload-latest.json" in err


def test_an_unreadable_battery_report_is_error_evidence(gate, tmp_path: Path) -> None:
    """Beside a passing quick report, an unreadable standard report drains: it may be the
    newest word on the node, and what could not be read never passes."""
    passed = _at(report("n1", level="quick"), NOW - dt.timedelta(minutes=1))
    folder = _dir(tmp_path, ("quick-latest.json", passed))
    (folder / "standard-latest.json").write_text("{}")
    code, decision, err = gate("--report-dir", str(folder))
    assert code == 0 and decision["action"] == "drain", decision
    assert decision["reason"] == "nodegate: report unreadable (standard-latest.json)"
    assert "standard-latest.json" in err


def test_an_unreadable_report_blocks_a_resume(gate, tmp_path: Path) -> None:
    Recorder.STATES = {"n1": NodeState("n1", "idle", frozenset({"DRAIN"}),
                                       "nodegate: ecc_dbe_volatile[gpu2]")}
    passed = _at(report("n1", level="quick"), NOW - dt.timedelta(minutes=1))
    folder = _dir(tmp_path, ("quick-latest.json", passed))
    (folder / "standard-latest.json").write_bytes(b"\xff\xfe")
    code, decision, _ = gate("--report-dir", str(folder))
    assert code == 0 and decision["action"] == "none", decision
    assert "standard-latest.json" in str(decision["why"])
    assert Recorder.DONE == []


def test_an_unreadable_suite_report_is_not_health_evidence(gate, tmp_path: Path) -> None:
    """Periodic health never reads the suites' reports: a broken one is named, not acted on."""
    passed = _at(report("n1", level="quick"), NOW - dt.timedelta(minutes=1))
    folder = _dir(tmp_path, ("quick-latest.json", passed))
    (folder / "netload-latest.json").write_text("[]")
    code, decision, err = gate("--report-dir", str(folder))
    assert code == 0 and decision["action"] == "none", decision
    assert "netload-latest.json" in err


def test_only_unreadable_reports_change_nothing(gate, tmp_path: Path) -> None:
    """Nothing readable: nothing was judged, so nothing is changed (exit 2 naming the file
    and why), as before; ERROR evidence needs a readable report beside it to act on."""
    folder = tmp_path / "reports"
    folder.mkdir()
    (folder / "quick-latest.json").write_text('{"schema": "nodegate.report/1", "x": NaN}')
    code, decision, err = gate("--report-dir", str(folder))
    assert (code, decision) == (2, {}), err
    assert "quick-latest.json" in err and "NaN" in err
    assert Recorder.DONE == []


def test_a_join_with_an_unreadable_required_suite_holds(gate, tmp_path: Path) -> None:
    passed = report("n1", level="standard")
    folder = _dir(tmp_path, ("standard-latest.json", passed))
    (folder / "multinode-latest.json").write_text("{}")
    monkey_profile = ["--profile", "sim-h100-hgx"]
    code, decision, _ = gate("--mode", "join", "--require", "multinode",
                             "--report-dir", str(folder), *monkey_profile)
    assert code == 0 and decision["action"] == "drain", decision
    assert str(decision["reason"]).startswith("nodegate: ")
    assert "multinode" in str(decision["reason"]) or "multinode" in str(decision["why"])
