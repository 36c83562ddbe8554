"""Bad input for the fields that order a node's reports (boot id, machine id, boot time,
sequence) and for values a report must not carry (NaN, Infinity, a verdict in lower case):
each report is the only one in its folder, so ``nodegate report`` has nothing readable
(exit 2) and names the file and key; ``nodegate gate`` without a node has nothing to act on
(exit 2) and names the file. Nothing is written, no traceback.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from nodegate.report import to_json
from nodegate_lab.synthetic_fleet import synthetic_report
from tests.badinput.test_corpus import Case, check_case

_BASE: dict[str, Any] = json.loads(to_json(synthetic_report(
    "n1", level="quick", seed=7, samples=2,
    started_at=dt.datetime(2026, 12, 1, 3, 0, tzinfo=dt.timezone.utc))))


def _with(**fields: Any) -> str:
    """The base report with ``fields`` set (``...`` deletes one)."""
    data = dict(_BASE)
    for key, value in fields.items():
        if value is ...:
            data.pop(key, None)
        else:
            data[key] = value
    return json.dumps(data)


def _nan_measured(literal: str) -> str:
    data = json.loads(json.dumps(_BASE))
    data["results"][0]["measured"] = "__X__"
    return json.dumps(data).replace('"__X__"', literal)


REPORT = ("report", "{d}/r")
STRICT = ("report", "{d}/r", "--strict")
LATEST = "r/quick-latest.json"

CASES = [
    Case("time-sequence-zero", REPORT, 2, ("quick-latest.json", "$.sequence"),
         {LATEST: _with(sequence=0)}),
    Case("time-sequence-negative", REPORT, 2, ("quick-latest.json", "$.sequence"),
         {LATEST: _with(sequence=-3)}),
    Case("time-sequence-string", REPORT, 2, ("quick-latest.json", "$.sequence"),
         {LATEST: _with(sequence="12")}),
    Case("time-sequence-bool", REPORT, 2, ("quick-latest.json", "$.sequence"),
         {LATEST: _with(sequence=True)}),
    Case("time-sequence-float", REPORT, 2, ("quick-latest.json", "$.sequence"),
         {LATEST: _with(sequence=3.5)}),
    Case("time-sequence-beyond-double", REPORT, 2, ("quick-latest.json", "$.sequence"),
         {LATEST: _with(sequence=2**64)}),
    Case("time-sequence-strict-zero", STRICT, 2, ("quick-latest.json", "sequence"),
         {LATEST: _with(sequence=0)}),
    Case("time-boottime-negative", REPORT, 2, ("quick-latest.json", "$.boottime_s"),
         {LATEST: _with(boottime_s=-1.5)}),
    Case("time-boottime-string", REPORT, 2, ("quick-latest.json", "$.boottime_s"),
         {LATEST: _with(boottime_s="120")}),
    Case("time-boottime-strict-negative", STRICT, 2, ("quick-latest.json", "boottime_s"),
         {LATEST: _with(boottime_s=-1)}),
    Case("time-machine-id-not-hex", REPORT, 2, ("quick-latest.json", "$.machine_id"),
         {LATEST: _with(machine_id="not-a-machine-id")}),
    Case("time-machine-id-upper-case", STRICT, 2, ("quick-latest.json", "machine_id"),
         {LATEST: _with(machine_id="A" * 32)}),
    Case("time-boot-id-number", REPORT, 2, ("quick-latest.json", "$.boot_id"),
         {LATEST: _with(boot_id=12)}),
    Case("time-measured-nan", REPORT, 2, ("quick-latest.json", "NaN"),
         {LATEST: _nan_measured("NaN")}),
    Case("time-measured-infinity", STRICT, 2, ("quick-latest.json", "Infinity"),
         {LATEST: _nan_measured("-Infinity")}),
    Case("time-verdict-lower-case", REPORT, 2, ("quick-latest.json", "$.verdict", "pass"),
         {LATEST: _with(verdict="pass")}),
    Case("time-finished-unparseable", REPORT, 2, ("quick-latest.json", "finished_at"),
         {LATEST: _with(finished_at="yesterday")}),
    Case("time-gate-nan-no-node", ("gate", "--dry-run", "--report-dir", "{d}/r"), 2,
         ("quick-latest.json", "NaN", "no report"), {LATEST: _nan_measured("NaN")}),
    Case("time-gate-bad-sequence-no-node", ("gate", "--dry-run", "--report-dir", "{d}/r"), 2,
         ("quick-latest.json", "sequence", "no report"), {LATEST: _with(sequence=0)}),
]


def test_the_cases_are_unique() -> None:
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids)) and len(ids) >= 10


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_time_bad_input_exits_naming_it(case: Case, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURMD_NODENAME", raising=False)
    check_case(case, tmp_path, capsys, ignored=())
