"""Prometheus textfile: parses with prometheus_client's own parser; hostile labels round-trip."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nodegate.report import NodeReport, build, render_prometheus, write_prometheus
from nodegate.report.prometheus import escape_label_value
from nodegate.results import CheckResult, Severity, Verdict


def _families(text: str) -> dict[str, Any]:
    return {family.name: family for family in text_string_to_metric_families(text)}


def _samples(text: str, name: str) -> list[Any]:
    return [s for s in _families(text)[name].samples if s.name == name]


def test_textfile_parses_with_expected_families(report: NodeReport) -> None:
    text = render_prometheus(report)
    families = _families(text)
    assert set(families) == {
        "nodegate_check_status",
        "nodegate_check_measured",
        "nodegate_check_threshold",
        "nodegate_node_verdict",
        "nodegate_report_results",
        "nodegate_report_info",
        "nodegate_report_timestamp_seconds",
        "nodegate_report_duration_seconds",
    }
    assert all(family.type == "gauge" for family in families.values())
    assert all(family.documentation for family in families.values())
    for name in families:
        assert f"# HELP {name} " in text and f"# TYPE {name} gauge" in text
    assert text.endswith("\n")


def test_check_status_and_measured(report: NodeReport) -> None:
    text = render_prometheus(report)
    status = _samples(text, "nodegate_check_status")
    assert len(status) == len(report.results)
    assert all(s.value == 1 for s in status)
    link = [s for s in status if s.labels["entity"] == "gpu3.link5"]
    assert link[0].labels == {
        "check": "nvlink_state",
        "entity": "gpu3.link5",
        "verdict": "FAIL",
        "severity": "hardware",
        "level": "acceptance",
    }
    measured = {
        (s.labels["check"], s.labels["entity"]): s
        for s in _samples(text, "nodegate_check_measured")
    }
    assert measured[("p2p_bandwidth", "gpu2-gpu3")].value == pytest.approx(321.4)
    assert measured[("p2p_bandwidth", "gpu2-gpu3")].labels["unit"] == "GB/s"
    assert measured[("nvlink_state", "gpu3.link5")].value == 0
    assert measured[("hbm_bandwidth", "gpu0")].value == pytest.approx(2897.25)
    assert ("xid_errors", "node") not in measured  # nothing measured: no sample, not a zero
    assert ("pcie_link", "gpu0") not in measured  # strings are not gauges
    thresholds = {
        (s.labels["check"], s.labels["entity"], s.labels["bound"]): s.value
        for s in _samples(text, "nodegate_check_threshold")
    }
    assert thresholds[("p2p_bandwidth", "gpu2-gpu3", "min")] == 335
    assert thresholds[("gpu_count", "node", "max")] == 8


def test_node_level_metrics(report: NodeReport) -> None:
    text = render_prometheus(report.to_dict())
    (verdict,) = _samples(text, "nodegate_node_verdict")
    assert verdict.labels == {"verdict": "FAIL", "profile": "xe9680-h100", "level": "acceptance"}
    (stamp,) = _samples(text, "nodegate_report_timestamp_seconds")
    assert stamp.value == report.finished_at.timestamp()
    (duration,) = _samples(text, "nodegate_report_duration_seconds")
    assert duration.value == 412.5
    counts = {s.labels["verdict"]: s.value for s in _samples(text, "nodegate_report_results")}
    assert counts == {"FAIL": 1, "ERROR": 1, "WARN": 1, "SKIP": 1, "PASS": 161}
    (info,) = _samples(text, "nodegate_report_info")
    assert info.labels["backend"] == "cuda/nccl"


@pytest.mark.parametrize(
    "hostile",
    ['pdu:"rack12"\\a.outlet3', "line1\nline2", 'back\\slash\\"end', "\\n literal", "ünïcode ✓"],
)
def test_hostile_label_values_round_trip(hostile: str) -> None:
    result = CheckResult(
        "outlet_power", hostile, 412.0, {"max": 500}, f"W{hostile}", Verdict.PASS, Severity.INFO
    )
    rep = build(
        [result],
        node="n1",
        profile=hostile,
        level="quick",
        started_at=0.0,
        finished_at=1.0,
        backend="snmp",
    )
    text = render_prometheus(rep)
    (status,) = _samples(text, "nodegate_check_status")
    assert status.labels["entity"] == hostile
    (measured,) = _samples(text, "nodegate_check_measured")
    assert measured.labels["unit"] == f"W{hostile}"
    (verdict,) = _samples(text, "nodegate_node_verdict")
    assert verdict.labels["profile"] == hostile
    assert len(text.splitlines()) == text.count("\n")  # no raw newline escaped into a sample


def test_escape_label_value() -> None:
    assert escape_label_value('a"b\\c\nd') == 'a\\"b\\\\c\\nd'


def test_duplicate_results_do_not_duplicate_series() -> None:
    twice = [
        CheckResult("gpu_temp", "gpu0", float(v), {"max": 85}, "C", Verdict.PASS, Severity.INFO)
        for v in (60, 61)
    ]
    rep = build(
        twice,
        node="n1",
        profile="p",
        level="quick",
        started_at=0.0,
        finished_at=1.0,
        backend="nvml",
    )
    text = render_prometheus(rep)
    assert [s.value for s in _samples(text, "nodegate_check_measured")] == [61.0]
    assert len(_samples(text, "nodegate_check_status")) == 1


def test_write_is_atomic_and_world_readable(report: NodeReport, tmp_path: Path) -> None:
    path = write_prometheus(report, tmp_path / "nodegate.prom")
    assert path.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["nodegate.prom"]
    _families(path.read_text(encoding="utf-8"))
