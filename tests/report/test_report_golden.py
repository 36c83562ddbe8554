"""The JUnit XML and Prometheus textfile, byte for byte: the renderers were rewritten for
speed (the cron health check writes both every few minutes) and their output is a format CI
systems and node_exporter already parse, so it must not move.

``data/golden/`` holds what the renderers before that rewrite (ElementTree with a JSON dump
per testcase; the dict-of-families textfile writer) produced for ``golden_report()``: a real
8-GPU board's results plus every verdict, identities, and the awkward values a probe can hand
back (XML-illegal control characters, quotes, newlines, non-ASCII, NaN, long evidence, values
JSON cannot hold). The JUnit writer is also compared, on many varied reports, with a copy of
that ElementTree writer kept here as the reference.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import random
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from nodegate.report import NodeReport, build, render_junit, render_prometheus
from nodegate.report.junit import _duration, _seconds, _xml, check_group, result_message
from nodegate.report.model import format_timestamp
from nodegate.report.prometheus import (
    _HELP,
    PREFIX,
    _labels,
    _number,
    _threshold_bounds,
    escape_help,
    format_value,
)
from nodegate.results import CheckResult, Severity, Verdict
from tests.report.conftest import GPUS, START, hgx_results, p2p_matrix, telemetry

GOLDEN = Path(__file__).parent / "data" / "golden"
AWKWARD = 'a&b <c> "d" \'e\'\tf\r\ng\\h \x00\x01\x1b\x7f \ufffe\uffff é 中 \U0001f600 ]]>'


def _identity(index: int) -> dict[str, str]:
    return {"serial": f"165422{index:07d}", "uuid": f"GPU-{index:08x}-0000-4000-8000-{index:012x}",
            "pci_bus_id": f"0000:{0x18 + index * 0x10:02X}:00.0",
            "vbios": "96.00.89.00.01", "board_part_number": "692-2G520-0200-000",
            "name": 'NVIDIA H100 80GB HBM3 "SXM5"'}


def _awkward_results() -> list[CheckResult]:
    fail, error = Verdict.FAIL, Verdict.ERROR
    return [
        CheckResult("xid_errors", "gpu4", 3, {"max": 0}, "events", fail, Severity.HARDWARE,
                    {"message": AWKWARD, "lines": [AWKWARD, "NVRM: Xid (PCI:0000:9a:00): 79"],
                     "paths": (Path("/dev/nvidia4"), Path("/var/log/kern.log")),
                     "by_code": {79: 2, 48: 1}, "duration_s": -1.0}),
        CheckResult("gpu.temperature", "gpu5", math.nan, {"max": math.inf}, "C", error,
                    Severity.CRITICAL, {"error": "x" * 900, "returncode": None,
                                        "duration_s": True}),
        CheckResult("clock_event_reasons", "gpu6", 0.1 + 0.2, {"min": -1e-7, "max": 1e21},
                    'MHz "sm"\\', Verdict.WARN, Severity.WARNING,
                    {"message": f"warn {AWKWARD}", "duration_s": 0.0004999}),
        CheckResult("fabric", "gpu7.link17", [1, 2.5, None, True], "ready", "", Verdict.SKIP,
                    Severity.INFO, {"reason": f"skip {AWKWARD}"}),
        CheckResult("power_w", f"gpu0\n{AWKWARD}", 2**60, 700, "W", Verdict.PASS,
                    Severity.INFO, {"duration_s": 12345.6789}),
        CheckResult("_leading", "node", False, True, "", fail, Severity.CRITICAL, {}),
        CheckResult("nodot", "gpu1-gpu2", {"b": 1, "a": [2, {"z": None}]}, {"min": True},
                    "", error, Severity.HARDWARE, {"error": ""}),
    ]


def _board_results() -> list[CheckResult]:
    """The shared 8-GPU results, cut to two cards and the node (the file stays small)."""
    return [r for r in hgx_results() if r.entity.split(".")[0] in ("node", "gpu2", "gpu3")
            or r.verdict is not Verdict.PASS]


def golden_report() -> NodeReport:
    return build(
        [*_board_results(), *_awkward_results()],
        node="xe9680-a12", profile="xe9680-h100", level="quick", started_at=START,
        finished_at=START + dt.timedelta(seconds=2.345678), backend="nvml",
        boot_id="6f1c2d9e-2b7a-4c55-9f0e-1d3c8a7b6e54", report_id="xe9680-a12-golden",
        nodegate_version="0.1.0+golden",
        labels={"groups": "gpu,log", "site": f"lab {AWKWARD}"},
        series=telemetry(), matrices={"p2p_bandwidth": p2p_matrix()},
        gpus={gpu: _identity(index) for index, gpu in enumerate(GPUS)},
    )


def test_junit_is_byte_for_byte_the_golden_file() -> None:
    expected = (GOLDEN / "report.xml").read_bytes().decode("utf-8")
    assert render_junit(golden_report()) == expected


def test_junit_of_two_reports_and_of_none_is_the_golden_file() -> None:
    empty = build([], node="empty", profile="p", level="quick", started_at=START,
                  finished_at=START, backend="nvml", report_id="empty-golden",
                  nodegate_version="0.1.0+golden")
    assert render_junit([golden_report(), empty]) == (
        GOLDEN / "two-reports.xml").read_bytes().decode("utf-8")
    assert render_junit([]) == (GOLDEN / "no-reports.xml").read_bytes().decode("utf-8")


def test_prometheus_is_byte_for_byte_the_golden_file() -> None:
    expected = (GOLDEN / "report.prom").read_bytes().decode("utf-8")
    assert render_prometheus(golden_report()) == expected


def test_renderers_read_a_report_dict_as_they_read_the_report() -> None:
    report = golden_report()
    data = json.loads(report.to_json())
    # the dict went through JSON: NaN is null there, so compare with a report that had it
    reloaded = NodeReport.from_dict(data)
    assert render_junit(data) == render_junit(reloaded)
    assert render_prometheus(data) == render_prometheus(reloaded)


# --- the ElementTree writer the JUnit renderer replaced, kept as the reference -------------

def _reference_junit(reports: list[NodeReport]) -> str:
    root = ET.Element("testsuites", name="nodegate")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    total_time = 0.0
    for report in reports:
        suite = _reference_suite(report)
        root.append(suite)
        for key in totals:
            totals[key] += int(suite.get(key, "0"))
        total_time += report.duration_s
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("time", _seconds(total_time))
    ET.indent(root, space="  ")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, "unicode") + "\n"


def _reference_suite(report: NodeReport) -> ET.Element:
    counts = report.counts
    suite = ET.Element(
        "testsuite", name=_xml(f"nodegate.{report.node}"), id=_xml(report.report_id),
        hostname=_xml(report.node), timestamp=format_timestamp(report.started_at),
        time=_seconds(report.duration_s), tests=str(len(report.results)),
        failures=str(counts["FAIL"]), errors=str(counts["ERROR"]), skipped=str(counts["SKIP"]))
    properties = ET.SubElement(suite, "properties")
    for name, value in (
        ("schema", report.schema), ("report_id", report.report_id),
        ("profile", report.profile), ("level", report.level.value),
        ("backend", report.backend), ("boot_id", report.boot_id or ""),
        ("nodegate_version", report.nodegate_version), ("verdict", report.verdict.value),
        *sorted(report.labels.items()),
    ):
        ET.SubElement(properties, "property", name=_xml(name), value=_xml(value))
    for result in report.results:
        suite.append(_reference_case(result, report.identity_of(result.entity)))
    return suite


def _reference_case(result: CheckResult, identity: dict[str, str]) -> ET.Element:
    case = ET.Element("testcase", classname=_xml(check_group(result.check)),
                      name=_xml(result.test_id), time=_seconds(_duration(result)))
    if identity:
        properties = ET.SubElement(case, "properties")
        for name, value in identity.items():
            ET.SubElement(properties, "property", name=_xml(name), value=_xml(value))
    message = _xml(result_message(result))
    detail = _xml(json.dumps(result.to_dict(), indent=2, default=str, sort_keys=True))
    if result.verdict is Verdict.FAIL:
        ET.SubElement(case, "failure", message=message, type=result.severity.value).text = detail
    elif result.verdict is Verdict.ERROR:
        ET.SubElement(case, "error", message=message, type=result.severity.value).text = detail
    elif result.verdict is Verdict.SKIP:
        ET.SubElement(case, "skipped", message=message)
    elif result.verdict is Verdict.WARN:
        ET.SubElement(case, "system-out").text = message
    return case


_ALPHABET = "ab. _-[]<>&\"'\\\t\r\n\x00\x0b\x1f\x7f\x85\u2028\ud7ff\ue000\ufffd\ufffe\uffffé中\U0001f600"


def _text(rng: random.Random, longest: int = 12) -> str:
    return "".join(rng.choice(_ALPHABET) for _ in range(rng.randrange(longest)))


def _value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(9 if depth < 2 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.randrange(-10**6, 10**20)
    if kind == 3:
        return rng.choice([rng.uniform(-1e6, 1e6), math.nan, math.inf, -0.0, 1e-300])
    if kind in (4, 5):
        return _text(rng)
    if kind in (6, 7):
        return {_text(rng, 6): _value(rng, depth + 1) for _ in range(rng.randrange(4))}
    return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]


def _random_report(rng: random.Random, index: int) -> NodeReport:
    results = [
        CheckResult(rng.choice(["gpu", "nvlink_state", "xid.errors", "_x", "", _text(rng)]),
                    rng.choice(["node", "gpu0", "gpu3.link5", "gpu1-gpu2", _text(rng)]),
                    _value(rng), _value(rng), rng.choice(["", "GB/s", _text(rng)]),
                    rng.choice(list(Verdict)), rng.choice(list(Severity)),
                    {_text(rng, 8): _value(rng) for _ in range(rng.randrange(4))}
                    | ({"duration_s": _value(rng)} if rng.random() < 0.5 else {}))
        for _ in range(rng.randrange(30))
    ]
    return build(results, node=_text(rng) or "n", profile=_text(rng), level="quick",
                 started_at=START + dt.timedelta(seconds=index), duration_s=rng.random() * 99,
                 backend=_text(rng), boot_id=rng.choice([None, _text(rng)]),
                 report_id=f"r{index}{_text(rng)}", nodegate_version=_text(rng),
                 labels={_text(rng, 6): _text(rng) for _ in range(rng.randrange(3))},
                 gpus={f"gpu{i}": {"serial": _text(rng), "name": _text(rng)}
                       for i in range(rng.randrange(4))})


@pytest.mark.parametrize("seed", range(40))
def test_junit_matches_the_elementtree_writer(seed: int) -> None:
    rng = random.Random(seed)
    reports = [_random_report(rng, index) for index in range(rng.randrange(4))]
    assert render_junit(reports) == _reference_junit(reports)


# --- the textfile writer the Prometheus renderer replaced, kept as the reference ------------

def _reference_prometheus(report: NodeReport) -> str:
    level = report.level.value
    families: dict[str, dict[tuple[tuple[str, str], ...], float]] = {n: {} for n in _HELP}

    def add(family: str, labels: dict[str, str], value: float) -> None:
        key = (*labels.items(), ("level", level))
        families[family][key] = value

    for result in report.results:
        base = {"check": result.check, "entity": result.entity}
        add("check_status",
            {**base, "verdict": result.verdict.value, "severity": result.severity.value}, 1)
        measured = _number(result.measured)
        if measured is not None:
            add("check_measured", {**base, "unit": result.unit}, measured)
        for bound, number in _threshold_bounds(result.threshold):
            add("check_threshold", {**base, "unit": result.unit, "bound": bound}, number)
    add("node_verdict", {"verdict": report.verdict.value, "profile": report.profile}, 1)
    for verdict, count in report.counts.items():
        add("report_results", {"verdict": verdict}, count)
    add("report_info", {"report_id": report.report_id, "profile": report.profile,
                        "backend": report.backend, "boot_id": report.boot_id or "",
                        "version": report.nodegate_version}, 1)
    add("report_timestamp_seconds", {}, report.finished_at.timestamp())
    add("report_duration_seconds", {}, report.duration_s)
    lines: list[str] = []
    for family, samples in families.items():
        if samples:
            name = PREFIX + family
            lines += [f"# HELP {name} {escape_help(_HELP[family])}", f"# TYPE {name} gauge"]
            lines += [f"{name}{_labels(labels)} {format_value(v)}"
                      for labels, v in samples.items()]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("seed", range(40))
def test_prometheus_matches_the_earlier_writer(seed: int) -> None:
    rng = random.Random(seed)
    report = _random_report(rng, seed)
    # the same check and entity twice: one series, the last value
    doubled = build([*report.results, *report.results[:3]], node=report.node,
                    profile=report.profile, level="quick", started_at=report.started_at,
                    duration_s=report.duration_s, backend=report.backend,
                    report_id=report.report_id, nodegate_version=report.nodegate_version)
    for each in (report, doubled):
        assert render_prometheus(each) == _reference_prometheus(each)


def test_the_summary_from_the_writers_digest_is_the_checked_summary() -> None:
    """The cron path hands the summary the digest to_dict just computed instead of
    computing and checking it again: the file must be the same."""
    from nodegate.report import fleet_summary
    from nodegate.report.model import dumps

    for report in (golden_report(), _random_report(random.Random(7), 7)):
        data = report.to_dict()
        text = dumps(data)
        assert fleet_summary.text_for(data, text, digest=data["digest"]) == \
            fleet_summary.text_for(data, text)
