"""The fleet HTML report: one self-contained file, inline SVG drawn here, a few lines of JS.

No CDN, no external font or script: the file must open on an air-gapped bastion and be
attachable to a ticket. Plots are drawn server-side as SVG (tooltips via ``<title>``), so the
page needs no JS to show them; the script only filters the node table.

The page reads top-down in the order a person on call needs it: what failed (the failing
nodes with their checks and the reasons their reports give, the checks failing across the
fleet, files that could not be read, and the plots of the first failing nodes), then what
moved (outliers, the pair matrix of a cluster check, trends), then the spread of the other
metrics, then every node. A metric whose value is the same on every node of a profile has
nothing to plot: it is left out, and the page says how many were and names them.

Per-node plots (P2P heatmap, telemetry under load) need the full reports, so they are drawn
for at most ``plots`` nodes: failing nodes first, then outliers, then the rest by name.
"""

from __future__ import annotations

import datetime as dt
import itertools
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

from nodegate.errors import ConfigError
from nodegate.fileio import read_bytes
from nodegate.fleet.aggregate import MIN_NODES, FleetView, MetricView, NodeView
from nodegate.fleet.pair_records import PairMatrix, pair_matrix
from nodegate.fleet.render import card_text, failing_text, full_reads_text, swap_text
from nodegate.report.model import decode
from nodegate.vocabulary import FAILING, LEVELS

#: Failing nodes whose plots are drawn in "What failed" (the rest under "Per-node plots").
FAULT_PLOTS = 4
#: Failing nodes listed one by one, and those of them with the reasons their reports give
#: (each reason costs decoding the node's full report).
FAILED_ROWS = 500
REASON_NODES = 50

VERDICT_COLORS = {"PASS": "#1a7f37", "WARN": "#bf8700", "FAIL": "#cf222e",
                  "ERROR": "#8250df", "SKIP": "#6e7781"}
LINE_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
               "#7f7f7f", "#bcbd22", "#17becf")

CSS = """
body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px;color:#1f2328;
background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid
#d0d7de}h3{font-size:15px;margin:16px 0 6px}
table{border-collapse:collapse;margin:6px 0}td,th{padding:3px 8px;border-bottom:1px solid #eaeef2;
text-align:left;vertical-align:top}th{background:#f6f8fa}
.v{color:#fff;border-radius:4px;padding:1px 6px;font-weight:600;font-size:12px}
.muted{color:#656d76}.plots{display:flex;flex-wrap:wrap;gap:12px}
.card{border:1px solid #d0d7de;border-radius:6px;padding:8px}
svg text{font:11px system-ui,sans-serif;fill:#1f2328}
#filter{padding:4px 8px;width:280px;margin:4px 0}
"""

SCRIPT = """
(function () {
  var box = document.getElementById('filter');
  var rows = Array.prototype.slice.call(document.querySelectorAll('#nodes tbody tr'));
  function apply() {
    var q = box.value.trim().toLowerCase();
    var shown = 0;
    rows.forEach(function (row) {
      var hit = !q || row.textContent.toLowerCase().indexOf(q) >= 0;
      row.style.display = hit ? '' : 'none';
      if (hit) { shown += 1; }
    });
    document.getElementById('shown').textContent = String(shown);
  }
  box.addEventListener('input', apply);
  apply();
  document.body.setAttribute('data-svg-count',
    String(document.querySelectorAll('svg').length));
  document.body.setAttribute('data-ready', '1');
})();
"""


def _badge(verdict: str) -> str:
    color = VERDICT_COLORS.get(verdict, "#6e7781")
    return f'<span class="v" style="background:{color}">{escape(verdict)}</span>'


def _num(value: float) -> str:
    return f"{value:.4g}"


def _cell_label(value: float) -> str:
    """A heat map cell's figure in its few pixels: whole numbers from 10 up, two significant
    digits below (a pair at 0.3 GB/s must not read 0)."""
    return f"{value:.0f}" if abs(value) >= 10 else f"{value:.2g}"


# --- SVG primitives ---------------------------------------------------------------------------


def heatmap_svg(title: str, entities: Sequence[str], values: Sequence[Sequence[Any]],
                unit: str, cell: int = 34) -> str:
    """An entity-by-entity matrix; low cells red, high green, missing grey (the diagonal);
    ``cell``: its side in pixels (wider for names longer than ``gpu7``)."""
    size = len(entities)
    # room for the row names (52 px holds ``gpu15``; node names may be longer)
    left, top = max(52, 7 * max((len(name) for name in entities), default=0) + 12), 52
    numbers = [v for row in values for v in row if isinstance(v, (int, float))]
    low = min(numbers) if numbers else 0.0
    high = max(numbers) if numbers else 1.0
    heading = f"{title} ({unit})"
    # wide enough for the heading too (about 8 px a character at the page's font size)
    width, height = max(left + cell * size + 10, 8 * len(heading) + 8), top + cell * size + 34
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'role="img" aria-label="{escape(title)}">',
             f'<text x="4" y="14" font-weight="600">{escape(heading)}</text>',
             f'<text x="4" y="30" class="muted">row -> column; range {_num(low)} to '
             f'{_num(high)}</text>']
    for index, name in enumerate(entities):
        x = left + index * cell + cell / 2
        parts.append(f'<text x="{x:.0f}" y="{top - 4}" text-anchor="middle">'
                     f'{escape(name)}</text>')
        parts.append(f'<text x="{left - 4}" y="{top + index * cell + cell / 2 + 4:.0f}" '
                     f'text-anchor="end">{escape(name)}</text>')
    for i, row in enumerate(values):
        for j, value in enumerate(row):
            x, y = left + j * cell, top + i * cell
            if isinstance(value, (int, float)) and math.isfinite(value):
                color = _ramp((value - low) / (high - low) if high > low else 0.5)
                label = _num(value)
            else:
                color, label = "#d0d7de", "n/a"
            tip = f"{entities[i]} -> {entities[j]}: {label} {unit}"
            parts.append(f'<rect x="{x}" y="{y}" width="{cell - 1}" height="{cell - 1}" '
                         f'fill="{color}"><title>{escape(tip)}</title></rect>')
            if label != "n/a":
                parts.append(f'<text x="{x + cell / 2:.0f}" y="{y + cell / 2 + 4:.0f}" '
                             f'text-anchor="middle" font-size="9">{escape(_cell_label(value))}'
                             f'</text>')
    parts.append("</svg>")
    return "".join(parts)


def _ramp(fraction: float) -> str:
    """Red (0) -> yellow (0.5) -> green (1)."""
    fraction = min(1.0, max(0.0, fraction))
    stops = ((0.0, (215, 48, 39)), (0.5, (254, 224, 139)), (1.0, (26, 152, 80)))
    for (f0, c0), (f1, c1) in itertools.pairwise(stops):
        if fraction <= f1:
            t = (fraction - f0) / (f1 - f0)
            rgb = tuple(round(a + (b - a) * t) for a, b in zip(c0, c1, strict=True))
            return "#{:02x}{:02x}{:02x}".format(*rgb)
    return "#1a9850"


@dataclass(frozen=True)
class _Frame:
    """A chart's plot area and the data ranges it maps onto it."""

    left: float
    top: float
    plot_w: float
    plot_h: float
    t0: float
    t1: float
    v0: float
    v1: float

    def sx(self, t: float) -> float:
        return self.left + (t - self.t0) / (self.t1 - self.t0) * self.plot_w

    def sy(self, v: float) -> float:
        return self.top + (1 - (v - self.v0) / (self.v1 - self.v0)) * self.plot_h


def _chart_points(lines: Mapping[str, Sequence[Sequence[Any]]]) -> list[tuple[float, float]]:
    """Every numeric (time, value) sample of every line; nulls and malformed points left out."""
    return [(float(p[0]), float(p[1])) for pts in lines.values() for p in pts
            if len(p) == 2 and isinstance(p[1], (int, float)) and isinstance(p[0], (int, float))]


def _chart_ranges(points: Sequence[tuple[float, float]]) -> tuple[float, float, float, float]:
    """Time and value ranges, widened so a flat line or one instant still has a scale, and
    values padded 5 % so the extremes do not touch the frame."""
    t0, t1 = min(p[0] for p in points), max(p[0] for p in points)
    v0, v1 = min(p[1] for p in points), max(p[1] for p in points)
    if t1 == t0:
        t1 = t0 + 1
    if v1 == v0:
        v0, v1 = v0 - 1, v1 + 1
    pad = (v1 - v0) * 0.05
    return t0, t1, v0 - pad, v1 + pad


def _chart_axes(frame: _Frame, unit: str, height: int, time_unit: str = "s") -> list[str]:
    """Value ticks at bottom, middle and top; the time span and the unit below the plot."""
    parts = []
    for fraction in (0.0, 0.5, 1.0):
        value = frame.v0 + (frame.v1 - frame.v0) * fraction
        parts.append(f'<text x="{frame.left - 4}" y="{frame.sy(value) + 4:.1f}" '
                     f'text-anchor="end">{_num(value)}</text>')
    right = frame.left + frame.plot_w
    parts.append(f'<text x="{frame.left}" y="{height - 8}">{_num(frame.t0)} {time_unit}</text>')
    parts.append(f'<text x="{right}" y="{height - 8}" text-anchor="end">'
                 f'{_num(frame.t1)} {time_unit}</text>')
    parts.append(f'<text x="{frame.left + frame.plot_w / 2:.0f}" y="{height - 8}" '
                 f'text-anchor="middle" class="muted">{escape(unit)}</text>')
    return parts


def _line_segments(frame: _Frame, pts: Sequence[Sequence[Any]]) -> list[list[str]]:
    """A line's points in plot coordinates, split where a sample is missing (a gap)."""
    # ``frame.sx``/``sy`` inlined, the same arithmetic: 60 points x 8 lines x 3 charts a node
    left, t0, t_span, plot_w = frame.left, frame.t0, frame.t1 - frame.t0, frame.plot_w
    top, v0, v_span, plot_h = frame.top, frame.v0, frame.v1 - frame.v0, frame.plot_h
    segments: list[list[str]] = [[]]
    current = segments[-1]
    for point in pts:
        if len(point) != 2 or not isinstance(point[1], (int, float)):
            if current:
                current = []
                segments.append(current)
            continue
        x = left + (float(point[0]) - t0) / t_span * plot_w
        y = top + (1 - (float(point[1]) - v0) / v_span) * plot_h
        current.append(f"{x:.1f},{y:.1f}")
    return segments


def _chart_line(frame: _Frame, index: int, name: str, pts: Sequence[Sequence[Any]]) -> list[str]:
    """One entity's polylines and its legend entry."""
    color = LINE_COLORS[index % len(LINE_COLORS)]
    parts = [f'<polyline fill="none" stroke="{color}" stroke-width="1.5" '
             f'points="{" ".join(segment)}"><title>{escape(name)}</title></polyline>'
             for segment in _line_segments(frame, pts) if len(segment) > 1]
    y = frame.top + 10 + index * 13
    right = frame.left + frame.plot_w
    parts.append(f'<rect x="{right + 8}" y="{y - 8}" width="10" height="3" '
                 f'fill="{color}"/><text x="{right + 22}" y="{y - 3}">'
                 f'{escape(name)}</text>')
    return parts


def line_chart_svg(title: str, lines: Mapping[str, Sequence[Sequence[Any]]], unit: str,
                   width: int = 420, height: int = 220, *, time_unit: str = "s") -> str:
    """Time series, one line per entity; gaps where a sample was missed (null)."""
    left, right, top, bottom = 52, 90, 24, 30
    points = _chart_points(lines)
    if not points:
        return ""
    frame = _Frame(left, top, width - left - right, height - top - bottom,
                   *_chart_ranges(points))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'role="img" aria-label="{escape(title)}">',
             f'<text x="4" y="14" font-weight="600">{escape(title)}</text>',
             f'<rect x="{left}" y="{top}" width="{frame.plot_w}" height="{frame.plot_h}" '
             f'fill="#f6f8fa" stroke="#d0d7de"/>']
    parts.extend(_chart_axes(frame, unit, height, time_unit))
    for index, (name, pts) in enumerate(lines.items()):
        parts.extend(_chart_line(frame, index, name, pts))
    parts.append("</svg>")
    return "".join(parts)


def distribution_svg(metric: MetricView, margin_pct: float, width: int = 520,
                     height: int = 130) -> str:
    """Histogram of each node's worst value (the nodes of one profile), with their median and
    the outlier margin; the title names the metric and the profile."""
    values = [value for _, value, _ in metric.values]
    if not values:
        return ""
    low, high = min(values), max(values)
    median = metric.stats["median"]
    bound = median * (1 - margin_pct / 100) if metric.direction == "higher" else (
        median * (1 + margin_pct / 100))
    if median != 0 and len(values) >= MIN_NODES:
        low, high = min(low, bound), max(high, bound)
    if high == low:
        low, high = low - 1, high + 1
    bins = 40
    counts = [0] * bins
    for value in values:
        index = min(bins - 1, int((value - low) / (high - low) * bins))
        counts[index] += 1
    left, top, plot_w, plot_h = 10, 22, width - 20, height - 52
    peak = max(counts)
    bar_w = plot_w / bins
    outlier_nodes = {o.node for o in metric.outliers}
    name = f"{metric.key}, {metric.profile}"
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'role="img" aria-label="{escape(name)} across nodes">',
             f'<text x="4" y="14" font-weight="600">{escape(name)} '
             f'({escape(metric.unit) or "no unit"}), {len(values)} nodes, '
             f'{len(outlier_nodes)} outlier nodes</text>']

    def sx(value: float) -> float:
        return left + (value - low) / (high - low) * plot_w

    for index, count in enumerate(counts):
        if not count:
            continue
        bar_h = max(1.0, count / peak * plot_h)
        start = low + (high - low) * index / bins
        end = start + (high - low) / bins
        bad = (end <= bound) if metric.direction == "higher" else (start >= bound)
        color = "#cf222e" if bad and metric.outliers else "#0969da"
        parts.append(f'<rect x="{left + index * bar_w:.1f}" y="{top + plot_h - bar_h:.1f}" '
                     f'width="{max(1.0, bar_w - 1):.1f}" height="{bar_h:.1f}" fill="{color}">'
                     f'<title>{_num(start)} to {_num(end)}: {count} nodes</title></rect>')
    marks = [(median, "median", "#1f2328", top + plot_h + 12)]
    if median != 0 and len(values) >= MIN_NODES:  # the margin: only where outliers are sought
        marks.append((bound, f"{margin_pct:g}% margin", "#cf222e", top + 10))
    for value, label, color, label_y in marks:
        x = sx(value)
        anchor = "start" if x < 80 else "end" if x > width - 80 else "middle"
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + plot_h}" '
                     f'stroke="{color}" stroke-dasharray="3,2"/>')
        parts.append(f'<text x="{x:.1f}" y="{label_y}" text-anchor="{anchor}" '
                     f'fill="{color}">{escape(label)} {_num(value)}</text>')
    parts.append(f'<text x="{left}" y="{height - 6}">{_num(low)}</text>')
    parts.append(f'<text x="{left + plot_w}" y="{height - 6}" text-anchor="end">'
                 f'{_num(high)}</text>')
    parts.append("</svg>")
    return "".join(parts)


# --- the page -----------------------------------------------------------------------------------


class _Reports:
    """Full reports decoded for the page, each at most once (the plots of a node and the
    reasons of its failing checks come from the same files)."""

    def __init__(self, view: FleetView) -> None:
        self.root = view.root
        self._decoded: dict[str, dict[str, Any] | None] = {}

    def get(self, rel: str) -> dict[str, Any] | None:
        if rel not in self._decoded:
            try:
                data = decode(read_bytes(self.root / rel, kind="report"))
            except (OSError, ValueError, ConfigError):
                data = None
            self._decoded[rel] = data if isinstance(data, dict) else None
        return self._decoded[rel]

    def newest_with(self, node: NodeView, key: str) -> dict[str, Any] | None:
        """The newest report of ``node`` with a non-empty ``key`` (series or matrices)."""
        for summary in reversed(node.history):
            data = self.get(summary["path"])
            if data is not None and data.get(key):
                return data
        return None


def _load_full(view: FleetView, node: NodeView, key: str,
               reports: _Reports | None = None) -> dict[str, Any] | None:
    """The newest report of ``node`` with a non-empty ``key`` (series or matrices)."""
    return (reports or _Reports(view)).newest_with(node, key)


def _plot_order(view: FleetView, limit: int) -> list[NodeView]:
    outliers = {o.node for m in view.metrics for o in m.outliers}
    ranked = sorted(view.nodes, key=lambda n: (n.verdict not in ("FAIL", "ERROR"),
                                               n.node not in outliers, n.node))
    return ranked[:limit]


def _node_section(view: FleetView, node: NodeView, reports: _Reports | None = None) -> str:
    reports = reports or _Reports(view)
    cards = [*_matrix_cards(view, node, reports), *_series_cards(view, node, reports)]
    parts = [f'<h3 id="node-{escape(node.node)}">{escape(node.node)} '
             f'{_badge(node.verdict)}</h3><div class="plots">', *cards]
    if not cards:
        parts.append('<p class="muted">no matrices or series in this node\'s reports</p>')
    parts.append("</div>")
    return "".join(parts)


def _matrix_cards(view: FleetView, node: NodeView, reports: _Reports | None = None
                  ) -> list[str]:
    """A heatmap card per matrix (P2P bandwidth) of the node's newest report that has any."""
    with_matrix = _load_full(view, node, "matrices", reports)
    if not with_matrix:
        return []
    return ['<div class="card">' + heatmap_svg(
                name, matrix["entities"], matrix["values"], str(matrix.get("unit", "")))
            + "</div>"
            for name, matrix in sorted(with_matrix["matrices"].items())
            if isinstance(matrix, dict) and matrix.get("entities")]


def _series_cards(view: FleetView, node: NodeView, reports: _Reports | None = None
                  ) -> list[str]:
    """A line chart card per series set and metric of the node's newest report with series:
    the report stores entity -> metric -> points, a chart wants metric -> entity -> points."""
    with_series = _load_full(view, node, "series", reports)
    if not with_series:
        return []
    cards = []
    for set_name, entities in sorted(with_series["series"].items()):
        metrics: dict[str, dict[str, Any]] = {}
        for entity, by_metric in entities.items():
            for metric, points in by_metric.items():
                metrics.setdefault(metric, {})[entity] = points
        for metric, lines in sorted(metrics.items()):
            svg = line_chart_svg(f"{set_name}: {metric}", lines, _unit_of(metric))
            if svg:
                cards.append(f'<div class="card">{svg}</div>')
    return cards


def _unit_of(metric: str) -> str:
    suffixes = {"_w": "W", "_c": "degrees C", "_mhz": "MHz", "_bytes": "bytes", "_pct": "%",
                "_gbps": "GB/s"}
    for suffix, unit in suffixes.items():
        if metric.endswith(suffix):
            return unit
    return ""


def pair_matrix_section(matrix: PairMatrix | None) -> list[str]:
    """The pair matrix under "What moved": nothing until a cluster check has produced one
    (no placeholder data is ever drawn)."""
    if matrix is None or not matrix.nodes:
        return []
    out = ["<h3 id=\"pairs\">Pair matrix</h3>"]
    if matrix.named:
        out.append(f"<p>Named by the localisation: "
                   f"{escape(', '.join(matrix.named))}</p>")
    widest = max(len(name) for name in matrix.nodes)
    out.append('<div class="card">' + heatmap_svg(matrix.title, list(matrix.nodes),
                                                  [list(row) for row in matrix.values],
                                                  matrix.unit, cell=max(34, 7 * widest + 10))
               + "</div>")
    return out


def render_html(view: FleetView, *, plots: int = 50, history: int = 20,
                extra: Sequence[str] = (), pairs: PairMatrix | None = None) -> str:
    """The whole page as one string: what failed, what moved (outliers; then ``pairs``, by
    default the pair results of a cluster check in the reports, ``pair_records.pair_matrix``;
    then ``extra``: the trends, ``trends_html.section``), the other metrics, every node, then
    the per-node plots."""
    ordered = sorted(view.nodes, key=lambda n: (n.verdict not in FAILING, n.node))
    reports = _Reports(view)
    if pairs is None:
        pairs = pair_matrix(view, reports.get)
    chosen = _plot_order(view, plots)
    early = [node for node in chosen if node.verdict in FAILING][:FAULT_PLOTS]
    late = [node for node in chosen if node not in early]
    out = [*_page_head(view), *_failed(view, ordered, reports, early),
           *_moved(view, extra, pairs), *_other_metrics(view),
           *_nodes_table(ordered, history), *_cards_table(view, ordered),
           *_plots(view, late, reports, len(early)),
           f"<script>{SCRIPT}</script></body></html>\n"]
    return "".join(out)


def _check_name(item: str) -> str:
    """A failing item of ``NodeView.failing`` as the check it counts under:
    ``standard: nvlink_state[gpu3.link5]`` -> ``nvlink_state``; an unreadable file or two
    machines under one name as that."""
    if item.startswith("unreadable report "):
        return "unreadable report"
    if item.startswith("two machines report as "):
        return "two machines report as one node"
    level, _, rest = item.partition(": ")
    if rest and level in LEVELS:
        item = rest
    return item.split("[", 1)[0]


def _reasons(node: NodeView, reports: _Reports) -> list[str]:
    """What the node's current failing reports say of each failing result (message, or
    measured against threshold), from the full reports; empty when none can be read."""
    out: list[str] = []
    for summary in node.current():
        if summary["verdict"] not in FAILING:
            continue
        data = reports.get(summary["path"])
        results = data.get("results") if data else None
        if not isinstance(results, list):
            continue
        for result in results:
            if not isinstance(result, dict) or result.get("verdict") not in FAILING:
                continue
            evidence = result.get("evidence")
            message = evidence.get("message") if isinstance(evidence, dict) else None
            if not isinstance(message, str) or not message:
                message = (f"measured {result.get('measured')!s} {result.get('unit') or ''}, "
                           f"threshold {result.get('threshold')!s}").replace(" ,", ",")
            out.append(f"{result.get('check')}[{result.get('entity')}]: {message}")
    return out


def _failed(view: FleetView, ordered: Sequence[NodeView], reports: _Reports,
            plotted: Sequence[NodeView]) -> list[str]:
    """What failed: the checks failing across the fleet, each failing node with its checks,
    the reasons its reports give and its failing cards, the files that could not be read,
    and the plots of the first failing nodes."""
    failing = [node for node in ordered if node.verdict in FAILING]
    if not failing and not view.unreadable:
        return ["<h2 id=\"failed\">What failed</h2><p>No node fails.</p>"]
    out = [f"<h2 id=\"failed\">What failed</h2><p>{len(failing)} of {len(view.nodes)} "
           "nodes FAIL or ERROR.</p>"]
    out += _failing_checks(failing)
    shown = {node.node for node in plotted}
    out.append('<table id="failing"><thead><tr><th>node</th><th>verdict</th>'
               "<th>failing checks and why</th><th>cards</th></tr></thead><tbody>")
    for index, node in enumerate(failing[:FAILED_ROWS]):
        reasons = _reasons(node, reports) if index < REASON_NODES else []
        items, total = node.failing()
        lines = reasons[:10] or items[:10]
        more = max(len(reasons), total) - len(lines)
        text = "<br>".join(escape(line) for line in lines) + (
            f"<br><span class=\"muted\">+{more} more</span>" if more > 0 else "")
        cards = "<br>".join(f"{escape(entity)}: {escape(card_text(ident))}"
                            for entity, ident, _ in node.failing_cards())
        name = escape(node.node)
        link = f'<a href="#node-{name}">{name}</a>' if node.node in shown else name
        out.append(f"<tr><td>{link}</td><td>{_badge(node.verdict)}</td><td>{text}</td>"
                   f"<td>{cards}</td></tr>")
    out.append("</tbody></table>")
    if len(failing) > FAILED_ROWS:
        out.append(f'<p class="muted">and {len(failing) - FAILED_ROWS} more failing nodes: '
                   "see the node table.</p>")
    out += _unreadable(view)
    if plotted:
        count = len(plotted)
        out.append(f"<h3>Plots of {'the first ' if count < len(failing) else ''}{count} "
                   f"failing node{'s' if count > 1 else ''}</h3>")
        out += [_node_section(view, node, reports) for node in plotted]
    return out


def _failing_checks(failing: Sequence[NodeView]) -> list[str]:
    """Each failing check with how many nodes fail it and the first of them, most first."""
    by_check: dict[str, list[str]] = {}
    for node in failing:
        items, _ = node.failing()
        for check in dict.fromkeys(_check_name(item) for item in items):
            by_check.setdefault(check, []).append(node.node)
    if not by_check:
        return []
    rows = sorted(by_check.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    out = ['<table id="checks"><thead><tr><th>failing check</th><th>nodes</th>'
           "<th>first nodes</th></tr></thead><tbody>"]
    for check, nodes in rows[:100]:
        out.append(f"<tr><td>{escape(check)}</td><td>{len(nodes)}</td>"
                   f"<td>{escape(', '.join(nodes[:8]))}</td></tr>")
    out.append("</tbody></table>")
    return out


def _moved(view: FleetView, extra: Sequence[str], pairs: PairMatrix | None) -> list[str]:
    """What moved: metrics with outliers (their spread, then the outlier table), the pair
    matrix (a failing pair names a node to drain now), the trends (``extra``)."""
    with_outliers = [metric for metric in view.metrics if metric.outliers]
    out = [f"<h2 id=\"moved\">What moved</h2><p class=\"muted\">Outliers: nodes worse than "
           f"the median of their profile's nodes by more than {view.margin_pct:g}% (each "
           "node's worst entity per metric).</p>"]
    out += [f'<p class="muted">{escape(note)}</p>' for note in view.notes]
    if with_outliers:
        out.append('<div class="plots">')
        out += [f'<div class="card">{svg}</div>' for svg in
                (distribution_svg(metric, view.margin_pct) for metric in with_outliers) if svg]
        out.append("</div>")
    else:
        out.append("<p>No outliers.</p>")
    return out + _outliers_table(view) + pair_matrix_section(pairs) + list(extra)


def _other_metrics(view: FleetView) -> list[str]:
    """The spread of every other metric with something to show; how many were left out
    (the same value on every node) and which."""
    rest = [metric for metric in view.metrics if not metric.outliers]
    shown = [metric for metric in rest if not metric.flat]
    flat = [metric for metric in rest if metric.flat]
    if not rest:
        return []
    out = ["<h2 id=\"metrics\">Other metrics</h2>"]
    if flat:
        names = ", ".join(f"{m.key} = {_num(m.stats['min'])} {m.unit}".rstrip()
                          + (f" ({m.profile})" if len({x.profile for x in flat}) > 1 else "")
                          for m in flat)
        out.append(f'<p class="muted" id="left-out">{len(flat)} of {len(view.metrics)} '
                   f"metrics left out: the same value on every node ({escape(names)}).</p>")
    if shown:
        out.append('<div class="plots">')
        out += [f'<div class="card">{svg}</div>' for svg in
                (distribution_svg(metric, view.margin_pct) for metric in shown) if svg]
        out.append("</div>")
    return out


def _page_head(view: FleetView) -> list[str]:
    """Document head, title and the verdict counts."""
    counts = view.verdicts()
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    return ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>nodegate fleet report: {escape(str(view.root))}</title>",
            f"<style>{CSS}</style></head><body>",
            f"<h1>nodegate fleet report</h1><p class=\"muted\">{escape(str(view.root))} - "
            f"{len(view.nodes)} nodes, {view.n_reports} reports, generated {escape(now)}"
            + (f"; {escape(full_reads_text(view))}" if view.full_reads else "") + "</p>",
            "<p>" + " ".join(f"{_badge(v)} {counts[v]}" for v in
                             ("FAIL", "ERROR", "WARN", "SKIP", "PASS") if counts.get(v)) + "</p>"]


def _nodes_table(ordered: Sequence[NodeView], history: int) -> list[str]:
    """The filterable node table: verdict, latest report, failing checks, history dots."""
    out = ['<h2>Nodes</h2><input id="filter" type="search" placeholder="filter: node, '
           'verdict, check" aria-label="filter nodes"> <span class="muted"><span '
           'id="shown"></span> shown</span>',
           '<table id="nodes"><thead><tr><th>node</th><th>verdict</th><th>latest</th>'
           '<th>finished</th><th>failing checks</th><th>history</th></tr></thead><tbody>']
    for node in ordered:
        latest = node.latest
        failing = failing_text(node, limit=5)
        dots = "".join(
            f'<span title="{escape(s["finished_at"])} {escape(s["level"])} '
            f'{escape(s["verdict"])}" style="color:{VERDICT_COLORS.get(s["verdict"], "#999")}">'
            "&#9632;</span>" for s in node.history[-history:])
        out.append(f"<tr><td>{escape(node.node)}</td><td>{_badge(node.verdict)}</td>"
                   f"<td>{escape(latest['level'])}</td><td>{escape(latest['finished_at'])}</td>"
                   f"<td>{escape(failing)}</td><td>{dots}</td></tr>")
    out.append("</tbody></table>")
    return out


def _cards_table(view: FleetView, ordered: Sequence[NodeView]) -> list[str]:
    """Failing GPUs by card identity and card swaps; nothing when there are neither."""
    cards = [(node, card) for node in ordered for card in node.failing_cards()]
    swaps = [(node, swap) for node in view.nodes for swap in node.swaps()]
    if not (cards or swaps):
        return []
    out = ["<h2>Cards</h2><table><thead><tr><th>node</th><th>GPU</th><th>what</th>"
           "</tr></thead><tbody>"]
    for node, (entity, identity, items) in cards:
        out.append(f"<tr><td>{escape(node.node)}</td><td>{escape(entity)}</td><td>failing "
                   f"({escape(card_text(identity))}): {escape(', '.join(items[:5]))}"
                   "</td></tr>")
    for node, swap in swaps:
        out.append(f"<tr><td>{escape(node.node)}</td><td>{escape(swap.entity)}</td>"
                   f"<td>{escape(swap_text(swap))}</td></tr>")
    out.append("</tbody></table>")
    return out


def _outliers_table(view: FleetView) -> list[str]:
    """The first 500 outliers with their deviation from the median; nothing when none."""
    rows = [(m, o) for m in view.metrics for o in m.outliers]
    if not rows:
        return []
    out = ["<h3>Outliers</h3><table><thead><tr><th>node</th><th>profile</th>"
           "<th>metric</th><th>entity</th><th>value</th><th>vs profile median</th></tr>"
           "</thead><tbody>"]
    for metric, outlier in rows[:500]:
        out.append(f"<tr><td>{escape(outlier.node)}</td><td>{escape(outlier.profile)}</td>"
                   f"<td>{escape(metric.key)}</td>"
                   f"<td>{escape(outlier.entity)}</td><td>{_num(outlier.value)} "
                   f"{escape(metric.unit)}</td><td>{outlier.deviation_pct:+.1f}% "
                   f"(median {_num(metric.stats['median'])})</td></tr>")
    out.append("</tbody></table>")
    return out


def _plots(view: FleetView, chosen: Sequence[NodeView], reports: _Reports,
           earlier: int = 0) -> list[str]:
    """Per-node plot sections of ``chosen`` (failing and outlier nodes first; ``earlier``:
    how many failing nodes' plots "What failed" drew already)."""
    if not chosen:
        return []
    above = f", {earlier} more under What failed" if earlier else ""
    return [f"<h2>Per-node plots</h2><p class=\"muted\">P2P matrix and telemetry "
            f"under load for {len(chosen)} of {len(view.nodes)} nodes (failing and "
            f"outlier nodes first{above}).</p>",
            *(_node_section(view, node, reports) for node in chosen)]


def _unreadable(view: FleetView) -> list[str]:
    """Reports that could not be read, with the reason; nothing when all were read."""
    if not view.unreadable:
        return []
    return ["<h3>Unreadable reports</h3><p>Each is ERROR evidence: it may be a node's "
            "newest report.</p><ul>",
            *(f"<li>{escape(path)}: {escape(error)}</li>" for path, error in view.unreadable),
            "</ul>"]


def check_html_target(path: Path, report_dir: Path) -> None:
    """Refuse an ``--html FILE`` that is not safe to replace, before anything is read (exit
    2, naming FILE): a name ending in ``.json`` (the fleet reader takes every ``*.json`` for a
    report or summary), an existing file inside DIR that is not ``.html``/``.htm`` (a node's
    report, summary, JUnit or textfile), a device, FIFO, socket or directory, a symbolic
    link to anything but a regular file, a folder that does not exist (never created) or
    cannot be written."""
    from nodegate.errors import ConfigError
    from nodegate.report._atomic import preflight_file

    where = str(path)
    if path.name.lower().endswith(".json"):
        raise ConfigError("refusing to write HTML to a *.json name: the fleet reader takes "
                          "every *.json for a report", file=where, key="--html")
    inside = _inside(path, report_dir)
    if inside and os.path.lexists(path) and path.suffix.lower() not in (".html", ".htm"):
        raise ConfigError(f"refusing to replace a file inside the report directory "
                          f"{report_dir} that is not .html", file=where, key="--html")
    preflight_file(path)


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
    except (ValueError, OSError, RuntimeError):
        return False
    return True


def write_html(view: FleetView, path: str | Path, *, plots: int = 50,
               extra: Sequence[str] = (), pairs: PairMatrix | None = None) -> Path:
    """Write the page atomically; only a regular file (or a link to one) is replaced and no
    folder is created (``check_html_target`` said why up front). ``pairs``: as
    ``render_html``'s."""
    from nodegate.report._atomic import atomic_write_text

    return atomic_write_text(path, render_html(view, plots=plots, extra=extra, pairs=pairs),
                             make_parents=False)
