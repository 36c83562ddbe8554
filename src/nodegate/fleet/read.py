"""Reading a fleet directory: one small summary per node report, for the fleet view.

A report ``<stem>.json`` written by a current node has its fleet summary beside it,
``<stem>.summary.json`` (``nodegate.report.fleet_summary``): ~2 KB, read whole with
``json.loads`` and used when ``fleet_summary.problem`` finds nothing wrong with it (its
version, its shape, and the report's size it was written for). Every other report (written
before summaries, a summary missing, corrupt, of another version, or for a report rewritten
since) is parsed in full with ``json`` and summarized by the same ``from_report`` the writer
uses, so the view is the same either way; the caller is told how many were read like that.
A report that cannot be parsed at all becomes ``{"path", "error"}``, listed as unreadable.

There is no summary cache: a cold run over 10,000 summaries is within the 2 s target
(docs/benchmarks.md), and a cache would be one more thing that can be stale.
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from stat import S_ISREG
from typing import Any

from nodegate.errors import ConfigError
from nodegate.fileio import read_bytes
from nodegate.report import fleet_summary
from nodegate.report.model import decode, load, parse_timestamp
from nodegate.report.order import key_of

__all__ = ["MAX_REPORT_BYTES", "UNREADABLE", "History", "Summary", "entry",
           "from_report_file", "from_summary", "read_files", "scan", "summaries"]

#: A report is a few KiB to a few MiB (series included); anything far larger is not one.
MAX_REPORT_BYTES = 256 * 1024 * 1024
#: A summary is ~3 KB (more with many failing ids); far larger is not one.
MAX_SUMMARY_BYTES = 1024 * 1024
#: Threads reading summary files, and files per task (``read_files``).
READERS = 4
READ_CHUNK = 128

#: One report as the fleet view holds it (``entry``), or ``{"path", "error"}``.
Summary = dict[str, Any]

#: Codes, in the size slot of ``scan``, of what is listed but never opened: a broken link or
#: loop, a FIFO or device (opening a FIFO blocks for ever), a file too large to be a report.
UNREADABLE: dict[int, str] = {
    -1: "cannot be read (a broken or looping symbolic link)",
    -2: "not a regular file",
    -3: f"larger than {MAX_REPORT_BYTES // (1024 * 1024)} MiB: not a report",
}


def entry(summary: dict[str, Any], rel: str) -> Summary:
    """What the view keeps of one report: the summary's fields plus the report's path, its
    finish time as a number (history order) and the counts it derives from (raises
    ValueError on a finish time that does not parse)."""
    digest = summary["digest"]
    counts = summary["counts"]
    try:
        finished = parse_timestamp(summary["finished_at"]).timestamp()
    except ValueError as exc:
        raise ValueError(f"key $.finished_at: {exc}") from None
    n_results = sum(counts.values())
    verdict, failing, n_failing = summary["verdict"], digest["failing"], \
        counts["FAIL"] + counts["ERROR"]
    if not n_results:  # nothing was judged: no evidence of health (docs/verdicts.md)
        verdict, failing, n_failing = "ERROR", [NO_RESULTS], 1
    order = {key: summary[key] for key in fleet_summary.ORDER_TYPES if key in summary}
    return {
        "path": rel,
        "report_id": summary["report_id"],
        "node": summary["node"],
        "host": summary["host"],
        "profile": summary["profile"],
        "level": summary["level"],
        "started_at": summary["started_at"],
        "finished_at": summary["finished_at"],
        "finished": finished,
        "verdict": verdict,
        "counts": counts,
        "gpus": summary["gpus"],
        "failing": failing,
        "n_failing": n_failing,
        "n_results": n_results,
        "metrics": digest["metrics"],
        **order,
        "order": key_of(order.get("sequence"), order.get("boottime_s"), finished,
                        summary["report_id"]),
    }


#: What a report of no results shows as failing: nothing was judged, so it is ERROR.
NO_RESULTS = "no results (no check ran: nothing was judged)"


class History:
    """Keeps a fleet's history small while it is read: 10,000 nodes x 30 reports is 300,000
    entries, ~13 KB each in full.

    Every entry's trend metrics (``keep``) go into packed per-node series (``points``: node ->
    metric key -> ``array('d')`` of finish time, worst value, ...). The newest entry of each
    (node, level) keeps its metrics, which the fleet view compares across nodes; every older
    one drops them (their trends are in ``points``) and shares its card identities with the
    node's previous entry when they are the same.
    """

    def __init__(self, keep: Callable[[str], bool]) -> None:
        self.keep = keep
        self.points: dict[str, dict[str, array[float]]] = {}
        self.shapes: dict[str, tuple[str, str]] = {}  # metric key -> (unit, direction)
        self._newest: dict[tuple[str, str], Summary] = {}
        self._gpus: dict[str, dict[str, Any]] = {}
        self._kept: dict[str, bool] = {}  # keep() per metric key, asked once
        self._seen: set[str] = set()  # report ids

    def add(self, item: Summary) -> None:
        """Take ``item`` in (a second copy of a report already seen, such as the
        ``<level>-latest.json`` beside its dated original, is flagged ``duplicate``)."""
        if "error" in item:
            return
        if item["report_id"] in self._seen:
            item["duplicate"] = True
            item["metrics"] = {}
            return
        self._seen.add(item["report_id"])
        node = item["node"]
        series = self.points.setdefault(node, {})
        finished = item["finished"]
        kept = self._kept
        for key, metric in item["metrics"].items():
            keep = kept.get(key)
            if keep is None:
                keep = kept[key] = self.keep(key)
            if keep:
                packed = series.get(key)
                if packed is None:
                    packed = series[key] = array("d")
                    self.shapes.setdefault(key, (metric[0], metric[1]))
                packed.append(finished)
                packed.append(metric[2])
        gpus = item["gpus"]
        if gpus and self._gpus.get(node) == gpus:
            item["gpus"] = self._gpus[node]
        else:
            self._gpus[node] = gpus
        slot = (node, item["level"])
        previous = self._newest.get(slot)
        if previous is None:
            self._newest[slot] = item
        elif item["order"] > previous["order"]:
            self._newest[slot] = item
            previous["metrics"] = {}
        else:
            item["metrics"] = {}


def from_summary(raw: bytes | None, rel: str, report_bytes: int) -> Summary | None:
    """The entry from a summary file's bytes (None: no file) for a report of
    ``report_bytes`` bytes now; None when this reader cannot trust it and the report must be
    parsed."""
    if raw is None or len(raw) > MAX_SUMMARY_BYTES:
        return None
    try:
        data = decode(raw)
        if fleet_summary.problem(data, report_bytes) is not None:
            return None
        return entry(data, rel)
    except ValueError:  # not JSON, nested too deeply, not UTF-8, a bad finished_at
        return None


def _read_chunk(paths: Sequence[str]) -> list[bytes | None]:
    out: list[bytes | None] = []
    for path in paths:
        try:
            out.append(read_bytes(path, kind="summary", limit=MAX_SUMMARY_BYTES))
        except (OSError, ConfigError):
            out.append(None)
    return out


def read_files(paths: Sequence[str]) -> Iterator[bytes | None]:
    """Each file's bytes (None when it cannot be read), in order. Threads read them: on a
    cold page cache each read waits for the disk, and reads waiting together finish sooner
    than one after another (measured: 10,000 summaries 1.0 s in a row, 0.5 s in 4 threads),
    while this thread parses what has arrived."""
    chunks = [paths[i : i + READ_CHUNK] for i in range(0, len(paths), READ_CHUNK)]
    if len(chunks) < 2:
        yield from _read_chunk(paths)
        return
    with ThreadPoolExecutor(max_workers=READERS) as pool:
        for chunk in pool.map(_read_chunk, chunks):
            yield from chunk


def from_report_file(path: Path, rel: str, strict: bool = False) -> Summary:
    """Parse the report itself (``strict``: load and validate it against the full schema)
    and summarize it; one that cannot be is ``{"path", "error"}``, not a crash: one corrupt
    report must not hide a fleet of 10,000."""
    try:
        if strict:
            data: Any = load(path).to_dict()
        else:
            data = decode(read_bytes(path, kind="report", limit=MAX_REPORT_BYTES))
        if not isinstance(data, dict):
            raise ValueError("top level is not a JSON object")
        return entry(fleet_summary.from_report(data, source=rel), rel)
    except ConfigError as exc:
        return {"path": rel, "error": exc.message + (f" (key {exc.key})" if exc.key else "")}
    except (OSError, ValueError, KeyError, TypeError, AttributeError, OverflowError,
            RecursionError) as exc:
        text = str(exc)
        text = text if len(text) <= 160 else text[:157] + "..."
        return {"path": rel, "error": f"{type(exc).__name__}: {text}"}


def _report_batch(root: str, rels: Sequence[str], strict: bool) -> list[Summary]:
    base = Path(root)
    return [from_report_file(base / rel, rel, strict) for rel in rels]


def _size(entry_: os.DirEntry[str]) -> int:
    """A report file's size, or an UNREADABLE code."""
    try:
        stat = entry_.stat()  # follows a link: a loop raises ELOOP here
    except OSError:
        return -1
    if not S_ISREG(stat.st_mode):
        return -2
    if stat.st_size > MAX_REPORT_BYTES:
        return -3
    return stat.st_size


def scan(root: Path) -> list[tuple[str, int, bool]]:
    """Every report below ``root``: ``*.json`` that is not a summary, hidden names skipped,
    with its size (or UNREADABLE code) and whether a summary is beside it, sorted by path."""
    found: list[tuple[str, int, bool]] = []
    top = str(root)
    cut = len(os.path.join(top, ""))  # entry paths are <top>/<rel>: slice, not relpath
    stack = [top]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        names = {item.name for item in entries}
        for item in entries:
            name = item.name
            if name.startswith("."):
                continue
            if item.is_dir(follow_symlinks=False):
                stack.append(item.path)
            elif fleet_summary.is_report_name(name):
                beside = fleet_summary.name_for(name) in names
                found.append((item.path[cut:], _size(item), beside))
    found.sort()
    return found


def summaries(root: Path, *, jobs: int | None = None, strict: bool = False,
              history: History | None = None) -> tuple[list[Summary], int]:
    """The entry of every report below ``root`` (path order) and how many reports were
    parsed in full for want of a usable summary (``strict``: every one); ``history`` sees
    each entry as it is read (and keeps it small)."""
    if not root.is_dir():
        raise ConfigError("report directory not found", file=str(root))
    files = scan(root)
    out: dict[str, Summary] = {}
    todo: list[str] = []
    with_summary: list[tuple[str, int]] = []
    for rel, size, beside in files:
        if size < 0:
            out[rel] = {"path": rel, "error": UNREADABLE[size]}
        elif beside and not strict:
            with_summary.append((rel, size))
        else:
            todo.append(rel)
    top = os.path.join(str(root), "")
    raws = read_files([fleet_summary.name_for(top + rel) for rel, _ in with_summary])
    for (rel, size), raw in zip(with_summary, raws, strict=True):
        found = from_summary(raw, rel, size)
        if found is None:
            todo.append(rel)
        else:
            out[rel] = found
            if history is not None:
                history.add(found)
    _parse_reports(root, todo, strict, jobs, out)
    if history is not None:
        for rel in todo:
            history.add(out[rel])
    return [out[rel] for rel, _, _ in files], len(todo)


def _parse_reports(root: Path, rels: list[str], strict: bool, jobs: int | None,
                   out: dict[str, Summary]) -> None:
    """Parse ``rels`` in full into ``out``: in a process pool only when there are enough
    files to pay for starting it (a fleet of reports from before summaries)."""
    workers = jobs if jobs is not None else min(4, os.cpu_count() or 1)
    if workers > 1 and len(rels) >= 400:
        size = max(50, len(rels) // (workers * 4))
        batches = [rels[i : i + size] for i in range(0, len(rels), size)]
        with ProcessPoolExecutor(max_workers=workers) as pool:
            for batch in pool.map(_report_batch, [str(root)] * len(batches), batches,
                                  [strict] * len(batches)):
                for summary in batch:
                    out[summary["path"]] = summary
    else:
        for summary in _report_batch(str(root), rels, strict):
            out[summary["path"]] = summary
