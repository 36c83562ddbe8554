"""Prometheus textfile for node_exporter's textfile collector, rendered from a node report.

The collector reads ``*.prom`` files from a directory on every scrape, so the file must be
replaced atomically (a half-written file makes the whole collector fail that scrape) and must
never hold the same series twice. Written by hand in the text exposition format rather than
through prometheus_client: the format is small and fixed, and the cron health check should not
import a client library to write a dozen lines.

Every series carries a ``level`` label so the cron ``quick`` run and an ``acceptance`` run can
keep separate textfiles without colliding on identical series.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from nodegate.report._atomic import atomic_write_text
from nodegate.report.model import NodeReport, coerce
from nodegate.results import Severity, Verdict

PREFIX = "nodegate_"
_LABEL_ESCAPES = {ord("\\"): "\\\\", ord('"'): '\\"', ord("\n"): "\\n"}
_LABEL_SPECIAL = re.compile('[\\\\"\n]')  # a search is cheaper than a translate

_HELP = {
    "check_status": "1 for the current verdict of a check on an entity.",
    "check_measured": "Numeric value a check measured on an entity (booleans as 0/1).",
    "check_threshold": "Numeric threshold a check judged against (bound is min, max or value).",
    "node_verdict": "1 for the node's overall verdict (the worst of its check results).",
    "report_results": "Number of check results per verdict in the last report.",
    "report_info": "Report metadata as labels; always 1.",
    "report_timestamp_seconds": "Unix time the last report finished.",
    "report_duration_seconds": "Wall-clock duration of the last validation run.",
}


def escape_label_value(value: str) -> str:
    """Exposition-format label escaping: backslash, double quote and newline."""
    return value.translate(_LABEL_ESCAPES) if _LABEL_SPECIAL.search(value) else value


def escape_help(text: str) -> str:
    """HELP text escaping: backslash and newline (quotes are literal there)."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    """Sample value text; integers without a trailing ``.0``, floats round-trip exactly."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(float(value))


def render_prometheus(report: NodeReport | Mapping[str, Any]) -> str:
    """The textfile contents for one node report (the collector runs on that node).

    Each family maps a sample's rendered label set to its value: the same labels twice keep
    the last value, never a duplicate series (escaping is reversible, so equal text is equal
    labels). Labels are rendered once per result, as text: the cron health check writes
    this file for ~800 results every few minutes.
    """
    node_report = coerce(report)
    level = f',level="{escape_label_value(node_report.level.value)}"}}'
    families: dict[str, dict[str, float]] = {name: {} for name in _HELP}
    _add_results(families, node_report, level)

    def add(family: str, labels: Mapping[str, str], value: float) -> None:
        body = ",".join(f'{key}="{escape_label_value(text)}"' for key, text in labels.items())
        families[family][f"{{{body}{level}" if body else "{" + level[1:]] = value

    add("node_verdict", {"verdict": node_report.verdict.value, "profile": node_report.profile}, 1)
    for verdict, count in node_report.counts.items():
        add("report_results", {"verdict": verdict}, count)
    add(
        "report_info",
        {
            "report_id": node_report.report_id,
            "profile": node_report.profile,
            "backend": node_report.backend,
            "boot_id": node_report.boot_id or "",
            "version": node_report.nodegate_version,
        },
        1,
    )
    add("report_timestamp_seconds", {}, node_report.finished_at.timestamp())
    add("report_duration_seconds", {}, node_report.duration_s)

    lines: list[str] = []
    for family, samples in families.items():
        if not samples:
            continue
        name = PREFIX + family
        lines.append(f"# HELP {name} {escape_help(_HELP[family])}")
        lines.append(f"# TYPE {name} gauge")
        lines.extend(f"{name}{labels} {format_value(v)}" for labels, v in samples.items())
    return "\n".join(lines) + "\n"


def _add_results(families: dict[str, dict[str, float]], report: NodeReport,
                 level: str) -> None:
    """Status, measured value and threshold bounds of every result, labels in the order
    check, entity, (verdict, severity | unit[, bound]), level."""
    status, measured, thresholds = (families["check_status"], families["check_measured"],
                                    families["check_threshold"])
    escape = escape_label_value
    for result in report.results:
        base = f'{{check="{escape(result.check)}",entity="{escape(result.entity)}"'
        status[f"{base}{_VERDICT_LABELS[result.verdict]}"
               f"{_SEVERITY_LABELS[result.severity]}{level}"] = 1
        number = _number(result.measured)
        bounds = _threshold_bounds(result.threshold)
        if number is None and not bounds:
            continue
        unit = f'{base},unit="{escape(result.unit)}"'
        if number is not None:
            measured[f"{unit}{level}"] = number
        for bound, value in bounds:
            thresholds[f'{unit},bound="{bound}"{level}'] = value


#: Each verdict's and severity's label, rendered once (not escaped again for every result).
_VERDICT_LABELS = {v: f',verdict="{escape_label_value(v.value)}"' for v in Verdict}
_SEVERITY_LABELS = {s: f',severity="{escape_label_value(s.value)}"' for s in Severity}


def render_gauges(families: Iterable[tuple[str, str, Iterable[tuple[Mapping[str, str], float]]]]
                  ) -> str:
    """Gauge families ``(name without prefix, help, [(labels, value), ...])`` as a textfile;
    for writers other than the report (the gate's drain budget)."""
    lines: list[str] = []
    for family, help_text, samples in families:
        rows = list(samples)
        if not rows:
            continue
        name = PREFIX + family
        lines.append(f"# HELP {name} {escape_help(help_text)}")
        lines.append(f"# TYPE {name} gauge")
        lines.extend(f"{name}{_labels(labels.items())} {format_value(v)}" for labels, v in rows)
    return "\n".join(lines) + "\n"


def write_prometheus(report: NodeReport | Mapping[str, Any], path: str | os.PathLike[str]) -> Path:
    """Render and replace ``path`` atomically, world-readable (node_exporter is another user).

    ``path`` should end in ``.prom`` and sit in the collector's ``--collector.textfile.directory``.
    """
    return atomic_write_text(path, render_prometheus(report), mode=0o644)


def _labels(labels: Iterable[tuple[str, str]]) -> str:
    body = ",".join(f'{key}="{escape_label_value(value)}"' for key, value in labels)
    return "{" + body + "}" if body else ""


def _number(value: Any) -> float | None:
    """A finite float from a measured value, or None where it is not a number."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def _threshold_bounds(threshold: Any) -> list[tuple[str, float]]:
    """Numeric bounds from ``335``, ``{"min": 335}``, ``{"max": 0}`` or ``{"min":..,"max":..}``."""
    if isinstance(threshold, bool):
        return []
    number = _number(threshold)
    if number is not None:
        return [("value", number)]
    bounds: list[tuple[str, float]] = []
    if isinstance(threshold, Mapping):
        for bound in ("min", "max"):
            value = threshold.get(bound)
            number = None if isinstance(value, bool) else _number(value)
            if number is not None:
                bounds.append((bound, number))
    return bounds
