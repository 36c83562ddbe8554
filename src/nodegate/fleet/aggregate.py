"""The fleet view: many node reports in, per-node verdicts, per-metric distributions and
cross-node outliers out.

Each report is reduced to a small summary (verdict, failing checks, per metric group the
node's worst and median value, the cards' identities) by ``nodegate.fleet.read``: from the
summary file the node wrote beside it, or by parsing the report when there is no usable one.
This module groups those by node and compares each metric across the nodes of one profile
(the one a node's newest report names): another profile is another machine (an A100 node's
GEMM rate is ~60 % of an H100's, and stays there), so a fleet of several kinds has one
median per metric and profile, and a node is only compared with its own kind.
"""

from __future__ import annotations

import itertools
import math
import os
import time
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path

from nodegate import collector
from nodegate.errors import ConfigError
from nodegate.fleet.read import History, Summary, summaries
from nodegate.fleet.trend_metrics import has_trend
from nodegate.vocabulary import FAILING, LEVELS
from nodegate.vocabulary import VERDICT_RANK_BY_NAME as VERDICT_RANK

__all__ = ["MIN_NODES", "FleetView", "MetricView", "NodeView", "Outlier", "Summary", "Swap",
           "aggregate", "build_view"]

#: The fewest nodes whose median is a baseline to judge a node against: with fewer, one odd
#: node moves the median, so no outliers are sought among the nodes of a profile with fewer
#: (and ``trends`` gives no verdict against the median of a profile with fewer).
MIN_NODES = 3
#: How far past the viewer's clock a report may be dated before it counts as suspect.
SKEW_S = 300.0

# --- the fleet ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Swap:
    """A GPU slot whose card changed between two reports of one node."""

    entity: str  # the GPU's entity in the newer report
    slot: str  # PCI bus id when both reports give it, else the entity name
    field: str  # what changed: ``serial``, or ``uuid`` where the board gives no serial
    before: str
    after: str
    since: str  # finished_at of the older report
    until: str  # finished_at of the newer report
    report: str  # the newer report's path


@dataclass(frozen=True)
class Outlier:
    node: str
    entity: str
    value: float
    deviation_pct: float  # signed, relative to the median of the nodes of its profile
    profile: str  # the node's profile (whose nodes' median it is compared with)


@dataclass
class MetricView:
    """One metric group across the nodes of one profile: each node's worst value, their
    spread, the outliers (none sought where fewer than ``MIN_NODES`` nodes report it, or
    their median is 0)."""

    key: str  # ``p2p_bandwidth[gpu-gpu]``
    profile: str  # the profile its nodes' newest reports name
    unit: str
    direction: str
    values: list[tuple[str, float, str]] = field(default_factory=list)  # node, worst, entity
    stats: dict[str, float] = field(default_factory=dict)
    outliers: list[Outlier] = field(default_factory=list)

    @property
    def flat(self) -> bool:
        """Nothing to show: every node of the profile has the same value (the HTML page and
        the text view leave such a metric out and say how many they left out)."""
        return bool(self.values) and self.stats.get("min") == self.stats.get("max")



@dataclass
class NodeView:
    """One node: its reports oldest first, and what it stands at now.

    The node's verdict is the worst of the newest report *of each level*: a passing cron
    health check at 03:05 does not clear the standard run that failed at 03:00 (the same
    rule by which the gate keeps a standard/acceptance hold).
    """

    node: str
    history: list[Summary]  # oldest first
    #: (path, error) of the report files that could not be read and are this node's by where
    #: they lie (``_owners``): any one may be its newest report, so the node is ERROR
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    #: why this node's reports come from more than one machine (``identity_conflict``):
    #: the node is ERROR, and both are named
    conflict: str | None = None
    #: the wall clock a report must not be dated after (``SKEW_S`` allowed): a report dated
    #: later is suspect, and may add a failure to the node's verdict, never hide one
    now: float | None = field(default=None, compare=False)

    @property
    def latest(self) -> Summary:
        return self.history[-1]

    def current(self) -> list[Summary]:
        """The newest report of each level, shallow to deep; where the newest is dated in
        the future (suspect), the newest one that is not is current too."""
        if len(self.history) == 1:  # most of a fleet; the page asks each node several times
            return [self.history[0]]
        newest: dict[str, Summary] = {}
        trusted: dict[str, Summary] = {}
        for summary in self.history:
            newest[summary["level"]] = summary
            if not self._future(summary):
                trusted[summary["level"]] = summary
        out = []
        for level in sorted(newest, key=_level_rank):
            out.append(newest[level])
            if level in trusted and trusted[level] is not newest[level]:
                out.append(trusted[level])
        return out

    def _future(self, summary: Summary) -> bool:
        return self.now is not None and summary["finished"] > self.now + SKEW_S

    @property
    def verdict(self) -> str:
        if len(self.history) == 1 and not (self.unreadable or self.conflict):
            return str(self.history[0]["verdict"])  # ``current``'s one report, as below
        verdicts = [s["verdict"] for s in self.current()] + (
            ["ERROR"] if self.unreadable or self.conflict else [])
        return str(max(verdicts, key=lambda v: VERDICT_RANK.get(v, 0)))

    def failing(self) -> tuple[list[str], int]:
        """Failing test ids of the current reports (``standard: nvlink_state[gpu3.link5]``)
        and how many there are in all."""
        shown: list[str] = []
        total = 0
        for summary in self.current():
            if summary["verdict"] in FAILING:
                total += summary["n_failing"]
                prefix = "" if summary is self.latest else f"{summary['level']}: "
                shown.extend(prefix + item for item in summary["failing"])
        shown[:0] = [f"unreadable report {path}" for path, _ in self.unreadable]
        if self.conflict:
            shown.insert(0, self.conflict)
        return shown, total + len(self.unreadable) + (1 if self.conflict else 0)

    def gpus(self) -> dict[str, dict[str, str]]:
        """Entity -> identity of the node's cards as its newest report with them says."""
        for summary in reversed(self.history):
            if summary.get("gpus"):
                return dict(summary["gpus"])
        return {}

    def failing_cards(self) -> list[tuple[str, dict[str, str], list[str]]]:
        """(GPU entity, its identity, failing test ids) for each physical card with a failing
        check in the current reports: which card to pull. GPUs without identity are left out."""
        cards: dict[str, tuple[dict[str, str], list[str]]] = {}
        for summary in self.current():
            if summary["verdict"] not in FAILING:
                continue
            gpus = summary.get("gpus") or {}
            for item in summary["failing"]:
                entity = item[item.find("[") + 1 : -1] if item.endswith("]") else ""
                gpu = entity.split(".", 1)[0]
                if gpu in gpus:
                    cards.setdefault(gpu, (gpus[gpu], []))[1].append(item)
        return [(gpu, ident, items) for gpu, (ident, items) in sorted(cards.items())]

    def swaps(self) -> list[Swap]:
        """Every card change between consecutive reports that carry identities (a report
        without them, from an older nodegate or a run without NVML, is stepped over)."""
        found: list[Swap] = []
        previous: Summary | None = None
        for summary in self.history:
            if not summary.get("gpus"):
                continue
            if previous is not None:
                found.extend(_swaps_between(previous, summary))
            previous = summary
        return found


def _slots(gpus: Mapping[str, Mapping[str, str]]) -> dict[str, tuple[str, Mapping[str, str]]]:
    """Slot -> (entity, identity): the PCI bus id names the slot (an index shifts when a card
    drops off the bus), the entity where the bus id is unknown."""
    return {(ident.get("pci_bus_id") or entity).lower(): (entity, ident)
            for entity, ident in gpus.items()}


def _swaps_between(older: Summary, newer: Summary) -> list[Swap]:
    before = _slots(older["gpus"])
    out = []
    for slot, (entity, ident) in sorted(_slots(newer["gpus"]).items()):
        if slot not in before:
            continue
        old = before[slot][1]
        for key in ("serial", "uuid"):  # serial first: it is what is printed on the card
            if key in old and key in ident:
                if old[key] != ident[key]:
                    out.append(Swap(entity, ident.get("pci_bus_id") or entity, key, old[key],
                                    ident[key], older["finished_at"], newer["finished_at"],
                                    newer["path"]))
                break
    return out


def _level_rank(level: str) -> int:
    return LEVELS.index(level) if level in LEVELS else len(LEVELS)


@dataclass
class FleetView:
    root: Path
    margin_pct: float
    nodes: list[NodeView]
    metrics: list[MetricView]  # one per metric and profile: with outliers first, by metric
    unreadable: list[tuple[str, str]]
    #: reports parsed in full this run for want of a usable summary beside them (older
    #: writers, a summary missing, corrupt or of another version; ``strict``: all)
    full_reads: int = 0
    #: node -> trend metric -> packed (finish time, worst value) of every report
    #: (``read.History``), and each trend metric's (unit, direction)
    points: dict[str, dict[str, array[float]]] = field(default_factory=dict)
    metric_shapes: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: the profiles with too few nodes (``MIN_NODES``) for outliers to be sought among them
    notes: list[str] = field(default_factory=list)

    @property
    def n_reports(self) -> int:
        return sum(len(node.history) for node in self.nodes)

    def verdicts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for node in self.nodes:
            out[node.verdict] = out.get(node.verdict, 0) + 1
        return out


def _percentile(ordered: Sequence[float], q: float) -> float:
    if len(ordered) == 1:
        return ordered[0]
    pos = (len(ordered) - 1) * q
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def build_view(root: Path, items: Iterable[Summary], *, margin_pct: float = 10.0,
               full_reads: int = 0, history: History | None = None,
               now: float | None = None) -> FleetView:
    """Group by node (history oldest first), then compare each metric across the nodes of
    each profile (the one a node's newest report names).

    A node's value for a metric is its worst entity in the newest report of each level that
    measured it (a cron quick run does not hide last night's bandwidth test); older reports
    of a level count through their trends (``history``, which ``aggregate`` filled while
    reading; without one, ``items`` go through a new one here). Outliers are nodes worse than
    the median of their profile's nodes by more than ``margin_pct`` percent: below it for
    higher-is-better metrics, above it for metrics bounded only by a ``max``. A profile with
    fewer than ``MIN_NODES`` nodes has its spread but no outliers (``FleetView.notes``).
    """
    if not 0 <= margin_pct < 100:
        raise ConfigError(f"margin must be in [0, 100) percent, got {margin_pct:g}",
                          key="--margin")
    if history is None:
        history = History(has_trend)
        items = list(items)
        for item in items:
            history.add(item)
    by_node: dict[str, list[Summary]] = {}
    unreadable: list[tuple[str, str]] = []
    for item in items:
        if "error" in item:
            unreadable.append((item["path"], item["error"]))
        elif item.get("duplicate"):
            continue  # the same report twice (a latest copy beside its dated original)
        else:
            by_node.setdefault(item["node"], []).append(item)
    _one_machine_one_node(by_node)
    nodes, metrics = _node_values(by_node, time.time() if now is None else now)
    _charge_unreadable(nodes, unreadable, by_node)
    margin = margin_pct / 100.0
    for view in metrics.values():
        _score_metric(view, margin)
    ordered_metrics = sorted(metrics.values(),
                             key=lambda m: (not m.outliers, m.key, m.profile))
    return FleetView(root, margin_pct, nodes, ordered_metrics, unreadable, full_reads,
                     history.points, history.shapes, _few_nodes_notes(nodes))


def _one_machine_one_node(by_node: dict[str, list[Summary]]) -> None:
    """A node's reports under its host name (``gpu-b01.dc1.example.net``, written before its
    Slurm name was passed) joined to those under its Slurm name (``gpu-b01``) where the
    latter say so: their ``host`` is that name and their machine id is the one every report
    of the host name carries. Names alone never join two groups (two machines sharing a
    cloned machine id stay apart), and a name whose reports carry several machine ids is
    left to ``identity_conflict``."""
    named: dict[tuple[str, str], str] = {}
    for name, items in by_node.items():
        for item in items:
            host, machine = item.get("host"), item.get("machine_id")
            if host and machine and host != name:
                named[(str(host), str(machine))] = name
    if not named:
        return
    for name in list(by_node):
        machines = {item.get("machine_id") for item in by_node[name]}
        if len(machines) != 1 or None in machines:
            continue
        target = named.get((name, str(next(iter(machines)))))
        if target is not None and target != name and target in by_node:
            by_node[target].extend(by_node.pop(name))


def _few_nodes_notes(nodes: Sequence[NodeView]) -> list[str]:
    """A note for each profile with fewer than ``MIN_NODES`` nodes: no outliers among them."""
    counts: dict[str, int] = {}
    for node in nodes:
        profile = node.latest["profile"]
        counts[profile] = counts.get(profile, 0) + 1
    return [f"profile {name}: {count} node{'s' if count > 1 else ''} (fewer than "
            f"{MIN_NODES}): no profile median, no outliers sought among them"
            for name, count in sorted(counts.items()) if count < MIN_NODES]


def _charge_unreadable(nodes: Sequence[NodeView], unreadable: Sequence[tuple[str, str]],
                       by_node: Mapping[str, Sequence[Summary]]) -> None:
    """Each unreadable file that is some node's (``_owners``) goes on that node's view."""
    owners = _owners([path for path, _ in unreadable], by_node)
    if owners:
        by_name = {node.node: node for node in nodes}
        for path, error in unreadable:
            if path in owners:
                by_name[owners[path]].unreadable.append((path, error))


def _owners(paths: Sequence[str], by_node: Mapping[str, Sequence[Summary]]) -> dict[str, str]:
    """Unreadable file -> the node it belongs to: going up from its folder to DIR, the first
    folder holding readable reports holds only that node's (``<host>/quick-latest.json`` beside
    ``<host>/standard-latest.json``, ``<host>/history/...``, or DIR being one node's report
    folder). A file whose first such folder holds several nodes' reports is nobody's."""
    if not paths:
        return {}
    chains = {path: _folders(path) for path in paths}
    seen: dict[str, set[str]] = {folder: set() for chain in chains.values() for folder in chain}
    for node, items in by_node.items():
        for item in items:
            for folder in _folders(item["path"]):
                if folder in seen:
                    seen[folder].add(node)
    owners: dict[str, str] = {}
    for path, chain in chains.items():
        for folder in chain:
            if seen[folder]:
                if len(seen[folder]) == 1:
                    owners[path] = next(iter(seen[folder]))
                break
    return owners


def _folders(path: str) -> list[str]:
    """``a/b/c.json`` -> ``["a/b", "a", ""]``: its folders below DIR, nearest first."""
    out = []
    while path:
        path = os.path.dirname(path)
        out.append(path)
    return out


def identity_conflict(node: str, history: Sequence[Summary]) -> str | None:
    """Why ``history`` (ordered) cannot be one machine's, naming both reports (None when it
    can be): two machine ids; one sequence number used by two reports; or boots that
    interleave by sequence (boot A, then B, then A again: two machines taking turns)."""
    first: dict[str, Summary] = {}
    for item in history:
        machine = item.get("machine_id")
        if machine is not None:
            seen = first.setdefault(machine, item)
            if len(first) > 1:
                other = next(v for k, v in first.items() if k != machine)
                return (f"two machines report as {node}: machine-id {other['machine_id']} "
                        f"({other['path']}) and {machine} ({seen['path']})")
    numbered = [item for item in history if "sequence" in item]
    for older, newer in itertools.pairwise(numbered):
        if older["sequence"] == newer["sequence"]:
            return (f"two machines report as {node}: sequence {newer['sequence']} in "
                    f"{older['path']} and {newer['path']}")
    ended: dict[str, Summary] = {}
    current: Summary | None = None
    for item in numbered:
        boot = item.get("boot_id")
        if boot is None:
            continue
        if current is not None and boot != current["boot_id"]:
            if boot in ended:
                return (f"two machines report as {node}: boot {boot} "
                        f"({ended[boot]['path']}) resumes after boot {current['boot_id']} "
                        f"({current['path']}) by sequence")
            ended[current["boot_id"]] = current
        current = item
    return None


def _node_values(by_node: dict[str, list[Summary]], now: float | None = None,
                 ) -> tuple[list[NodeView], dict[tuple[str, str], MetricView]]:
    """Each node's history (oldest first) and, per metric and profile (the one the node's
    newest report names), every node's value taken from its newest report that measured the
    metric."""
    nodes = []
    by_profile: dict[str, dict[str, MetricView]] = {}  # profile -> metric key -> view
    for name in sorted(by_node):
        history = by_node[name]
        single = len(history) == 1  # most of a fleet: one report, nothing to order or skip
        if not single:
            history.sort(key=lambda s: s["order"])
        nodes.append(NodeView(name, history, now=now,
                              conflict=None if single else identity_conflict(name, history)))
        profile = history[-1]["profile"]
        views = by_profile.get(profile)
        if views is None:
            views = by_profile[profile] = {}
        _add_values(views, profile, name, history)
    metrics = {(key, profile): view for profile, views in by_profile.items()
               for key, view in views.items()}
    return nodes, metrics


def _add_values(views: dict[str, MetricView], profile: str, name: str,
                history: Sequence[Summary]) -> None:
    """Node ``name``'s value of each metric into ``views`` (its profile's): from its newest
    report that measured the metric."""
    if len(history) == 1:  # most of a fleet: nothing to skip
        for key, (unit, sense, worst, entity, _median, _n) in history[0]["metrics"].items():
            view = views.get(key)
            if view is None:
                view = views[key] = MetricView(key, profile, unit, sense)
            view.values.append((name, worst, entity))
        return
    seen: set[str] = set()
    for summary in reversed(history):
        for key, (unit, sense, worst, entity, _median, _n) in summary["metrics"].items():
            if key in seen:
                continue
            seen.add(key)
            view = views.get(key)
            if view is None:
                view = views[key] = MetricView(key, profile, unit, sense)
            view.values.append((name, worst, entity))


def _score_metric(view: MetricView, margin: float) -> None:
    """Fill in the statistics of ``view``'s nodes (those of one profile) and its outliers
    (worst first)."""
    ordered = sorted(map(itemgetter(1), view.values))
    median = _percentile(ordered, 0.5)
    view.stats = {
        "n": float(len(ordered)), "min": ordered[0], "p5": _percentile(ordered, 0.05),
        "p25": _percentile(ordered, 0.25), "median": median,
        "p75": _percentile(ordered, 0.75), "p95": _percentile(ordered, 0.95),
        "max": ordered[-1],
    }
    if median == 0 or len(ordered) < MIN_NODES:
        return  # no meaningful relative margin (error counters, profiles of few nodes)
    scale = abs(median)
    higher = view.direction == "higher"
    # the worst value is within the margin: so is every other (the deviation is monotonic)
    worst = (ordered[0] - median) / scale if higher else (ordered[-1] - median) / scale
    if not (worst < -margin if higher else worst > margin):
        return
    for node, value, entity in view.values:
        # most nodes sit on the worse-than-median side of nothing: skip them cheaply
        if (value >= median) if higher else (value <= median):
            continue
        deviation = (value - median) / scale
        if deviation < -margin if higher else deviation > margin:
            view.outliers.append(Outlier(node, entity, value, round(deviation * 100, 2),
                                         view.profile))
    view.outliers.sort(key=lambda o: abs(o.deviation_pct), reverse=True)


def aggregate(root: str | os.PathLike[str], *, margin_pct: float = 10.0,
              jobs: int | None = None, strict: bool = False,
              cache: Path | bool | None = True) -> FleetView:
    """The fleet view of every report below ``root`` (recursively); ``jobs``: processes for
    the reports parsed in full; ``strict``: parse and fully validate every report, summaries
    unused; ``cache``: the summary cache (``read.summaries``; True: the per-user one for a
    fleet of its size, False: none)."""
    base = Path(root)
    history = History(has_trend)
    with collector.paused():
        items, full_reads = summaries(base, jobs=jobs, strict=strict, history=history,
                                      cache=cache)
        return build_view(base, items, margin_pct=margin_pct, full_reads=full_reads,
                          history=history)
