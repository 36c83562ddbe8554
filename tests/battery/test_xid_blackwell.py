"""Blackwell kernel lines judged as the catalogue says: NVLink5 Xids (144-150) by the severity
their line states (non-fatal WARNs, counted; fatal FAILs the GPU), and the driver's lost-GPU
message without an Xid line, which fails that GPU like Xid 79."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nodegate.judge.xid import judge_xids
from nodegate.probes.kernel_log import parse_xids
from nodegate.results import CheckResult, Severity, Verdict

DATA = json.loads((Path(__file__).parent / "data" / "blackwell-kernel-lines.json").read_text())
ROWS: list[dict[str, Any]] = DATA["lines"]


def _judge(lines: list[str], bus: str, *, boot: str = "b-1",
           history: list[dict[str, Any]] | None = None) -> CheckResult:
    results = judge_xids(parse_xids(lines), {"gpu0": bus}, boot_id=boot, source="file",
                         window="boot", history=(lambda: history or []))
    return next(r for r in results if r.entity == "gpu0")


def test_every_row_names_its_origin_and_licence() -> None:
    assert len(ROWS) >= 6
    for row in ROWS:
        assert row["origin"].startswith("https://github.com/"), row
        assert row["licence"], row
    assert {row["xid"] for row in ROWS} >= {144, 145, 149, 79}


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"xid{r['xid']}-{r['verdict']}")
def test_a_public_line_is_judged_as_the_catalogue_says(row: dict[str, Any]) -> None:
    result = _judge(row["lines"], row["bus"])
    assert result.verdict.value == row["verdict"]
    event = result.evidence["events"][0]
    assert event["xid"] == row["xid"]
    assert event.get("severity") == row["severity"]
    assert event.get("origin") == row.get("origin_kind")
    if row["verdict"] == "FAIL":
        assert result.severity == Severity.HARDWARE
    if row["severity"] == "non-fatal":  # counted, not a drain: WARN with class non-fatal
        assert (event["class"], event["action"]) == ("non-fatal", "none")
        assert result.severity == Severity.WARNING


NONFATAL = ("[{t:.6f}] NVRM: Xid (PCI:0000:18:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 "
            "(0x0409a0c2 0x00000008 0x00000001 0x00000000 0x00100000 0x00000004)")
FATAL = ("[{t:.6f}] NVRM: Xid (PCI:0000:18:00): 145, RLW_REMAP Fatal XC0 i0 Link 00 "
         "(0x00000004 0x00000040 0x00000000 0x00000000)")


def test_non_fatal_events_warn_with_their_count_and_rate() -> None:
    lines = [NONFATAL.format(t=1000.0 + 360.0 * i) for i in range(11)]  # 11 in one hour
    result = _judge(lines, "00000000:18:00.0")
    assert result.verdict == Verdict.WARN
    event = result.evidence["events"][0]
    assert (event["count"], event["rate_per_h"]) == (11, 11.0)


def test_one_fatal_line_among_non_fatal_ones_fails_the_gpu() -> None:
    lines = [NONFATAL.format(t=1000.0), FATAL.format(t=1001.0), NONFATAL.format(t=1002.0)]
    result = _judge(lines, "00000000:18:00.0")
    assert result.verdict == Verdict.FAIL and result.severity == Severity.HARDWARE
    assert result.evidence["events"][0]["severity"] == "fatal"


def test_an_nvlink5_line_that_states_no_severity_takes_the_worst() -> None:
    line = "[ 5.0] NVRM: Xid (PCI:0000:18:00): 147, TREX XC0 i0 Link 00 (0x0000000e)"
    assert _judge([line], "00000000:18:00.0").verdict == Verdict.FAIL


def test_a_non_fatal_event_from_an_earlier_boot_is_not_recurrent_hardware() -> None:
    earlier = [_judge([NONFATAL.format(t=10.0)], "00000000:18:00.0", boot="b-0").to_dict()]
    result = _judge([NONFATAL.format(t=20.0)], "00000000:18:00.0", boot="b-1",
                    history=[{"boot_id": "b-0", "results": earlier}])
    assert result.verdict == Verdict.WARN
    assert "recurrent" not in result.evidence["events"][0]


def test_fallen_off_bus_in_syslog_records_fails_like_xid_79() -> None:
    # journalctl -o short (and rsyslog) write each line of the message as its own record
    lines = ["Feb 14 05:03:42 gpu-1 kernel: NVRM: The NVIDIA GPU 0000:3b:00.0",
             "Feb 14 05:03:42 gpu-1 kernel: NVRM: (PCI ID: 10de:2901) installed in this system has",
             "Feb 14 05:03:42 gpu-1 kernel: NVRM: fallen off the bus and is not responding to "
             "commands."]
    result = _judge(lines, "00000000:3B:00.0")
    assert result.verdict == Verdict.FAIL and result.severity == Severity.HARDWARE
    event = result.evidence["events"][0]
    assert (event["xid"], event["origin"], event["action"]) == (
        79, "fallen-off-bus", "reboot_node")
    assert event["first_time"] == "Feb 14 05:03:42"


def test_fallen_off_bus_next_to_its_xid_79_is_one_event() -> None:
    lines = ["[ 90.0] NVRM: Xid (PCI:0000:b3:00): 79, pid=1, name=python3, GPU has fallen off "
             "the bus.", *ROWS[-1]["lines"]]
    event = _judge(lines, "0000:b3:00.0").evidence["events"]
    assert [(e["xid"], e["count"], e.get("origin")) for e in event] == [(79, 1, None)]


@pytest.mark.parametrize("lines", [
    ["[ 1.0] NVRM: The NVIDIA probe routine failed for 1 device(s)."],
    ["[ 1.0] NVRM: The NVIDIA GPU 0000:b3:00.0", "[ 1.1] NVRM: (PCI ID: 10de:26b5) installed in "
     "this system has", "[ 1.2] NVRM: The NVIDIA GPU 0000:b4:00.0"],
])
def test_other_nvrm_gpu_messages_are_not_a_lost_gpu(lines: list[str]) -> None:
    assert parse_xids(lines) == []
