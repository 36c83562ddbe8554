"""``nodegate gate --textfile-dir``: its folder is checked before anything changes in Slurm
(exit 2 then means nothing was changed, as deploy/join.py reads it); a write that still fails
after the change is exit 1, never 2."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from nodegate.cluster import cli as gate_cli
from nodegate.cluster.gate import Action, Decision
from nodegate.cluster.holds import HoldStore, Kind, Record
from nodegate.cluster.scheduler import Change, NodeState
from nodegate.errors import ConfigError
from tests.cluster.helpers import report


class OneResume:
    """A scheduler whose only call is the resume the decision asks for."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def resume(self, node: str, *, expect: NodeState | None = None) -> Change:
        self.calls.append(node)
        return Change(node, "resume", True, NodeState(node, "idle", frozenset({"DRAIN"})),
                      NodeState(node, "idle"))


def _args(textfile_dir: Path) -> argparse.Namespace:
    return argparse.Namespace(drain_budget=0.5, textfile_dir=textfile_dir, mode="health",
                              dry_run=False)


@pytest.mark.parametrize("make", ["file", "fifo-target", "missing-under-file"])
def test_an_unusable_textfile_dir_is_refused_before_any_change(tmp_path: Path,
                                                                make: str) -> None:
    folder = tmp_path / "textfile"
    if make == "file":
        folder.write_text("x")
    elif make == "fifo-target":
        folder.mkdir()
        import os

        os.mkfifo(folder / "nodegate_gate.prom")
    else:
        (tmp_path / "f").write_text("x")
        folder = tmp_path / "f" / "textfile"
    with pytest.raises(ConfigError) as caught:
        gate_cli.check_textfile_dir(folder)
    assert caught.value.key == "--textfile-dir" and str(folder) in str(caught.value)
    assert sorted(p.name for p in tmp_path.rglob("*") if p.name.endswith(".tmp")) == []


def test_a_usable_textfile_dir_passes_and_is_left_alone(tmp_path: Path) -> None:
    gate_cli.check_textfile_dir(tmp_path)
    gate_cli.check_textfile_dir(tmp_path / "new" / "dir")  # created at the write
    assert list(tmp_path.iterdir()) == []


def test_a_write_failing_after_the_change_is_reported_not_bad_input(tmp_path: Path) -> None:
    blocker = tmp_path / "gone"
    blocker.write_text("a file where the folder was")  # after the check, before the write
    scheduler = OneResume()
    passing = report("n1", level="quick")
    decision = Decision("n1", Action.RESUME, "passing report", report_id=passing.report_id)
    held = NodeState("n1", "idle", frozenset({"DRAIN"}), "nodegate: xid_events[node]")
    store = HoldStore(tmp_path / "holds")
    store.put(Record("n1", "nodegate: xid_events[node]", Kind.HEALTH))
    change, _, unwritten = gate_cli._act(_args(blocker), decision, held, [passing],
                                         scheduler, store=store)  # type: ignore[arg-type]
    assert scheduler.calls == ["n1"] and change is not None and change.changed
    assert unwritten is not None and str(blocker / "nodegate_gate.prom") in unwritten


class OneDrain:
    """A scheduler whose only call is the drain the decision asks for."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def drain(self, node: str, reason: str, *, expect: NodeState | None = None) -> Change:
        self.calls.append((node, reason))
        return Change(node, "drain", True, NodeState(node, "idle"),
                      NodeState(node, "idle", frozenset({"DRAIN"}), reason))


def test_the_gate_metrics_are_written_without_a_drain_budget(tmp_path: Path) -> None:
    """nodegate_gate.prom holds the decision and the hold on every health run given
    --textfile-dir, budget or not; the budget's own gauges only with a budget."""
    args = argparse.Namespace(drain_budget=None, textfile_dir=tmp_path, mode="health",
                              dry_run=False)
    decision = Decision("n1", Action.DRAIN, "quick FAIL", reason="nodegate: quick failed x")
    scheduler = OneDrain()
    _, _, unwritten = gate_cli._act(args, decision, NodeState("n1", "idle"), [], scheduler,
                                    store=HoldStore(tmp_path / "holds"))  # type: ignore[arg-type]
    assert unwritten is None and scheduler.calls == [("n1", "nodegate: quick failed x")]
    text = (tmp_path / "nodegate_gate.prom").read_text()
    assert 'nodegate_gate_action{node="n1",action="drain"} 1' in text
    assert 'nodegate_gate_action{node="n1",action="resume"} 0' in text
    assert 'nodegate_gate_node_nodegate_held{node="n1"} 1' in text
    assert 'nodegate_gate_node_drained{node="n1"} 1' in text
    assert "nodegate_gate_last_run_timestamp_seconds" in text
    assert "drain_budget" not in text


def test_a_dry_run_writes_no_gate_metrics(tmp_path: Path) -> None:
    args = argparse.Namespace(drain_budget=None, textfile_dir=tmp_path, mode="health",
                              dry_run=True)
    decision = Decision("n1", Action.DRAIN, "quick FAIL", reason="nodegate: quick failed x")
    gate_cli._act(args, decision, NodeState("n1", "idle"), [], OneDrain(),  # type: ignore[arg-type]
                  store=HoldStore(tmp_path / "holds"))
    assert list(tmp_path.iterdir()) == []
