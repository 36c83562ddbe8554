"""Trends over each node's report history: per-metric series, and the nodes that degrade.

The fleet view (``aggregate``) compares nodes at one moment; a card whose GEMM rate sags 1 %
a week, or whose corrected-error counter starts to climb, stays inside every threshold for
weeks. Every node keeps its last 1,000 reports, and each has a small summary beside it
(``<stem>.summary.json``) with, per metric group, the node's worst entity. So a trend is the
series of that worst value over the node's history, read from the summaries the view already
decoded: no report is opened again.

Two kinds of metric:

* **levels** (GEMM TFLOPS, HBM/host/P2P bandwidths, all-reduce bus bandwidth, the thermal
  margin and HBM temperature under load): the value itself.
* **counters** (lifetime and volatile SBE counts, NVLink CRC errors, PCIe replays): the growth
  rate, in events per day, from the positive steps between consecutive reports (a counter
  that drops was reset, by a GPU reset or a reboot; the drop is not growth).

A node is *degrading* in a metric when, with at least ``MIN_REPORTS`` reports:

* **own**: its recent value (median of its last ``RECENT`` values) is worse than its baseline
  (median of its first third, at most ``BASELINE`` values) by more than the profile's
  ``trend_drift_pct_max``, or
* **fleet**: its recent value is worse than the median recent value of the nodes *of its
  profile* by more than that. Another profile is another machine (an A100 node's GEMM rate is
  ~60 % of an H100's, and stays there): a fleet of several kinds has one median per profile,
  and a node is only compared with its own kind. A profile with fewer than ``MIN_NODES``
  nodes with ``MIN_REPORTS`` values of a metric has no median for it (one odd node would
  move it): its nodes are judged against their own baseline only. A node's profile is the
  one its newest report names.

The level is not part of the group: the level metrics are measured only by the load runs
(standard and acceptance, whose GEMM and copy phases are the same; a quick run measures none
of them; acceptance's longer load peaks hotter, but one acceptance run among a node's last
``RECENT`` does not move their median), and the counters are the same hardware counters
whatever level read them.

"Worse" follows the metric's direction (lower TFLOPS, higher temperature, faster error
growth). A counter is listed when its growth rate rose by more than that share *and* by more
than its floor (``COUNTER_FLOORS_PER_DAY``), so a node going from no SBEs to a few a day is
listed, and a stray replay is not "infinitely" more than none; its percentage is taken
against at least the floor. This is a list for an operator, not a verdict: it changes no exit
code.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from nodegate.fleet.aggregate import MIN_NODES, FleetView, NodeView
from nodegate.fleet.trend_metrics import metric_kind
from nodegate.profiles.threshold_keys import Key

MIN_REPORTS = 3
RECENT = 3
BASELINE = 10
#: Growth (events a day) a counter must gain before it can be listed. Policy, no vendor
#: rate found: any SBE growth is worth a look (1 a day); NVLink CRC errors and PCIe replays
#: are retried by the link and "a healthy link gains a few a day at most" (the profiles'
#: *_per_hour_max sources), so 5 a day.
COUNTER_FLOORS_PER_DAY = {"ecc_sbe_aggregate": 1.0, "ecc_sbe_volatile": 1.0,
                          "nvlink_crc_errors": 5.0, "pcie_replays": 5.0}
#: Points in the fleet's median line (the history's span cut into this many buckets).
FLEET_BUCKETS = 40
#: The drift margin where a node's profile sets none (or cannot be resolved here).
DEFAULT_DRIFT_PCT = 5.0
THRESHOLD = Key.TREND_DRIFT_PCT_MAX
DAY_S = 86400.0


@dataclass(frozen=True)
class Degrading:
    """One node's metric that moved too far (``against``: ``own`` baseline or ``fleet``, the
    median of the nodes of its profile)."""

    node: str
    metric: str
    unit: str
    against: str
    reference: float  # the node's baseline, or its profile's median
    recent: float
    change_pct: float  # how much worse, in percent (always positive)
    limit_pct: float
    profile: str  # the node's profile (whose nodes' median ``fleet`` compares with)


@dataclass
class MetricTrend:
    """One metric across the nodes of one profile: their median line and the listed nodes'
    series (``fleet_line`` empty and ``fleet_recent`` None where the profile has fewer than
    ``MIN_NODES`` nodes with ``MIN_REPORTS`` values: no median to judge against)."""

    key: str
    profile: str
    unit: str  # per day for counters
    kind: str  # level | counter
    direction: str  # higher | lower (is better)
    fleet_line: list[tuple[float, float]] = field(default_factory=list)  # (epoch s, median)
    fleet_recent: float | None = None
    nodes: dict[str, list[tuple[float, float]]] = field(default_factory=dict)


@dataclass
class TrendView:
    metrics: list[MetricTrend]  # one per metric and profile, by metric then profile
    degrading: list[Degrading]
    nodes_with_history: int
    limits: dict[str, float]  # profile -> drift margin in percent
    #: profiles whose margin is the default, and why; profiles too few for a median
    notes: list[str]


def node_series(view: FleetView, node: str, key: str) -> list[tuple[float, float]]:
    """(finish time, worst value) of every report of ``node`` that measured ``key``, oldest
    first (the reader packed them: ``FleetView.points``)."""
    packed = view.points.get(node, {}).get(key)
    if not packed:
        return []
    return sorted(zip(packed[0::2], packed[1::2], strict=True))


def counter_rates(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Events per day between consecutive reports; a drop (a reset) is no growth."""
    out = []
    for (t0, v0), (t1, v1) in itertools.pairwise(points):
        if t1 > t0:
            out.append((t1, max(0.0, v1 - v0) * DAY_S / (t1 - t0)))
    return out


def _median(values: Iterable[float]) -> float:
    """``statistics.median``, same arithmetic, without importing ``statistics`` (and its
    ``fractions``, ``decimal`` and ``random``: ~3 ms of every ``nodegate report``)."""
    ordered = sorted(values)
    size = len(ordered)
    if not size:
        raise ValueError("no median of no values")
    if size % 2:
        return ordered[size // 2]
    return (ordered[size // 2 - 1] + ordered[size // 2]) / 2


def _windows(values: Sequence[float]) -> tuple[float, float]:
    """(baseline, recent): medians of the first third (<= BASELINE) and the last RECENT."""
    first = max(1, min(BASELINE, len(values) // 3))
    return _median(values[:first]), _median(values[-RECENT:])


def worse_pct(reference: float, value: float, direction: str, floor: float = 0.0) -> float:
    """How much worse ``value`` is than ``reference``, in percent of |reference| (at least
    ``floor``); negative when better. NaN where the reference is 0 and there is no floor."""
    scale = max(abs(reference), floor)
    if scale == 0:
        return math.nan
    delta = (reference - value) if direction == "higher" else (value - reference)
    return delta / scale * 100.0


def drift_limits(view: FleetView, override_pct: float | None
                 ) -> tuple[dict[str, float], list[str]]:
    """Each profile's ``trend_drift_pct_max`` (or ``override_pct`` for all), and notes for
    the profiles that fall back to the default."""
    from nodegate.errors import NodegateError
    from nodegate.profiles.cache import resolve_profile_cached

    names = sorted({node.latest["profile"] for node in view.nodes})
    if override_pct is not None:
        return dict.fromkeys(names, override_pct), []
    limits: dict[str, float] = {}
    notes: list[str] = []
    for name in names:
        try:
            threshold = resolve_profile_cached(name).threshold(THRESHOLD)
        except NodegateError as exc:
            threshold = None
            notes.append(f"profile {name}: not resolved here ({exc}); "
                         f"{DEFAULT_DRIFT_PCT:g} % used")
        else:
            if threshold is None:
                notes.append(f"profile {name}: no {THRESHOLD}; {DEFAULT_DRIFT_PCT:g} % used")
        limits[name] = threshold.value if threshold is not None else DEFAULT_DRIFT_PCT
    return limits, notes


def trends(view: FleetView, *, drift_pct: float | None = None, plot_nodes: int = 8
           ) -> TrendView:
    """The trends of ``view``'s nodes; ``drift_pct`` overrides every profile's margin;
    ``plot_nodes``: at most this many listed nodes keep their series per metric and profile,
    for plots."""
    limits, notes = drift_limits(view, drift_pct)
    # metric -> profile -> the profile's nodes that measured it, with their series
    series: dict[str, dict[str, list[tuple[NodeView, list[tuple[float, float]]]]]] = {}
    shapes: dict[str, tuple[str, str]] = {}
    with_history: dict[str, int] = {}  # profile -> nodes with MIN_REPORTS reports
    for node in view.nodes:
        profile = node.latest["profile"]
        if len(node.history) >= MIN_REPORTS:
            with_history[profile] = with_history.get(profile, 0) + 1
        for key, points in _node_metrics(view, node, shapes):
            series.setdefault(key, {}).setdefault(profile, []).append((node, points))
    notes += [f"profile {name}: {count} node{'s' if count > 1 else ''} with a history "
              f"(fewer than {MIN_NODES}): no profile median, each judged against its own "
              "baseline only"
              for name, count in sorted(with_history.items()) if count < MIN_NODES]
    metrics: list[MetricTrend] = []
    degrading: list[Degrading] = []
    for key in sorted(series):
        unit, direction = shapes[key]
        kind = metric_kind(key) or "level"
        for profile, group in sorted(series[key].items()):
            trend = MetricTrend(key, profile, f"{unit}/day" if kind == "counter" else unit,
                                kind, direction)
            found = _judge_metric(trend, group, limits)
            degrading.extend(found)
            listed = {d.node for d in found}
            for node, points in group:
                if node.node in listed and len(trend.nodes) < plot_nodes:
                    trend.nodes[node.node] = points
            metrics.append(trend)
    degrading.sort(key=lambda d: (-d.change_pct, d.node, d.metric))
    return TrendView(metrics, degrading, sum(with_history.values()), limits, notes)


def _node_metrics(view: FleetView, node: NodeView, shapes: dict[str, tuple[str, str]]
                  ) -> Iterable[tuple[str, list[tuple[float, float]]]]:
    """Each trend metric's series for one node (rates for counters)."""
    for key in view.points.get(node.node, {}):
        points = node_series(view, node.node, key)
        if metric_kind(key) == "counter":
            points = counter_rates(points)
        if points:
            shapes.setdefault(key, view.metric_shapes.get(key, ("", "higher")))
            yield key, points


def _judge_metric(trend: MetricTrend,
                  nodes: Sequence[tuple[NodeView, list[tuple[float, float]]]],
                  limits: Mapping[str, float]) -> list[Degrading]:
    """Fill the median line and recent median of ``trend`` (``nodes``: those of its profile
    that measured it) where there are enough of them; the nodes that degrade in it."""
    floor = COUNTER_FLOORS_PER_DAY.get(trend.key.split("[", 1)[0], 0.0)
    windows = {}
    for node, points in nodes:
        if len(points) >= MIN_REPORTS:
            windows[node.node] = _windows([v for _, v in points])
    if len(windows) >= MIN_NODES:
        trend.fleet_line = _fleet_line(points for _, points in nodes)
        trend.fleet_recent = _median(recent for _, recent in windows.values())
    limit = limits.get(trend.profile, DEFAULT_DRIFT_PCT)
    out = []
    for node, _ in nodes:
        if node.node not in windows:
            continue
        baseline, recent = windows[node.node]
        checks = [("own", baseline)]
        if trend.fleet_recent is not None:
            checks.append(("fleet", trend.fleet_recent))
        for against, reference in checks:
            change = worse_pct(reference, recent, trend.direction, floor)
            if trend.kind == "counter" and recent - reference <= floor:
                continue  # within the counter's floor: background, not a trend
            if change > limit:
                out.append(Degrading(node.node, trend.key, trend.unit, against, reference,
                                     recent, round(change, 2), limit, trend.profile))
    return out


def _fleet_line(all_points: Iterable[Sequence[tuple[float, float]]]
                ) -> list[tuple[float, float]]:
    """The median over time of a profile's nodes: the span cut into FLEET_BUCKETS, each
    bucket's median at its middle (a bucket without reports is left out)."""
    flat = [point for points in all_points for point in points]
    if not flat:
        return []
    t0 = min(t for t, _ in flat)
    t1 = max(t for t, _ in flat)
    width = (t1 - t0) / FLEET_BUCKETS or 1.0
    buckets: dict[int, list[float]] = {}
    for t, value in flat:
        buckets.setdefault(min(FLEET_BUCKETS - 1, int((t - t0) / width)), []).append(value)
    return [(t0 + (index + 0.5) * width, _median(values))
            for index, values in sorted(buckets.items())]


# --- renderings (text and JSON; the HTML section is in ``trends_html``) ---------------------


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def describe(item: Degrading) -> str:
    """``gemm_tflops[gpu] 690 -> 601 TFLOPS, 12.9 % worse than its own baseline (limit 5 %)``."""
    what = "its own baseline" if item.against == "own" else f"the {item.profile} median"
    return (f"{item.metric} {_fmt(item.reference)} -> {_fmt(item.recent)} {item.unit}, "
            f"{item.change_pct:.1f} % worse than {what} (limit {item.limit_pct:g} %)")


def text_lines(view: TrendView, limit: int = 50) -> list[str]:
    """The degrading list for a terminal (nothing without any node history)."""
    if not view.nodes_with_history:
        return []
    lines = ["", f"Trends: {view.nodes_with_history} nodes with {MIN_REPORTS}+ reports, "
             f"{len({m.key for m in view.metrics})} metrics; degrading: {len(view.degrading)}"]
    lines += [f"  ({note})" for note in view.notes]
    lines += [f"  {item.node}: {describe(item)}" for item in view.degrading[:limit]]
    if len(view.degrading) > limit:
        lines.append(f"  ... {len(view.degrading) - limit} more (--json lists all)")
    return lines


def to_data(view: TrendView) -> dict[str, object]:
    return {
        "nodes_with_history": view.nodes_with_history,
        "drift_limits_pct": view.limits,
        "notes": view.notes,
        "degrading": [{"node": d.node, "profile": d.profile, "metric": d.metric,
                       "unit": d.unit, "against": d.against, "reference": d.reference,
                       "recent": d.recent, "change_pct": d.change_pct,
                       "limit_pct": d.limit_pct}
                      for d in view.degrading],
        "metrics": [{"metric": m.key, "profile": m.profile, "unit": m.unit, "kind": m.kind,
                     "direction": m.direction, "fleet_recent": m.fleet_recent,
                     "fleet_line": m.fleet_line} for m in view.metrics],
    }
