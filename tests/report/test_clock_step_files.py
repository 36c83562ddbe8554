"""Pruning and history after a wall-clock step: older files carry names (and dates) from the
future; the node's own order (sequence, then boot time) decides, never file names."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from nodegate.report import outputs
from nodegate.report.history import recent_reports
from nodegate.report.model import load
from nodegate.results import Verdict
from tests.report.test_sequence import FUTURE, TODAY, _report, _write


def test_pruning_keeps_the_report_just_written_among_future_names(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fails before this change: three older reports named (and dated) 2099 sorted after
    today's by name, so pruning to two deleted the report just written."""
    monkeypatch.setattr(outputs, "KEEP_REPORTS", 2)
    monkeypatch.setattr(outputs, "PRUNE_SLACK", 0, raising=False)
    for hour in range(3):
        _write(_report(FUTURE + dt.timedelta(hours=hour)), tmp_path)
    files = _write(_report(TODAY), tmp_path)
    assert files.json.is_file()
    kept = sorted(p.name for p in tmp_path.glob("quick-*.json")
                  if p.name != "quick-latest.json" and not p.name.endswith(".summary.json"))
    assert len(kept) == 2 and files.json.name in kept
    # the newest older one by sequence (the third written) is the other kept
    assert any(name.startswith("quick-20990101T020000") for name in kept)


def test_history_reads_the_newest_by_sequence_not_by_name(tmp_path: Path) -> None:
    """Fails before this change: an older report named 2099 read as the newest."""
    _write(_report(FUTURE), tmp_path)
    files = _write(_report(TODAY, Verdict.FAIL), tmp_path)
    [newest, older] = recent_reports(tmp_path, 2)
    assert newest["report_id"] == load(files.json).report_id
    assert older["finished_at"].startswith("2099")
