"""JUnit XML: parses with a real XML parser, one testcase per check and entity, right counts."""

from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET
from pathlib import Path

from nodegate.report import NodeReport, build, render_junit, write_junit
from nodegate.report.junit import check_group
from nodegate.results import CheckResult, Severity, Verdict


def _case(root: ET.Element, name: str) -> ET.Element:
    found = [case for case in root.iter("testcase") if case.get("name") == name]
    assert len(found) == 1, name
    return found[0]


def test_one_suite_with_a_case_per_result(report: NodeReport) -> None:
    root = ET.fromstring(render_junit(report))
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    assert suite.get("name") == "nodegate.xe9680-a12"
    assert suite.get("hostname") == "xe9680-a12"
    assert suite.get("tests") == str(len(report.results)) == "165"
    assert (suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("1", "1", "1")
    assert suite.get("timestamp") == "2024-05-14T03:15:00.000Z"
    assert float(suite.get("time", "0")) == 412.5
    assert len(suite.findall("testcase")) == 165
    assert len(root.findall(".//failure")) == 1
    assert len(root.findall(".//error")) == 1
    assert len(root.findall(".//skipped")) == 1
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["profile"] == "xe9680-h100"
    assert props["verdict"] == "FAIL"
    assert props["slurm_node"] == "gpu-a12"


def test_failure_carries_measured_threshold_and_evidence(report: NodeReport) -> None:
    root = ET.fromstring(render_junit(report))
    case = _case(root, "nvlink_state[gpu3.link5]")
    assert case.get("classname") == "nvlink"
    failure = case.find("failure")
    assert failure is not None
    message = failure.get("message", "")
    assert "measured false" in message and "threshold true" in message
    assert "NVLink 5 on GPU 3 is inactive" in message
    assert failure.get("type") == "hardware"
    assert "0000:9A:00.0" in (failure.text or "")


def test_warn_passes_with_system_out_and_skip_and_error(report: NodeReport) -> None:
    root = ET.fromstring(render_junit(report))
    warn = _case(root, "p2p_bandwidth[gpu2-gpu3]")
    assert warn.find("failure") is None and warn.find("error") is None
    out = warn.findtext("system-out") or ""
    assert out.startswith("WARN p2p_bandwidth[gpu2-gpu3]")
    assert "measured 321.4 GB/s" in out and '"min":335' in out
    assert warn.get("time") == "1.750"
    skipped = _case(root, "fabricmanager_running[node]").find("skipped")
    assert skipped is not None and "fabricmanager: false" in skipped.get("message", "")
    error = _case(root, "xid_errors[node]").find("error")
    assert error is not None and "timed out" in error.get("message", "")
    passed = _case(root, "gpu_count[node]")
    assert list(passed) == []


def test_several_nodes_and_dict_input(report: NodeReport, results: list[CheckResult]) -> None:
    healthy = [dataclasses.replace(r, verdict=Verdict.PASS) for r in results]
    other = build(
        healthy,
        node="xd670-b07",
        profile="xd670-h200",
        level="standard",
        started_at=0.0,
        finished_at=30.0,
        backend="nvml",
    )
    root = ET.fromstring(render_junit([report.to_dict(), other]))
    suites = root.findall("testsuite")
    assert [s.get("hostname") for s in suites] == ["xe9680-a12", "xd670-b07"]
    assert root.get("tests") == "330"
    assert (root.get("failures"), root.get("errors"), root.get("skipped")) == ("1", "1", "1")


def test_hostile_text_still_parses(tmp_path: Path) -> None:
    nasty = 'gpu0 <&> "quoted" \x00\x1b[31m'
    result = CheckResult(
        "dmesg_scan",
        "node",
        nasty,
        None,
        "",
        Verdict.FAIL,
        Severity.CRITICAL,
        {"message": "raw line: " + nasty},
    )
    rep = build(
        [result],
        node="n1",
        profile="p",
        level="quick",
        started_at=0.0,
        finished_at=1.0,
        backend="nvml",
    )
    path = write_junit(rep, tmp_path / "junit.xml")
    root = ET.parse(path).getroot()
    message = root.find(".//failure")
    assert message is not None and '<&> "quoted"' in message.get("message", "")


def test_check_group() -> None:
    assert check_group("nvlink_state") == "nvlink"
    assert check_group("nvlink.link_state") == "nvlink"
    assert check_group("xid") == "xid"
