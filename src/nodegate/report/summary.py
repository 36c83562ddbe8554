"""Human summary table of a node report: what an operator reads at the end of a run.

Problems come first (FAIL, ERROR, WARN, SKIP, then PASS) so on a 150-result node the one
NVLink that is down is on screen without scrolling; the last line is the verdict and exit code.
Plain text by default (it lands in logs and tickets); ANSI colour only when asked.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from nodegate.report.exitcodes import exit_code_for
from nodegate.report.model import NodeReport, coerce
from nodegate.results import CheckResult, Verdict
from nodegate.vocabulary import VERDICT_ORDER

_ANSI = {
    Verdict.FAIL: "\x1b[1;31m",
    Verdict.ERROR: "\x1b[1;35m",
    Verdict.WARN: "\x1b[33m",
    Verdict.SKIP: "\x1b[2m",
    Verdict.PASS: "\x1b[32m",
}
_RESET = "\x1b[0m"
_RANK = {verdict: index for index, verdict in enumerate(VERDICT_ORDER)}
#: Threshold keys that say where a number came from, not what it is; left out of the cell.
_THRESHOLD_METADATA = frozenset({"source", "unit", "name"})
_NOTE_KEYS = ("message", "reason", "error", "detail")
_COLUMNS = ("VERDICT", "CHECK", "ENTITY", "MEASURED", "THRESHOLD", "UNIT", "SEVERITY", "NOTE")


def format_threshold(threshold: Any) -> str:
    """``{"min": 335}`` -> ``>= 335``; ``{"max": 0}`` -> ``<= 0``; both -> ``10..20``.

    A threshold's ``source`` stays in the JSON and JUnit; in a table cell it is noise.
    """
    if isinstance(threshold, Mapping):
        threshold = {k: v for k, v in threshold.items() if k not in _THRESHOLD_METADATA}
        low, high = threshold.get("min"), threshold.get("max")
        if low is not None and high is not None and len(threshold) == 2:
            return f"{format_value(low)}..{format_value(high)}"
        if low is not None and len(threshold) == 1:
            return f">= {format_value(low)}"
        if high is not None and len(threshold) == 1:
            return f"<= {format_value(high)}"
        if "eq" in threshold and len(threshold) == 1:
            return f"== {format_value(threshold['eq'])}"
    return format_value(threshold)


def format_value(value: Any) -> str:
    """Short, stable text for a cell: 6 significant digits, ``-`` for nothing."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (int, str)):
        return str(value)
    return json.dumps(value, separators=(",", ":"), default=str, sort_keys=True)


def render_summary(
    report: NodeReport | Mapping[str, Any],
    *,
    color: bool = False,
    show_passed: bool = True,
    max_width: int = 48,
) -> str:
    """Aligned table, one line per result, problems first; counts and verdict at the end.

    ``show_passed=False`` hides PASS rows (the counts still include them), which is what a cron
    health check wants to log. Cells longer than ``max_width`` are cut with ``...``.
    """
    node_report = coerce(report)
    ordered = sorted(node_report.results, key=lambda result: _RANK[result.verdict])
    if not show_passed:
        ordered = [result for result in ordered if result.verdict is not Verdict.PASS]
    rows = [_row(result, max_width) for result in ordered]
    columns = list(_COLUMNS)
    if not any(row[-1] for row in rows):
        columns.pop()
        rows = [row[:-1] for row in rows]
    widths = [len(name) for name in columns]
    for row in rows:
        widths = [max(width, len(cell)) for width, cell in zip(widths, row, strict=True)]

    lines = [
        f"nodegate {node_report.level.value} report for {node_report.node} "
        f"(profile {node_report.profile}, backend {node_report.backend}, "
        f"{node_report.duration_s:.1f} s, {node_report.report_id})",
        "",
        _line(columns, widths),
        _line(["-" * width for width in widths], widths),
    ]
    for result, row in zip(ordered, rows, strict=True):
        lines.append(_line(row, widths, _ANSI[result.verdict] if color else ""))
    if not rows:
        lines.append("(no results to show)")
    lines.append("")
    counts = node_report.counts
    tally = ", ".join(f"{counts[verdict.value]} {verdict.value}" for verdict in VERDICT_ORDER)
    verdict = node_report.verdict
    verdict_text = verdict.value
    if color:
        verdict_text = f"{_ANSI[verdict]}{verdict_text}{_RESET}"
    code = int(exit_code_for(verdict))
    lines.append(
        f"{len(node_report.results)} results: {tally}. Node verdict: {verdict_text} (exit {code})"
    )
    return "\n".join(lines) + "\n"


def _row(result: CheckResult, max_width: int) -> list[str]:
    cells = [
        result.verdict.value,
        result.check,
        result.entity,
        format_value(result.measured),
        format_threshold(result.threshold),
        result.unit or "-",
        result.severity.value,
        _note(result),
    ]
    return [_cell(cell, max_width) for cell in cells]


def _note(result: CheckResult) -> str:
    for key in _NOTE_KEYS:
        value = result.evidence.get(key)
        if value:
            return str(value)
    return ""


def _cell(text: str, max_width: int) -> str:
    text = " ".join(text.split())  # newlines and tabs would break the alignment
    text = "".join(char if char.isprintable() else "?" for char in text)
    if len(text) > max_width:
        text = text[: max(1, max_width - 3)] + "..."
    return text


def _line(cells: list[str], widths: list[int], colour: str = "") -> str:
    padded = [cell.ljust(width) for cell, width in zip(cells, widths, strict=True)]
    if colour:
        padded[0] = f"{colour}{padded[0]}{_RESET}"
    return "  ".join(padded).rstrip()
