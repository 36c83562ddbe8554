"""The trends section of the fleet HTML: the list, then per metric and profile the median
over time of that profile's nodes and its degrading nodes' own series (inline SVG through
``html.line_chart_svg``)."""

from __future__ import annotations

from html import escape

from nodegate.fleet.html import line_chart_svg
from nodegate.fleet.trends import DAY_S, MetricTrend, TrendView, describe


def _days(points: list[tuple[float, float]], t0: float) -> list[list[float]]:
    return [[round((t - t0) / DAY_S, 3), value] for t, value in points]


def trend_svg(metric: MetricTrend) -> str:
    """One metric on one profile's nodes: their median (where there are enough of them) and
    each listed node, days since the first report; the title names the profile."""
    starts = [p[0][0] for p in (metric.fleet_line, *metric.nodes.values()) if p]
    if not starts:
        return ""
    t0 = min(starts)
    lines = {"median": _days(metric.fleet_line, t0)} if metric.fleet_line else {}
    lines.update((node, _days(points, t0)) for node, points in metric.nodes.items())
    what = " growth" if metric.kind == "counter" else ""
    return line_chart_svg(f"{metric.key}{what}, {metric.profile}", lines, metric.unit,
                          time_unit="d")


def section(view: TrendView) -> list[str]:
    """The HTML section; nothing when no node has a history."""
    if not view.nodes_with_history:
        return []
    out = [f"<h2>Trends</h2><p class=\"muted\">{view.nodes_with_history} nodes with a "
           "history. Each node's worst entity per report; counters as growth per day. "
           "Degrading: recent runs worse than the node's own first runs, or than the median "
           "of the nodes of its profile, by more than the profile's trend_drift_pct_max. "
           "One plot per metric and profile.</p>"]
    out += [f'<p class="muted">{escape(note)}</p>' for note in view.notes]
    out.append('<h3 id="degrading">Degrading</h3>')
    if view.degrading:
        out.append("<table><thead><tr><th>node</th><th>profile</th><th>metric</th>"
                   "<th>against</th><th>what</th></tr></thead><tbody>")
        out += [f"<tr><td>{escape(d.node)}</td><td>{escape(d.profile)}</td>"
                f"<td>{escape(d.metric)}</td><td>{escape(d.against)}</td>"
                f"<td>{escape(describe(d))}</td></tr>"
                for d in view.degrading[:500]]
        out.append("</tbody></table>")
    else:
        out.append("<p>none</p>")
    plotted = _plotted(view)
    flat = [metric for metric in plotted if _flat(metric)]
    cards = [svg for svg in map(trend_svg, (m for m in plotted if not _flat(m))) if svg]
    if flat:
        names = ", ".join(f"{m.key}, {m.profile}" for m in flat)
        out.append(f'<p class="muted" id="trends-left-out">{len(flat)} of {len(plotted)} '
                   f"trend plots left out: one value throughout ({escape(names)}).</p>")
    if cards:
        out.append('<div class="plots">')
        out += [f'<div class="card">{svg}</div>' for svg in cards]
        out.append("</div>")
    return out


def _flat(metric: MetricTrend) -> bool:
    """Nothing to plot: every point of the median line and of the listed nodes is one value
    (no node listed: a degrading node always moved)."""
    values = {value for _, value in metric.fleet_line}
    for points in metric.nodes.values():
        values.update(value for _, value in points)
    return len(values) <= 1 and not metric.nodes


def _plotted(view: TrendView) -> list[MetricTrend]:
    """Metrics with degrading nodes first, then the rest (each by metric, then profile)."""
    return sorted(view.metrics, key=lambda m: (not m.nodes, m.key, m.profile))
