"""Earlier reports read back newest first, one file at a time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nodegate.report import history
from nodegate.report.history import iter_recent_reports, recent_reports
from nodegate.report.model import decode


def _write(folder: Path, stamp: str, boot: str) -> None:
    (folder / f"quick-{stamp}.json").write_text(json.dumps({"boot_id": boot, "stamp": stamp}))


def test_reports_come_newest_first_and_one_file_is_parsed_per_report_taken(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for minute, boot in ((0, "old"), (5, "b"), (10, "b"), (15, "b")):
        _write(tmp_path, f"20261204T12{minute:02d}00.000Z", boot)
    (tmp_path / "quick-latest.json").write_text("{}")  # not dated: never read
    (tmp_path / "quick-20261204T122000.000Z.json").write_text("{half")  # unreadable: skipped
    parsed: list[bytes] = []

    def counting(raw: bytes) -> Any:
        parsed.append(raw)
        return decode(raw)

    monkeypatch.setattr(history, "decode", counting)

    newest = next(iter_recent_reports(tmp_path, 4))
    assert newest["stamp"] == "20261204T121500.000Z"
    assert len(parsed) == 2  # the unreadable newest, then the one returned
    assert [r["stamp"][9:13] for r in recent_reports(tmp_path, 4)] == ["1215", "1210", "1205"]
    assert list(iter_recent_reports(tmp_path / "missing", 4)) == []
