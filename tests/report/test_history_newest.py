"""``newest_where``: the first of ``recent_reports`` a test takes, found from the fleet
summaries and decoding only the report taken; the same answer as the eager read whatever
state the folder is in (summaries missing, stale or lying, files unreadable)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from nodegate.report import build, fleet_summary, history
from nodegate.report.history import newest_where, recent_reports
from nodegate.results import CheckResult, Severity, Verdict

START = dt.datetime(2026, 12, 4, 11, 0, tzinfo=dt.timezone.utc)
LIMIT = 4


def _write(folder: Path, index: int, boot: str, *, crc: bool = True) -> Path:
    """A dated report written as the node writes one (summary beside it), the latest copy a
    second name of it."""
    started = START + dt.timedelta(minutes=5 * index)
    check = "nvlink_crc_errors" if crc else "gpu_count"
    results = [CheckResult(check, "gpu0.link0", index, {"max": 100}, "", Verdict.PASS,
                           Severity.INFO)]
    report = build(results, node="n1", profile="p", level="quick", started_at=started,
                   finished_at=started + dt.timedelta(seconds=1), backend="nvml",
                   boot_id=boot)
    report = dataclasses.replace(report, sequence=index + 1, boottime_s=60.0 * index)
    path = folder / f"quick-{started.strftime('%Y%m%dT%H%M%S')}.000Z.json"
    fleet_summary.write_report(report, path)
    fleet_summary.link_files(path, folder / "quick-latest.json", "", None)
    os.link(fleet_summary.path_for(path), folder / "quick-latest.summary.tmp")
    os.replace(folder / "quick-latest.summary.tmp", folder / "quick-latest.summary.json")
    return path


def _eager(folder: Path, accept: Callable[[Mapping[str, Any]], bool]) -> Any:
    return next((data for data in recent_reports(folder, LIMIT) if accept(data)), None)


def _of_boot(boot: str) -> tuple[Callable[[Mapping[str, Any]], bool],
                                 Callable[[Mapping[str, Any]], bool]]:
    def accept(data: Mapping[str, Any]) -> bool:
        return data.get("boot_id") == boot and data["results"][0]["check"] == "nvlink_crc_errors"

    return accept, lambda fields: fields.get("boot_id") == boot


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    for index, boot in enumerate(("a", "a", "b", "b", "b")):
        _write(tmp_path, index, boot, crc=index != 4)
    return tmp_path


def _count_decodes(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    decoded: list[Path] = []
    real = history._decoded

    def counting(path: Path) -> dict[str, Any] | None:
        decoded.append(path)
        return real(path)

    monkeypatch.setattr(history, "_decoded", counting)
    return decoded


@pytest.mark.parametrize("boot", ["a", "b", "c"])
def test_the_answer_is_the_eager_reads_and_only_the_report_taken_is_decoded(
        folder: Path, boot: str, monkeypatch: pytest.MonkeyPatch) -> None:
    accept, head = _of_boot(boot)
    expected = _eager(folder, accept)
    decoded = _count_decodes(monkeypatch)
    found = newest_where(folder, LIMIT, accept, head=head)
    assert found == expected
    # "b": the newest report (no counters) and the one before it; "a": the oldest of the
    # newest four (the fifth is not searched); "c": no report of that boot, none decoded
    assert len(decoded) == {"a": 1, "b": 2, "c": 0}[boot]
    if boot == "b":
        assert found is not None and found["sequence"] == 4


def test_reports_without_summaries_are_decoded_and_ordered_alike(folder: Path) -> None:
    for summary in folder.glob("*.summary.json"):
        summary.unlink()
    accept, head = _of_boot("b")
    assert newest_where(folder, LIMIT, accept, head=head) == _eager(folder, accept)


def test_a_stale_summary_is_not_taken_for_its_report(folder: Path) -> None:
    """The newest report rewritten (another size) after its summary: the report decides."""
    newest = sorted(folder.glob("quick-2*[0-9]Z.json"))[-1]
    data = json.loads(newest.read_text())
    data["boot_id"] = "c"
    data["results"][0]["check"] = "nvlink_crc_errors"
    (folder / "quick-latest.json").unlink()
    newest.write_text(json.dumps(data))
    accept, head = _of_boot("c")
    found = newest_where(folder, LIMIT, accept, head=head)
    assert found == _eager(folder, accept) and found is not None


def test_a_summary_that_lies_about_its_report_sends_the_question_to_the_eager_read(
        folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Same size, another order: the report taken is checked against its summary."""
    older = sorted(folder.glob("quick-2*[0-9]Z.json"))[1]  # sequence 2, boot "a"
    summary_path = fleet_summary.path_for(older)
    summary = json.loads(summary_path.read_text())
    summary["sequence"] = 99  # claims to be the newest
    summary_path.write_text(json.dumps(summary))
    accept, head = _of_boot("a")
    expected = _eager(folder, accept)
    found = newest_where(folder, LIMIT, accept, head=head)
    assert found == expected and found is not None and found["sequence"] == 2


def test_unreadable_files_are_skipped_as_the_eager_read_skips_them(folder: Path) -> None:
    (folder / "quick-20261204T120000.000Z.json").write_text("{half")
    os.mkfifo(folder / "quick-20261204T120500.000Z.json")
    accept, head = _of_boot("b")
    assert newest_where(folder, LIMIT, accept, head=head) == _eager(folder, accept)
    assert newest_where(folder / "missing", LIMIT, accept, head=head) is None
