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
_ILLEGAL_CHARS = [*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0xFFFE, 0xFFFF]
_TEXT_ESCAPES = {ord("&"): "&amp;", ord("<"): "&lt;", ord(">"): "&gt;"}
_ATTR_ESCAPES = {**dict.fromkeys(_ILLEGAL_CHARS, "\ufffd"), **_TEXT_ESCAPES,
                 ord('"'): "&quot;", ord("\r"): "&#13;", ord("\n"): "&#10;", ord("\t"): "&#09;"}
#: Whether a string needs either table at all (a search is cheaper than a translate).
_ATTR_SPECIAL = re.compile("[\x00-\x1f&<>\"\ufffe\uffff]")
_TEXT_SPECIAL = re.compile("[&<>]")
_DECLARATION = '<?xml version="1.0" encoding="UTF-8"?>\n'
#: Verdicts whose testcase carries a child element (PASS carries none).
_OUTCOME_VERDICTS = frozenset({Verdict.FAIL, Verdict.ERROR, Verdict.SKIP, Verdict.WARN})


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
    """JUnit XML text (with declaration) for one report or several (one suite per node).

    Written as text, laid out as ElementTree's ``indent`` + ``tostring`` lay it out (two
    spaces a level, `` />`` for an empty element, the same escapes): the cron health check
    writes this file for ~800 results every few minutes, and building and serializing a
    tree of them cost more than reading the board.
    """
    lines: list[str] = []
    totals = [0, 0, 0, 0]
    total_time = 0.0
    for report in as_reports(reports):
        counts = _suite(report, lines)
        totals = [total + count for total, count in zip(totals, counts, strict=True)]
        total_time += report.duration_s
    tests, failures, errors, skipped = totals
    root = (f'<testsuites name="nodegate" tests="{tests}" failures="{failures}" '
            f'errors="{errors}" skipped="{skipped}" time="{_seconds(total_time)}"')
    if not lines:
        return f"{_DECLARATION}{root} />\n"
    return f"{_DECLARATION}{root}>\n{''.join(lines)}</testsuites>\n"


def write_junit(reports: ReportLike | Sequence[ReportLike], path: str | os.PathLike[str], *,
                sync_dir: bool = True) -> Path:
    """Render and write atomically (CI may collect the file while a run is finishing);
    ``sync_dir`` as ``atomic_write_text``'s."""
    return atomic_write_text(path, render_junit(reports), sync_dir=sync_dir)


def as_reports(reports: ReportLike | Sequence[ReportLike]) -> list[NodeReport]:
    """One report or a sequence of them, dicts validated, as report objects."""
    if isinstance(reports, (NodeReport, Mapping)):
        return [coerce(reports)]
    return [coerce(report) for report in reports]


def _suite(report: NodeReport, out: list[str]) -> tuple[int, int, int, int]:
    """Append one ``<testsuite>``'s lines; returns its tests, failures, errors, skipped."""
    counts = report.counts
    tally = (len(report.results), counts[Verdict.FAIL.value], counts[Verdict.ERROR.value],
             counts[Verdict.SKIP.value])
    out.append(
        f'  <testsuite name="{_attr(f"nodegate.{report.node}")}" id="{_attr(report.report_id)}" '
        f'hostname="{_attr(report.node)}" timestamp="{format_timestamp(report.started_at)}" '
        f'time="{_seconds(report.duration_s)}" tests="{tally[0]}" failures="{tally[1]}" '
        f'errors="{tally[2]}" skipped="{tally[3]}">\n    <properties>\n')
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
        out.append(f'      <property name="{_attr(name)}" value="{_attr(value)}" />\n')
    out.append("    </properties>\n")
    identities: dict[str, str] = {}  # card -> its rendered <properties> block
    for result in report.results:
        card = result.entity.split(".", 1)[0]
        block = identities.get(card)
        if block is None:
            block = identities[card] = _identity_block(report.identity_of(result.entity))
        out.append(_testcase(result, block))
    out.append("  </testsuite>\n")
    return tally


def _identity_block(identity: Mapping[str, str]) -> str:
    """A GPU entity's card identity as ``<property>`` entries, so a CI view of a failure
    names the physical card (serial) to pull; empty for entities that are no card."""
    if not identity:
        return ""
    rows = "".join(f'        <property name="{_attr(name)}" value="{_attr(value)}" />\n'
                   for name, value in identity.items())
    return f"      <properties>\n{rows}      </properties>\n"


def _testcase(result: CheckResult, identity_block: str) -> str:
    """One testcase; a passing one carries no message (nothing in it is read)."""
    head = (f'    <testcase classname="{_attr(check_group(result.check))}" '
            f'name="{_attr(result.test_id)}" time="{_seconds(_duration(result))}"')
    verdict = result.verdict
    if verdict not in _OUTCOME_VERDICTS:
        return f"{head}>\n{identity_block}    </testcase>\n" if identity_block else f"{head} />\n"
    message = _xml(result_message(result))
    if verdict is Verdict.WARN:
        child = f"      <system-out>{_text(message)}</system-out>\n"
    elif verdict is Verdict.SKIP:
        child = f'      <skipped message="{_attr(message)}" />\n'
    else:
        tag = "failure" if verdict is Verdict.FAIL else "error"
        detail = _xml(json.dumps(result.to_dict(), indent=2, default=str, sort_keys=True))
        child = (f'      <{tag} message="{_attr(message)}" type="{_attr(result.severity.value)}">'
                 f"{_text(detail)}</{tag}>\n")
    return f"{head}>\n{identity_block}{child}    </testcase>\n"


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


def _attr(text: str) -> str:
    """An attribute value: XML-illegal characters replaced, then escaped as ElementTree
    escapes attributes (``& < > "`` and CR, LF, TAB as character references)."""
    return text.translate(_ATTR_ESCAPES) if _ATTR_SPECIAL.search(text) else text


def _text(text: str) -> str:
    """Element text as ElementTree escapes it (``& < >``); illegal characters already gone."""
    return text.translate(_TEXT_ESCAPES) if _TEXT_SPECIAL.search(text) else text
