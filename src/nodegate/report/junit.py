"""JUnit XML from node reports, for CI systems and fleet dashboards that already read JUnit.

One ``<testsuite>`` per node report, one ``<testcase>`` per (check, entity), so a CI view shows
``nvlink_state[gpu3.link5]`` failing on ``node-a12`` instead of one opaque "battery failed".
The layout follows the common Jenkins/GitLab schema: FAIL -> ``<failure>``, ERROR -> ``<error>``,
SKIP -> ``<skipped>``; WARN passes (a warning must not fail a CI gate) but carries a
``<system-out>`` line so it is still visible.
"""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nodegate.report._atomic import atomic_write_text
from nodegate.report.model import NodeReport, coerce, format_timestamp
from nodegate.results import CheckResult, Verdict

ReportLike = NodeReport | Mapping[str, Any]

#: Characters XML 1.0 forbids even when escaped; a probe's raw stderr can contain them.
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_MESSAGE_EVIDENCE_CHARS = 400


def check_group(check: str) -> str:
    """The JUnit classname of a check: its subsystem prefix.

    ``nvlink.link_state`` -> ``nvlink``; ``nvlink_state`` -> ``nvlink``; a bare name is its own
    group. Groups match the validation/ module layout closely enough for CI trees to read well.
    """
    for separator in (".", "_"):
        if separator in check:
            head = check.split(separator, 1)[0]
            if head:
                return head
    return check


def result_message(result: CheckResult) -> str:
    """One line with everything needed to act on a result without opening the JSON."""
    unit = f" {result.unit}" if result.unit else ""
    parts = [
        f"{result.verdict.value} {result.test_id}",
        f"measured {_compact(result.measured)}{unit}",
        f"threshold {_compact(result.threshold)}{unit}",
        f"severity {result.severity.value}",
    ]
    if result.evidence:
        evidence = _compact(result.evidence)
        if len(evidence) > _MESSAGE_EVIDENCE_CHARS:
            evidence = evidence[: _MESSAGE_EVIDENCE_CHARS - 3] + "..."
        parts.append(f"evidence {evidence}")
    return "; ".join(parts)


def render_junit(reports: ReportLike | Sequence[ReportLike]) -> str:
    """JUnit XML text (with declaration) for one report or several (one suite per node)."""
    items = as_reports(reports)
    root = ET.Element("testsuites", name="nodegate")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    total_time = 0.0
    for report in items:
        suite = _suite(report)
        root.append(suite)
        for key in totals:
            totals[key] += int(suite.get(key, "0"))
        total_time += report.duration_s
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("time", _seconds(total_time))
    ET.indent(root, space="  ")
    body = ET.tostring(root, encoding="unicode")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + body + "\n"


def write_junit(reports: ReportLike | Sequence[ReportLike], path: str | os.PathLike[str]) -> Path:
    """Render and write atomically (CI may collect the file while a run is finishing)."""
    return atomic_write_text(path, render_junit(reports))


def as_reports(reports: ReportLike | Sequence[ReportLike]) -> list[NodeReport]:
    """One report or a sequence of them, dicts validated, as report objects."""
    if isinstance(reports, (NodeReport, Mapping)):
        return [coerce(reports)]
    return [coerce(report) for report in reports]


def _suite(report: NodeReport) -> ET.Element:
    counts = report.counts
    suite = ET.Element(
        "testsuite",
        name=_xml(f"nodegate.{report.node}"),
        id=_xml(report.report_id),
        hostname=_xml(report.node),
        timestamp=format_timestamp(report.started_at),
        time=_seconds(report.duration_s),
        tests=str(len(report.results)),
        failures=str(counts[Verdict.FAIL.value]),
        errors=str(counts[Verdict.ERROR.value]),
        skipped=str(counts[Verdict.SKIP.value]),
    )
    properties = ET.SubElement(suite, "properties")
    for name, value in (
        ("schema", report.schema),
        ("report_id", report.report_id),
        ("profile", report.profile),
        ("level", report.level.value),
        ("backend", report.backend),
        ("boot_id", report.boot_id or ""),
        ("nodegate_version", report.nodegate_version),
        ("verdict", report.verdict.value),
        *sorted(report.labels.items()),
    ):
        ET.SubElement(properties, "property", name=_xml(name), value=_xml(value))
    for result in report.results:
        suite.append(_testcase(result, report.identity_of(result.entity)))
    return suite


def _testcase(result: CheckResult, identity: Mapping[str, str] | None = None) -> ET.Element:
    """One testcase; a GPU entity's carries its card's identity as ``<property>`` entries,
    so a CI view of a failure names the physical card (serial) to pull."""
    case = ET.Element(
        "testcase",
        classname=_xml(check_group(result.check)),
        name=_xml(result.test_id),
        time=_seconds(_duration(result)),
    )
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


def _duration(result: CheckResult) -> float:
    value = result.evidence.get("duration_s", 0.0)
    return float(value) if isinstance(value, (int, float)) and value >= 0 else 0.0


def _seconds(value: float) -> str:
    return f"{value:.3f}"


def _compact(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), default=str, sort_keys=True)


def _xml(text: str) -> str:
    return _XML_ILLEGAL.sub("\ufffd", text)
