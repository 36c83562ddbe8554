"""The report sequence number, pruning and history after wall-clock steps: the node's own
order (sequence, then boot time), never file names or dates."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from nodegate.report import NodeReport, build, outputs
from nodegate.report.model import load
from nodegate.report.outputs import SEQUENCE_FILE, next_sequence, write_outputs
from nodegate.results import CheckResult, Severity, Verdict

FUTURE = dt.datetime(2099, 1, 1, tzinfo=dt.timezone.utc)
TODAY = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=1)


def _report(started: dt.datetime, verdict: Verdict = Verdict.PASS) -> NodeReport:
    result = CheckResult("gpu_count", "node", 8, {"min": 8}, "GPUs", verdict,
                         Severity.INFO, {})
    return build([result], node="n1", profile="sim-h100-hgx", level="quick",
                 started_at=started, finished_at=started + dt.timedelta(seconds=1),
                 backend="nvml")


def _write(report: NodeReport, folder: Path) -> outputs.WrittenFiles:
    return write_outputs(report, report_dir=folder, textfile_dir=None, junit=False)


def test_reports_are_numbered_in_writing_order(tmp_path: Path) -> None:
    first = _write(_report(FUTURE), tmp_path)
    second = _write(_report(TODAY), tmp_path)
    assert [load(f.json).sequence for f in (first, second)] == [1, 2]
    assert load(second.latest).sequence == 2
    assert (tmp_path / SEQUENCE_FILE).read_text() == "2\n"
    written = load(second.json)
    assert written.boottime_s is not None and written.boottime_s > 0


@pytest.mark.parametrize("counter", [None, "", "garbage\n", "-4\n", "9" * 40, "\xff"])
def test_a_lost_or_corrupt_counter_never_reuses_a_number(tmp_path: Path,
                                                         counter: str | None) -> None:
    for _ in range(3):
        _write(_report(TODAY), tmp_path)
    if counter is None:
        (tmp_path / SEQUENCE_FILE).unlink()
    else:
        (tmp_path / SEQUENCE_FILE).write_text(counter, encoding="latin-1")
    assert next_sequence(tmp_path) == 4


def test_a_lost_counter_resumes_after_reports_without_summaries(tmp_path: Path) -> None:
    _write(_report(TODAY), tmp_path)
    files = _write(_report(TODAY), tmp_path)
    for summary in tmp_path.glob("*.summary.json"):
        summary.unlink()
    (tmp_path / SEQUENCE_FILE).unlink()
    assert load(files.json).sequence == 2
    assert next_sequence(tmp_path) == 3


def test_an_old_report_without_the_new_fields_still_loads(tmp_path: Path) -> None:
    data = _report(TODAY).to_dict()
    for key in ("machine_id", "boottime_s", "sequence"):
        assert key not in data
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    loaded = load(path)
    assert (loaded.machine_id, loaded.boottime_s, loaded.sequence) == (None, None, None)


def test_machine_id_is_read_where_readable(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    ident = tmp_path / "machine-id"
    ident.write_text("0123456789abcdef0123456789abcdef\n")
    monkeypatch.setenv("NODEGATE_MACHINE_ID_FILE", str(ident))
    files = _write(_report(TODAY), tmp_path / "r")
    assert load(files.json).machine_id == "0123456789abcdef0123456789abcdef"
    ident.write_text("not a machine id\n")
    files = _write(_report(TODAY), tmp_path / "r")
    assert load(files.json).machine_id is None
