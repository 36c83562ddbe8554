"""A hardware Xid seen in an earlier boot's report and again after a reboot is recurrent.

Reports are written the way ``nodegate health`` writes them (report.outputs), then read back
by ``report.history``: newest few only, unreadable files skipped.
"""

from __future__ import annotations

import json
from pathlib import Path

from nodegate.judge.xid import judge_sxids, judge_xids, previous_boots
from nodegate.probes.kernel_log import parse_sxids, parse_xids
from nodegate.report import build
from nodegate.report.history import recent_reports
from nodegate.report.outputs import write_outputs
from nodegate.results import CheckResult, Severity, Verdict

BUS = {"gpu0": "00000000:18:00.0", "gpu3": "00000000:9A:00.0"}
XID_64 = ("[ 812.5] NVRM: Xid (PCI:0000:9a:00): 64, pid=77, name=train, Row Remapper: Failed "
          "to remap row (0x00000000000a3f40), no spare rows available.")
XID_13 = "[ 813.0] NVRM: Xid (PCI:0000:18:00): 13, pid=77, name=train, Graphics SM Warp Exception"


def _run(lines: list[str], boot: str, report_dir: Path, started: float) -> list[CheckResult]:
    """One health run: judge with the report dir's history, then write its report there."""
    results = judge_xids(parse_xids(lines), BUS, boot_id=boot, source="file", window="boot",
                         history=lambda: recent_reports(report_dir, 8))
    results += judge_sxids(parse_sxids(lines), boot_id=boot, source="file", window="boot",
                           history=lambda: recent_reports(report_dir, 8))
    report = build(results, node="n1", profile="p", level="quick", started_at=started,
                   duration_s=1.0, backend="nvml", boot_id=boot)
    write_outputs(report, report_dir=report_dir, textfile_dir=None, junit=False)
    return results


def _by_entity(results: list[CheckResult]) -> dict[str, CheckResult]:
    return {r.entity: r for r in results}


def test_hardware_xid_after_a_reboot_is_recurrent(tmp_path: Path) -> None:
    first = _by_entity(_run([XID_64, XID_13], "boot-old", tmp_path, 1_700_000_000.0))
    assert first["gpu3"].verdict == Verdict.FAIL
    assert "recurrent" not in first["gpu3"].evidence["events"][0]

    # rebooted (new boot id): the same Xid on the same GPU comes back
    again = _by_entity(_run([XID_64, XID_13], "boot-new", tmp_path, 1_700_000_600.0))
    event = again["gpu3"].evidence["events"][0]
    assert event["recurrent"] is True and event["boots"] == ["boot-old", "boot-new"]
    assert again["gpu3"].verdict == Verdict.FAIL and again["gpu3"].severity == Severity.HARDWARE
    assert "came back after a reboot" in again["gpu3"].evidence["hint"]
    # an application Xid is never made recurrent
    assert "recurrent" not in again["gpu0"].evidence["events"][0]


def test_recurrence_survives_many_runs_of_the_new_boot(tmp_path: Path) -> None:
    _run([XID_64], "boot-old", tmp_path, 1_700_000_000.0)
    for i in range(12):  # more cron runs than the history window holds
        results = _by_entity(_run([XID_64], "boot-new", tmp_path, 1_700_001_000.0 + 300 * i))
    assert results["gpu3"].evidence["events"][0]["boots"] == ["boot-old", "boot-new"]


def test_same_boot_is_not_recurrent(tmp_path: Path) -> None:
    _run([XID_64], "boot-1", tmp_path, 1_700_000_000.0)
    again = _by_entity(_run([XID_64], "boot-1", tmp_path, 1_700_000_300.0))
    assert "recurrent" not in again["gpu3"].evidence["events"][0]


def test_fatal_sxid_recurs_on_the_switch(tmp_path: Path) -> None:
    line = ("[ 99.0] nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 24007, Fatal, Link 28 "
            "sourcetrack timeout error (First)")
    _run([line], "boot-a", tmp_path, 1_700_000_000.0)
    again = _by_entity(_run([line], "boot-b", tmp_path, 1_700_000_900.0))
    event = again["nvswitch1"].evidence["events"][0]
    assert event["recurrent"] is True and event["boots"] == ["boot-a", "boot-b"]


def test_history_reads_newest_few_and_skips_unreadable(tmp_path: Path) -> None:
    _run([XID_64], "boot-old", tmp_path, 1_700_000_000.0)
    (tmp_path / "quick-20990101T000000.000Z.json").write_text("{half a rep")  # newest, broken
    (tmp_path / "notes.json").write_text(json.dumps({"boot_id": "x"}))  # not a dated report
    reports = recent_reports(tmp_path, 8)
    assert [r["boot_id"] for r in reports] == ["boot-old"]
    assert recent_reports(tmp_path, 0) == []
    assert recent_reports(tmp_path / "absent", 8) == []
    assert previous_boots(reports) == {("0000:9a:00", 64): ["boot-old"]}


def test_history_is_not_read_without_a_hardware_event(tmp_path: Path) -> None:
    def boom() -> list[dict[str, object]]:
        raise AssertionError("history read on a clean log")

    results = judge_xids(parse_xids([XID_13]), BUS, boot_id="b", source="f", window="boot",
                         history=boom)
    assert {r.verdict for r in results} == {Verdict.PASS, Verdict.WARN}
