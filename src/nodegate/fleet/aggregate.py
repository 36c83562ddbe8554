"""The fleet view: many node reports in, per-node verdicts, per-metric distributions and
cross-node outliers out.

Scale shapes this module. A standard 8-GPU report is ~190 KB of JSON with ~400 results, so
10,000 of them are ~2 GB that no Python parser reads in seconds. Each file is therefore
reduced once to a small *summary* (verdict, failing checks, per metric group the node's worst
and median value), and summaries are cached per file keyed by (size, mtime, inode) in the
user's cache directory: a re-run parses only new or changed reports. A cold run parses in
worker processes and stops reading each file after ``results`` (series and matrices, half the
bytes, are only read for the nodes the HTML plots).

The fast path checks structure (schema id, required keys, result shape), not the whole JSON
Schema; ``strict=True`` validates every file with ``nodegate.report.load`` instead.
"""

from __future__ import annotations

import hashlib
import json
import marshal
import math
import os
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from json.decoder import scanstring  # type: ignore[attr-defined]
from pathlib import Path
from typing import Any

from nodegate.errors import ConfigError
from nodegate.report.model import SCHEMA_ID, parse_timestamp

#: Bump when the summary shape changes: old cache entries are then ignored.
SUMMARY_VERSION = 1

#: Top-level keys a summary needs; ``series`` and ``matrices`` are not among them.
NEEDED = frozenset({
    "schema", "report_id", "node", "profile", "level", "started_at", "finished_at",
    "verdict", "counts", "results",
})
BULK = frozenset({"series", "matrices"})

FAILING = ("FAIL", "ERROR")
MAX_FAILING_KEPT = 20

Summary = dict[str, Any]

_decoder = json.JSONDecoder()
_WS = re.compile(r"[ \t\n\r]*")
_DIGITS = re.compile(r"\d+")


# --- reading one report -----------------------------------------------------------------------


def read_head(text: str, needed: frozenset[str] = NEEDED) -> dict[str, Any]:
    """Decode a report's top-level object key by key, stopping at ``series``/``matrices`` once
    every needed key is in hand (the writer puts them last; any other order still decodes)."""
    ws = _WS.match
    index = ws(text, 0).end()  # type: ignore[union-attr]
    if text[index : index + 1] != "{":
        raise ValueError("top level is not a JSON object")
    index += 1
    out: dict[str, Any] = {}
    while True:
        index = ws(text, index).end()  # type: ignore[union-attr]
        char = text[index : index + 1]
        if char == "}":
            return out
        if char != '"':
            raise ValueError(f"expected a key at offset {index}")
        key, index = scanstring(text, index + 1)
        if key in BULK and needed <= out.keys():
            return out
        index = ws(text, index).end()  # type: ignore[union-attr]
        if text[index : index + 1] != ":":
            raise ValueError(f"expected ':' at offset {index}")
        index = ws(text, index + 1).end()  # type: ignore[union-attr]
        value, index = _decoder.raw_decode(text, index)
        out[key] = value
        index = ws(text, index).end()  # type: ignore[union-attr]
        char = text[index : index + 1]
        if char == ",":
            index += 1
        elif char != "}":
            raise ValueError(f"expected ',' or '}}' at offset {index}")


def entity_kind(entity: str) -> str:
    """``gpu3.link5`` -> ``gpu.link``; ``gpu0-gpu1`` -> ``gpu-gpu``: what is compared across
    nodes is the same kind of thing, not the same index."""
    return _DIGITS.sub("", entity)


def direction(threshold: Any) -> str:
    """``higher`` (is better; outliers are below) unless only a ``max`` bounds the metric."""
    if isinstance(threshold, Mapping) and "max" in threshold and "min" not in threshold:
        return "lower"
    return "higher"


def summarize(data: Mapping[str, Any], *, path: str) -> Summary:
    """The small, cacheable digest of one report (raises ValueError when it is not one)."""
    if data.get("schema") != SCHEMA_ID:
        raise ValueError(f"not a {SCHEMA_ID} report (schema {data.get('schema')!r})")
    missing = sorted(NEEDED - data.keys())
    if missing:
        raise ValueError(f"missing key $.{missing[0]}")
    results = data["results"]
    if not isinstance(results, list):
        raise ValueError("$.results is not a list")
    labels = data.get("labels") or {}
    failing: list[str] = []
    n_failing = 0
    groups: dict[str, list[Any]] = {}
    for result in results:
        check = result["check"]
        entity = result["entity"]
        verdict = result["verdict"]
        if verdict in FAILING:
            n_failing += 1
            if len(failing) < MAX_FAILING_KEPT:
                failing.append(f"{check}[{entity}]")
        measured = result.get("measured")
        if type(measured) is float or type(measured) is int:
            if type(measured) is float and not math.isfinite(measured):
                continue
            key = f"{check}[{entity_kind(entity)}]"
            group = groups.get(key)
            if group is None:
                groups[key] = [result.get("unit", ""), direction(result.get("threshold")),
                               [measured], [entity]]
            else:
                group[2].append(measured)
                group[3].append(entity)
    metrics: dict[str, list[Any]] = {}
    for key, (unit, sense, values, entities) in groups.items():
        pick = min if sense == "higher" else max
        worst_index = pick(range(len(values)), key=values.__getitem__)
        metrics[key] = [unit, sense, float(values[worst_index]), entities[worst_index],
                        float(statistics.median(values)), len(values)]
    if n_failing and data["verdict"] not in FAILING:
        raise ValueError(f"verdict {data['verdict']} disagrees with its failing results")
    return {
        "v": SUMMARY_VERSION,
        "path": path,
        "report_id": str(data["report_id"]),
        "node": str(labels.get("slurm_node") or data["node"]),
        "host": str(data["node"]),
        "profile": str(data["profile"]),
        "level": str(data["level"]),
        "started_at": str(data["started_at"]),
        "finished_at": str(data["finished_at"]),
        "finished": parse_timestamp(data["finished_at"]).timestamp(),
        "verdict": str(data["verdict"]),
        "counts": dict(data["counts"]),
        "failing": failing,
        "n_failing": n_failing,
        "n_results": len(results),
        "metrics": metrics,
    }


def summarize_file(path: Path, rel: str, strict: bool = False) -> Summary:
    """Read and digest one file; an unreadable one becomes ``{"error": ...}``, not a crash:
    one corrupt report must not hide a fleet of 10,000."""
    try:
        if strict:
            from nodegate.report import load

            data: Mapping[str, Any] = load(path).to_dict()
        else:
            data = read_head(path.read_bytes().decode("utf-8"))
        return summarize(data, path=rel)
    except ConfigError as exc:
        return {"v": SUMMARY_VERSION, "path": rel, "error": exc.message + (
            f" (key {exc.key})" if exc.key else "")}
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError,
            AttributeError) as exc:
        return {"v": SUMMARY_VERSION, "path": rel, "error": f"{type(exc).__name__}: {exc}"}


def _summarize_batch(root: str, rels: Sequence[str], strict: bool) -> list[Summary]:
    base = Path(root)
    return [summarize_file(base / rel, rel, strict) for rel in rels]


# --- the cache --------------------------------------------------------------------------------


def default_cache_file(root: Path) -> Path:
    from nodegate.paths import cache_dir

    digest = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]
    return cache_dir() / "fleet" / f"{digest}.marshal"


def _load_cache(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        data = marshal.loads(path.read_bytes())
    except (OSError, EOFError, ValueError, TypeError):
        return {}
    if not isinstance(data, dict) or data.get("v") != SUMMARY_VERSION:
        return {}
    entries = data.get("entries")
    return entries if isinstance(entries, dict) else {}


def _save_cache(path: Path | None, entries: dict[str, Any]) -> None:
    """marshal, not pickle: loading it cannot run code. Best effort: a read-only cache dir
    costs speed, never the report."""
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(marshal.dumps({"v": SUMMARY_VERSION, "entries": entries}))
        os.replace(tmp, path)
    except OSError:
        pass


# --- the fleet ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outlier:
    node: str
    entity: str
    value: float
    deviation_pct: float  # signed, relative to the fleet median


@dataclass
class MetricView:
    """One metric group across nodes: each node's worst value, their spread, the outliers."""

    key: str  # ``p2p_bandwidth[gpu-gpu]``
    unit: str
    direction: str
    values: list[tuple[str, float, str]] = field(default_factory=list)  # node, worst, entity
    stats: dict[str, float] = field(default_factory=dict)
    outliers: list[Outlier] = field(default_factory=list)


VERDICT_RANK = {"PASS": 0, "SKIP": 1, "WARN": 2, "ERROR": 3, "FAIL": 4}
LEVELS = ("quick", "standard", "acceptance")


@dataclass
class NodeView:
    """One node: its reports oldest first, and what it stands at now.

    The node's verdict is the worst of the newest report *of each level*: a passing cron
    health check at 03:05 does not clear the standard run that failed at 03:00 (the same
    rule by which the gate keeps a standard/acceptance hold).
    """

    node: str
    history: list[Summary]  # oldest first

    @property
    def latest(self) -> Summary:
        return self.history[-1]

    def current(self) -> list[Summary]:
        """The newest report of each level, shallow to deep."""
        newest: dict[str, Summary] = {}
        for summary in self.history:
            newest[summary["level"]] = summary
        return [newest[level] for level in sorted(newest, key=_level_rank)]

    @property
    def verdict(self) -> str:
        return str(max((s["verdict"] for s in self.current()),
                       key=lambda v: VERDICT_RANK.get(v, 0)))

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
        return shown, total


def _level_rank(level: str) -> int:
    return LEVELS.index(level) if level in LEVELS else len(LEVELS)


@dataclass
class FleetView:
    root: Path
    margin_pct: float
    nodes: list[NodeView]
    metrics: list[MetricView]
    unreadable: list[tuple[str, str]]
    parsed: int = 0  # files parsed this run (the rest came from the cache)

    @property
    def n_reports(self) -> int:
        return sum(len(node.history) for node in self.nodes)

    def verdicts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for node in self.nodes:
            out[node.verdict] = out.get(node.verdict, 0) + 1
        return out


def scan(root: Path) -> list[tuple[str, tuple[int, int, int]]]:
    """Every ``*.json`` below ``root`` (hidden names skipped) with its (size, mtime, inode)."""
    found: list[tuple[str, tuple[int, int, int]]] = []
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith("."):
                continue
            if entry.is_dir(follow_symlinks=False):
                stack.append(Path(entry.path))
            elif entry.name.endswith(".json") and entry.is_file():
                stat = entry.stat()
                rel = os.path.relpath(entry.path, root)
                found.append((rel, (stat.st_size, stat.st_mtime_ns, stat.st_ino)))
    found.sort()
    return found


def summaries(root: Path, *, cache: Path | bool | None = True, jobs: int | None = None,
              strict: bool = False) -> tuple[list[Summary], int]:
    """Summaries of every report below ``root`` and how many had to be parsed now."""
    if not root.is_dir():
        raise ConfigError("report directory not found", file=str(root))
    cache_file = default_cache_file(root) if cache is True else (cache or None)
    if strict:
        cache_file = None
    cached = _load_cache(cache_file)
    files = scan(root)
    out: dict[str, Summary] = {}
    todo: list[str] = []
    stamps: dict[str, list[int]] = {}
    for rel, stamp in files:
        stamps[rel] = list(stamp)
        entry = cached.get(rel)
        if entry is not None and entry[0] == stamps[rel]:
            out[rel] = entry[1]
        else:
            todo.append(rel)
    workers = jobs if jobs is not None else min(4, os.cpu_count() or 1)
    if workers > 1 and len(todo) >= 400:
        size = max(50, len(todo) // (workers * 4))
        batches = [todo[i : i + size] for i in range(0, len(todo), size)]
        with ProcessPoolExecutor(max_workers=workers) as pool:
            done = pool.map(_summarize_batch, [str(root)] * len(batches), batches,
                            [strict] * len(batches))
            for batch in done:
                for summary in batch:
                    out[summary["path"]] = summary
    else:
        for summary in _summarize_batch(str(root), todo, strict):
            out[summary["path"]] = summary
    if todo or len(cached) != len(files):
        _save_cache(cache_file, {rel: [stamps[rel], out[rel]] for rel in stamps})
    return [out[rel] for rel, _ in files], len(todo)


def _percentile(ordered: Sequence[float], q: float) -> float:
    if len(ordered) == 1:
        return ordered[0]
    pos = (len(ordered) - 1) * q
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def build_view(root: Path, items: Iterable[Summary], *, margin_pct: float = 10.0,
               parsed: int = 0) -> FleetView:
    """Group by node (history oldest first), then compare each metric across nodes.

    A node's value for a metric is its worst entity in the newest report that measured it
    (a cron quick run does not hide last night's bandwidth test). Outliers are nodes worse than
    the fleet median by more than ``margin_pct`` percent: below it for higher-is-better
    metrics, above it for metrics bounded only by a ``max``.
    """
    if not 0 <= margin_pct < 100:
        raise ConfigError(f"margin must be in [0, 100) percent, got {margin_pct:g}",
                          key="--margin")
    by_node: dict[str, list[Summary]] = {}
    unreadable: list[tuple[str, str]] = []
    for item in items:
        if "error" in item:
            unreadable.append((item["path"], item["error"]))
        else:
            by_node.setdefault(item["node"], []).append(item)
    nodes = []
    metrics: dict[str, MetricView] = {}
    for name in sorted(by_node):
        history = sorted(by_node[name], key=lambda s: (s["finished"], s["report_id"]))
        nodes.append(NodeView(name, history))
        seen: set[str] = set()
        for summary in reversed(history):
            for key, (unit, sense, worst, entity, _median, _n) in summary["metrics"].items():
                if key in seen:
                    continue
                seen.add(key)
                view = metrics.get(key)
                if view is None:
                    view = metrics[key] = MetricView(key, unit, sense)
                view.values.append((name, worst, entity))
    margin = margin_pct / 100.0
    for view in metrics.values():
        ordered = sorted(value for _, value, _ in view.values)
        median = _percentile(ordered, 0.5)
        view.stats = {
            "n": float(len(ordered)), "min": ordered[0], "p5": _percentile(ordered, 0.05),
            "p25": _percentile(ordered, 0.25), "median": median,
            "p75": _percentile(ordered, 0.75), "p95": _percentile(ordered, 0.95),
            "max": ordered[-1],
        }
        if median == 0 or len(ordered) < 3:
            continue  # no meaningful relative margin (error counters, tiny fleets)
        for node, value, entity in view.values:
            deviation = (value - median) / abs(median)
            worse = deviation < -margin if view.direction == "higher" else deviation > margin
            if worse:
                view.outliers.append(Outlier(node, entity, value, round(deviation * 100, 2)))
        view.outliers.sort(key=lambda o: abs(o.deviation_pct), reverse=True)
    ordered_metrics = sorted(metrics.values(), key=lambda m: (not m.outliers, m.key))
    return FleetView(root, margin_pct, nodes, ordered_metrics, unreadable, parsed)


def aggregate(root: str | os.PathLike[str], *, margin_pct: float = 10.0,
              cache: Path | bool | None = True, jobs: int | None = None,
              strict: bool = False) -> FleetView:
    """The fleet view of every report below ``root`` (recursively)."""
    base = Path(root)
    items, parsed = summaries(base, cache=cache, jobs=jobs, strict=strict)
    return build_view(base, items, margin_pct=margin_pct, parsed=parsed)
