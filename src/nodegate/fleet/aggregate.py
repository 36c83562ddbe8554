"""The fleet view: many node reports in, per-node verdicts, per-metric distributions and
cross-node outliers out.

Scale shapes this module. A standard 8-GPU report is ~190 KB of JSON with ~400 results, so
10,000 of them are ~2 GB that no Python parser reads in seconds. Each file is reduced to a
small *summary* (verdict, failing checks, per metric group the node's worst and median value):

- Fast path: the node's writer already computed the results' part of it, the ``digest``
  (``nodegate.report.digest``), and wrote it just before ``results``. Only the first
  ``PREFIX_BYTES`` of the file are read; the head is used when its digest is of this version,
  agrees with the head's ``report_id``/``counts``/``verdict``, and its ``tail_bytes`` matches
  the file's size (the body is still the one it was computed from).
- Slow path, for anything else (reports written before the digest, another digest version,
  a digest that fails those checks): decode up to the end of ``results`` and compute the
  summary; if the file embeds a digest of this version it must equal the recomputed one, or
  the file is reported unreadable (``key $.digest...``) instead of being half believed.

Summaries are cached per file keyed by (size, mtime, inode) in the user's cache directory:
a re-run reads only new or changed reports. Neither path runs the JSON Schema; ``strict=True``
validates every file fully with ``nodegate.report.load`` instead (which also checks the digest
against the results) and bypasses the cache.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import marshal
import math
import os
import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from json.decoder import scanstring  # type: ignore[attr-defined]
from pathlib import Path
from stat import S_ISREG
from typing import Any

from nodegate.errors import ConfigError
from nodegate.report import digest as report_digest
from nodegate.report.digest import direction, entity_kind
from nodegate.report.model import SCHEMA_ID, parse_timestamp
from nodegate.vocabulary import FAILING, LEVELS
from nodegate.vocabulary import VERDICT_RANK_BY_NAME as VERDICT_RANK

__all__ = [
    "FleetView", "MetricView", "NodeView", "Outlier", "Swap", "aggregate", "build_view",
    "direction", "entity_kind", "fast_summary", "read_head", "scan", "slow_summary", "split_head",
    "summaries", "summarize", "summarize_file", "summary_from_prefix",
]

#: Bump when the summary shape changes: old cache entries are then ignored.
SUMMARY_VERSION = 3

#: Top-level keys a summary needs; ``series`` and ``matrices`` are not among them.
NEEDED = frozenset({
    "schema", "report_id", "node", "profile", "level", "started_at", "finished_at",
    "verdict", "counts", "results",
})
HEAD_NEEDED = NEEDED - {"results"}
BULK = frozenset({"series", "matrices"})

#: How much of each file the fast path reads. A writer's head (metadata, labels, counts,
#: digest) is 2-4 KB; big labels or an odd key order fall back to the slow path, not fail.
PREFIX_BYTES = 16384
#: A report is a few KiB to a few MiB (series included); anything far larger is not one.
MAX_REPORT_BYTES = 256 * 1024 * 1024

Summary = dict[str, Any]

_decoder = json.JSONDecoder()
_WS = re.compile(r"[ \t\n\r]*")
_RESULTS_KEY = b'"results"'


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


def split_head(prefix: bytes) -> tuple[dict[str, Any], int] | None:
    """The top-level members before the ``"results"`` key, and that key's byte offset; None
    when ``prefix`` does not reach it.

    Each occurrence of ``"results"`` is tried as the cut: the bytes before it, closed with
    ``}``, parse as an object only when the cut is between two top-level members (inside a
    string or a nested value the brackets or quotes cannot balance), so one C-speed
    ``json.loads`` replaces a key-by-key decode.
    """
    at = prefix.find(_RESULTS_KEY)
    while at >= 0:
        before = prefix[:at].rstrip()
        if before.endswith(b","):
            try:
                head = _decoder.decode((before[:-1] + b"}").decode("utf-8"))
            except ValueError:  # also UnicodeDecodeError
                head = None
            if isinstance(head, dict):
                return head, at
        at = prefix.find(_RESULTS_KEY, at + 1)
    return None


def _head_fields(data: Mapping[str, Any], *, path: str) -> Summary:
    """The summary fields that come from the report's head, not its results."""
    labels = data.get("labels") or {}
    return {
        "v": SUMMARY_VERSION,
        "path": path,
        "report_id": str(data["report_id"]),
        "node": str(labels.get("slurm_node") or data["node"]),
        "host": str(data["node"]),
        "profile": str(data["profile"]),
        # a suite outside the battery (multinode) is its own row, never the level it is filed as
        "level": str(labels.get("suite") or data["level"]),
        "started_at": str(data["started_at"]),
        "finished_at": str(data["finished_at"]),
        "finished": parse_timestamp(data["finished_at"]).timestamp(),
        "verdict": str(data["verdict"]),
        "counts": dict(data["counts"]),
        "gpus": _identities(data.get("gpus")),
    }


def _identities(raw: Any) -> dict[str, dict[str, str]]:
    """The head's ``gpus`` map, string fields only: a malformed map costs the identities of
    that report (no swap is claimed from it), never the report's verdict."""
    if not isinstance(raw, Mapping):
        return {}
    return {str(entity): {str(k): v for k, v in ident.items() if isinstance(v, str) and v}
            for entity, ident in raw.items() if isinstance(ident, Mapping)}


def _with_digest(summary: Summary, digest: Mapping[str, Any]) -> Summary:
    """Add the results' part (the digest's lists are used as they are: fresh from
    ``json.loads`` or ``compute``, nobody else holds them)."""
    counts = digest["counts"]
    summary["failing"] = digest["failing"]
    summary["n_failing"] = counts["FAIL"] + counts["ERROR"]
    summary["n_results"] = sum(counts.values())
    summary["metrics"] = digest["metrics"]
    return summary


def summary_from_prefix(prefix: bytes, size: int, *, path: str) -> Summary | None:
    """The summary from the first bytes of a ``size``-byte file, or None when only the slow
    path can say (no digest, another digest version, or one that fails the cheap checks)."""
    split = split_head(prefix)
    if split is None:
        return None
    head, at = split
    if head.get("schema") != SCHEMA_ID or not head.keys() >= HEAD_NEEDED:
        return None
    digest = head.get("digest")
    if report_digest.agrees_with_head(digest, head) is not None:
        return None
    assert isinstance(digest, Mapping)
    if digest.get("tail_bytes") != size - at:
        return None  # cut short, rewritten or reformatted since: the slow path decides
    labels = head.get("labels")
    if labels is not None and not isinstance(labels, Mapping):
        return None
    return _with_digest(_head_fields(head, path=path), digest)


def summarize(data: Mapping[str, Any], *, path: str) -> Summary:
    """The small, cacheable digest of one report (raises ValueError when it is not one, and
    ConfigError when its embedded digest disagrees with its results)."""
    if data.get("schema") != SCHEMA_ID:
        raise ValueError(f"not a {SCHEMA_ID} report (schema {data.get('schema')!r})")
    missing = sorted(NEEDED - data.keys())
    if missing:
        raise ValueError(f"missing key $.{missing[0]}")
    results = data["results"]
    if not isinstance(results, list):
        raise ValueError("$.results is not a list")
    computed = report_digest.compute(results, str(data["report_id"]))
    tally = computed["counts"]
    if (tally["FAIL"] or tally["ERROR"]) and data["verdict"] not in FAILING:
        raise ValueError(f"verdict {data['verdict']} disagrees with its failing results")
    counts = data["counts"]
    if not isinstance(counts, Mapping) or dict(counts) != tally:
        raise ValueError(f"$.counts {counts!r} disagree with the results ({tally})")
    report_digest.check(data, source=path, computed=computed)
    return _with_digest(_head_fields(data, path=path), computed)


def fast_summary(path: str | os.PathLike[str], rel: str) -> Summary | None:
    """The summary from the head of one file, None when the slow path must read it (which
    also reports, with the real reason, a file that cannot be read at all)."""
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            prefix = os.read(fd, PREFIX_BYTES)
        finally:
            os.close(fd)
        return summary_from_prefix(prefix, size, path=rel)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def slow_summary(path: Path, rel: str, strict: bool = False) -> Summary:
    """Decode the file (or, ``strict``, load and fully validate it) and summarize it; an
    unreadable one becomes ``{"error": ...}``, not a crash: one corrupt report must not hide
    a fleet of 10,000."""
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


def summarize_file(path: Path, rel: str, strict: bool = False) -> Summary:
    """One file's summary: from its head when it can be trusted, else by decoding it."""
    if not strict:
        fast = fast_summary(path, rel)
        if fast is not None:
            return fast
    return slow_summary(path, rel, strict)


def _slow_batch(root: str, rels: Sequence[str], strict: bool) -> list[Summary]:
    base = Path(root)
    return [slow_summary(base / rel, rel, strict) for rel in rels]


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


#: Stamps of what is listed but never opened: a broken link or loop, a FIFO or device (opening
#: a FIFO blocks for ever), a file too large to be a report.
UNREADABLE: dict[int, str] = {
    -1: "cannot be read (a broken or looping symbolic link)",
    -2: "not a regular file",
    -3: f"larger than {MAX_REPORT_BYTES // (1024 * 1024)} MiB: not a report",
}


def _stamp(entry: os.DirEntry[str]) -> tuple[int, int, int]:
    """(size, mtime, inode) of a report file, or an UNREADABLE code in the size slot."""
    try:
        stat = entry.stat()  # follows a link: a loop raises ELOOP here
    except OSError:
        return (-1, 0, 0)
    if not S_ISREG(stat.st_mode):
        return (-2, 0, 0)
    if stat.st_size > MAX_REPORT_BYTES:
        return (-3, 0, 0)
    return (stat.st_size, stat.st_mtime_ns, stat.st_ino)


def scan(root: Path) -> list[tuple[str, tuple[int, int, int]]]:
    """Every ``*.json`` below ``root`` (hidden names skipped) with its (size, mtime, inode)."""
    found: list[tuple[str, tuple[int, int, int]]] = []
    top = str(root)
    cut = len(os.path.join(top, ""))  # entry paths are <top>/<rel>: slice, not relpath
    stack = [top]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            name = entry.name
            if name.startswith("."):
                continue
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
            elif name.endswith(".json"):
                found.append((entry.path[cut:], _stamp(entry)))
    found.sort()
    return found


#: Files whose heads are read to tell whether the fleet is on disk rather than in the page
#: cache, and the median read time above which it is (cached: ~5 us; this VM's disk: ~300 us).
_PROBE = 32
_SLOW_READ_S = 50e-6


def _on_disk(paths: Sequence[str]) -> bool:
    """Whether reading these files' heads waits for the disk (median, so one preemption of a
    busy machine does not count); they are then in the page cache for the real pass."""
    times: list[float] = []
    for path in paths:
        started = time.perf_counter()
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.read(fd, PREFIX_BYTES)
        except OSError:
            continue
        finally:
            os.close(fd)
        times.append(time.perf_counter() - started)
    return bool(times) and sorted(times)[len(times) // 2] > _SLOW_READ_S


def _prefetch(paths: Sequence[str]) -> None:
    """Ask the kernel to start reading every file's head now (``POSIX_FADV_WILLNEED``), so a
    first run after a reboot waits for one deep disk queue, not 10,000 reads in a row
    (measured: 3 s of reads became ~1.2 s). Best effort; costs one extra open per file."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        return
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            advise(fd, 0, PREFIX_BYTES, os.POSIX_FADV_WILLNEED)
        except OSError:
            pass
        finally:
            os.close(fd)


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
    out, todo, stamps = _triage(files, cached)
    # heads first, in this process: a few KB per file, cheaper than shipping summaries back
    # from workers; only what needs a full decode goes to the pool
    slow = todo if strict else _fast_pass(root, todo, out)
    _slow_pass(root, slow, strict, jobs, out)
    if todo or len(cached) != len(stamps):
        _save_cache(cache_file, {rel: [stamps[rel], out[rel]] for rel in stamps})
    return [out[rel] for rel, _ in files], len(todo)


def _triage(files: list[tuple[str, tuple[int, int, int]]], cached: dict[str, Any],
            ) -> tuple[dict[str, Summary], list[str], dict[str, list[int]]]:
    """Split the scanned files into summaries known already (unreadable, or cached with the
    same stamp) and the paths to parse now; also returns every readable file's stamp."""
    out: dict[str, Summary] = {}
    todo: list[str] = []
    stamps: dict[str, list[int]] = {}
    for rel, stamp in files:
        if stamp[0] < 0:  # listed, never opened
            out[rel] = {"v": SUMMARY_VERSION, "path": rel, "error": UNREADABLE[stamp[0]]}
            continue
        stamps[rel] = list(stamp)
        entry = cached.get(rel)
        if entry is not None and entry[0] == stamps[rel]:
            out[rel] = entry[1]
        else:
            todo.append(rel)
    return out, todo, stamps


def _fast_pass(root: Path, todo: list[str], out: dict[str, Summary]) -> list[str]:
    """Summarise from the file heads what can be (into ``out``); the rest need a full decode."""
    slow: list[str] = []
    paths = [os.path.join(str(root), rel) for rel in todo]
    if len(paths) > 4 * _PROBE and _on_disk(paths[:_PROBE]):
        _prefetch(paths[_PROBE:])
    for index, rel in enumerate(todo):
        fast = fast_summary(paths[index], rel)
        if fast is None:
            slow.append(rel)
        else:
            out[rel] = fast
    return slow


def _slow_pass(root: Path, slow: list[str], strict: bool, jobs: int | None,
               out: dict[str, Summary]) -> None:
    """Fully decode ``slow`` into ``out``: in a process pool only when there are enough files
    to pay for starting it."""
    workers = jobs if jobs is not None else min(4, os.cpu_count() or 1)
    if workers > 1 and len(slow) >= 400:
        size = max(50, len(slow) // (workers * 4))
        batches = [slow[i : i + size] for i in range(0, len(slow), size)]
        with ProcessPoolExecutor(max_workers=workers) as pool:
            done = pool.map(_slow_batch, [str(root)] * len(batches), batches,
                            [strict] * len(batches))
            for batch in done:
                for summary in batch:
                    out[summary["path"]] = summary
    else:
        for summary in _slow_batch(str(root), slow, strict):
            out[summary["path"]] = summary


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
    nodes, metrics = _node_values(by_node)
    margin = margin_pct / 100.0
    for view in metrics.values():
        _score_metric(view, margin)
    ordered_metrics = sorted(metrics.values(), key=lambda m: (not m.outliers, m.key))
    return FleetView(root, margin_pct, nodes, ordered_metrics, unreadable, parsed)


def _node_values(by_node: dict[str, list[Summary]],
                 ) -> tuple[list[NodeView], dict[str, MetricView]]:
    """Each node's history (oldest first) and, per metric, every node's value taken from its
    newest report that measured the metric."""
    nodes = []
    metrics: dict[str, MetricView] = {}
    for name in sorted(by_node):
        history = by_node[name]
        if len(history) > 1:
            history.sort(key=lambda s: (s["finished"], s["report_id"]))
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
    return nodes, metrics


def _score_metric(view: MetricView, margin: float) -> None:
    """Fill in ``view``'s fleet statistics and its outliers (worst first)."""
    ordered = sorted(value for _, value, _ in view.values)
    median = _percentile(ordered, 0.5)
    view.stats = {
        "n": float(len(ordered)), "min": ordered[0], "p5": _percentile(ordered, 0.05),
        "p25": _percentile(ordered, 0.25), "median": median,
        "p75": _percentile(ordered, 0.75), "p95": _percentile(ordered, 0.95),
        "max": ordered[-1],
    }
    if median == 0 or len(ordered) < 3:
        return  # no meaningful relative margin (error counters, tiny fleets)
    scale = abs(median)
    higher = view.direction == "higher"
    for node, value, entity in view.values:
        # most nodes sit on the worse-than-median side of nothing: skip them cheaply
        if (value >= median) if higher else (value <= median):
            continue
        deviation = (value - median) / scale
        if deviation < -margin if higher else deviation > margin:
            view.outliers.append(Outlier(node, entity, value, round(deviation * 100, 2)))
    view.outliers.sort(key=lambda o: abs(o.deviation_pct), reverse=True)


def aggregate(root: str | os.PathLike[str], *, margin_pct: float = 10.0,
              cache: Path | bool | None = True, jobs: int | None = None,
              strict: bool = False) -> FleetView:
    """The fleet view of every report below ``root`` (recursively)."""
    base = Path(root)
    with _gc_paused():
        items, parsed = summaries(base, cache=cache, jobs=jobs, strict=strict)
        return build_view(base, items, margin_pct=margin_pct, parsed=parsed)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Building ~1M small acyclic objects (10,000 summaries) sets off repeated garbage
    collections that walk all of them: about half a warm run. Nothing here makes cycles, so
    the collector is paused; on the way out everything is moved to the oldest generation
    (``freeze`` then ``unfreeze``) rather than scanned once more as one huge young one."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.freeze()
            gc.unfreeze()
            gc.enable()
