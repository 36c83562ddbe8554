"""Earlier reports read back newest first, by the reports' own order, skipping what does not
parse (the ordering after clock steps is in tests/report/test_clock_step_files.py)."""

from __future__ import annotations

import json
from pathlib import Path

from nodegate.report.history import recent_reports


def _write(folder: Path, stamp: str, boot: str, **extra: object) -> None:
    body = {"boot_id": boot, "stamp": stamp, "finished_at": f"{stamp[:4]}-{stamp[4:6]}-"
            f"{stamp[6:8]}T{stamp[9:11]}:{stamp[11:13]}:00Z", **extra}
    (folder / f"quick-{stamp}.json").write_text(json.dumps(body))


def test_reports_come_newest_first_and_unreadable_files_are_skipped(tmp_path: Path) -> None:
    for minute, boot in ((0, "old"), (5, "b"), (10, "b"), (15, "b")):
        _write(tmp_path, f"20261204T12{minute:02d}00.000Z", boot)
    (tmp_path / "quick-20261204T122000.000Z.json").write_text("{half")  # unreadable: skipped
    assert [r["stamp"][9:13] for r in recent_reports(tmp_path, 4)] == ["1215", "1210", "1205"]
    assert recent_reports(tmp_path / "missing", 4) == []


def test_reports_without_an_id_are_not_taken_for_one_another(tmp_path: Path) -> None:
    """Foreign or old files without report_id: each counts, none hides the others."""
    for minute in (0, 5, 10):
        _write(tmp_path, f"20261204T12{minute:02d}00.000Z", "b")
    (tmp_path / "quick-latest.json").write_text("{}")
    assert len(recent_reports(tmp_path, 4)) == 4
