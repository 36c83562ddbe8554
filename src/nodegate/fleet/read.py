"""Reading a fleet directory: one small summary per node report, for the fleet view.

A report ``<stem>.json`` written by a current node has its fleet summary beside it,
``<stem>.summary.json`` (``nodegate.report.fleet_summary``): ~2 KB, read whole with
``json.loads`` and used when ``fleet_summary.problem`` finds nothing wrong with it (its
version, its shape, and the report's size it was written for). Every other report (written
before summaries, a summary missing, corrupt, of another version, or for a report rewritten
since) is parsed in full with ``json`` and summarized by the same ``from_report`` the writer
uses, so the view is the same either way; the caller is told how many were read like that.
A report that cannot be parsed at all becomes ``{"path", "error"}``, listed as unreadable.

A fleet of ``CACHE_MIN_FILES`` reports or more keeps the entries made from its summaries in a
per-user cache (``SummaryCache``): a re-run decodes only the summaries that changed. An entry
is reused only while its summary file is the same one, unchanged (device, inode, size,
mtime_ns, ctime_ns) and its report has the size the entry was made for; anything else is read
again. Unreadable files, FIFOs and reports without a usable summary are never cached: they
are looked at on every run.

A read of ``SPLIT_MIN`` summaries or more (a first run: no cache yet), up to
``CACHE_MAX_FILES`` (a longer history is streamed in one process), is split over two
processes (``read_entries``): a forked child reads, decodes and checks the second part and
sends its entries back as ``marshal`` over a pipe while this process does the first part. A
child that does not deliver all of its part fails the read (``CannotRunError``, exit 3): no
partial view.
"""

from __future__ import annotations

import contextlib
import json
import marshal
import os
import signal
import zlib
from array import array
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from stat import S_ISREG
from typing import Any, NamedTuple

from nodegate.errors import CannotRunError, ConfigError
from nodegate.fileio import read_bytes
from nodegate.report import fleet_summary
from nodegate.report.model import decode, load, parse_timestamp
from nodegate.report.order import key_of

__all__ = ["CACHE_MIN_FILES", "MAX_REPORT_BYTES", "SPLIT_MIN", "UNREADABLE", "Entries",
           "History", "Summary", "SummaryCache", "default_cache_file", "entry",
           "from_report_file", "from_summary", "read_entries", "read_files", "scan",
           "summaries"]

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
        self._pack(node, item["finished"], item["metrics"])
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

    def _pack(self, node: str, finished: float, metrics: dict[str, Any]) -> None:
        """The trend metrics of one report onto ``node``'s packed series."""
        kept = self._kept
        series = self.points.get(node)
        if series is None:  # a node's first report (most of a fleet): each a new series
            series = self.points[node] = {}
            for key, metric in metrics.items():
                keep = kept.get(key)
                if keep is None:
                    keep = self._first_sight(key, metric)
                if keep:
                    series[key] = array("d", (finished, metric[2]))
            return
        for key, metric in metrics.items():
            keep = kept.get(key)
            if keep is None:
                keep = self._first_sight(key, metric)
            if keep:
                packed = series.get(key)
                if packed is None:  # a metric this node's earlier reports did not have
                    series[key] = array("d", (finished, metric[2]))
                else:
                    packed.append(finished)
                    packed.append(metric[2])

    def _first_sight(self, key: str, metric: Sequence[Any]) -> bool:
        """Whether the fleet's first metric ``key`` is a trend metric (asked once per key);
        its (unit, direction) kept if so."""
        keep = self._kept[key] = self.keep(key)
        if keep:
            self.shapes.setdefault(key, (metric[0], metric[1]))
        return keep


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


#: One decoder for every summary (``json.loads`` with an argument makes one a call), with
#: ``report.model.decode``'s rule: NaN and Infinity are no JSON numbers.
_SUMMARY_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def from_summary(raw: bytes | None, rel: str, report_bytes: int) -> Summary | None:
    """The entry from a summary file's bytes (None: no file) for a report of
    ``report_bytes`` bytes now; None when this reader cannot trust it and the report must be
    parsed (which gives the same entry, or says why the report cannot be read). A summary
    is UTF-8 as its writer writes it: one in another encoding, or with a byte-order mark, is
    not used."""
    if raw is None or len(raw) > MAX_SUMMARY_BYTES:
        return None
    try:
        data = _SUMMARY_DECODER.decode(raw.decode("utf-8"))
        if fleet_summary.problem(data, report_bytes) is not None:
            return None
        return entry(data, rel)
    except (ValueError, RecursionError):  # not JSON or UTF-8, too deep, a bad finished_at
        return None


#: A summary file's identity and state, and its report's size: (st_dev, st_ino, st_size,
#: st_mtime_ns, st_ctime_ns, report bytes). A cached entry is reused only while this is equal:
#: a file replaced (new inode), rewritten (size, mtime, ctime) or whose report changed size
#: is read again.
StatKey = tuple[int, int, int, int, int, int]


def _stat_key(info: os.stat_result, report_bytes: int) -> StatKey:
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns,
            report_bytes)


def _read_summary(path: str) -> tuple[bytes, os.stat_result] | None:
    """A summary's bytes and the ``fstat`` of what was read (the cache's key must be that
    of these bytes, not of a later replacement); None when it cannot be read. As
    ``fileio.read_bytes``: opened non-blocking, refused unless a regular file (a FIFO never
    blocks the reader), at most ``MAX_SUMMARY_BYTES``. Four system calls a file (open,
    fstat, read, close; ``O_NONBLOCK`` does nothing to a regular file's reads): on a cold
    page cache the kernel's share of 10,000 reads is a good part of the run."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not S_ISREG(info.st_mode) or info.st_size > MAX_SUMMARY_BYTES:
            return None
        data = os.read(fd, info.st_size + 1)  # fewer bytes: the end of the file
        while len(data) > info.st_size and len(data) <= MAX_SUMMARY_BYTES:  # it grew
            more = os.read(fd, MAX_SUMMARY_BYTES + 1 - len(data))
            if not more:
                break
            data += more
    except OSError:
        return None
    finally:
        os.close(fd)
    return (data, info) if len(data) <= MAX_SUMMARY_BYTES else None


def _read_chunk(paths: Sequence[str]) -> list[tuple[bytes, os.stat_result] | None]:
    return [_read_summary(path) for path in paths]


def read_files(paths: Sequence[str]) -> Iterator[tuple[bytes, os.stat_result] | None]:
    """Each summary file's bytes and ``fstat`` (None when it cannot be read), in order.
    Threads read them: on a cold page cache each read waits for the disk, and reads waiting
    together finish sooner than one after another (measured: 10,000 summaries 1.0 s in a
    row, 0.5 s in 4 threads), while this thread parses what has arrived."""
    chunks = [paths[i : i + READ_CHUNK] for i in range(0, len(paths), READ_CHUNK)]
    if len(chunks) < 2:
        yield from _read_chunk(paths)
        return
    from concurrent.futures import ThreadPoolExecutor  # here: a warm run reads few or none

    with ThreadPoolExecutor(max_workers=READERS) as pool:
        for chunk in pool.map(_read_chunk, chunks):
            yield from chunk


# --- the split read ---------------------------------------------------------------------------

#: Reads of this many summaries or more are split over two processes (``read_entries``): a
#: summary costs ~70 us to read, decode and check, forking and sending the entries back a
#: few milliseconds; below this a second process saves too little to be worth one.
SPLIT_MIN = 2000
#: The parent's share of a split read: more than half, as the child also pays for the fork
#: (its copy-on-write faults) and for encoding and sending its entries; at 0.45 the parent
#: waited for it, at 0.6 both end together (10,000 summaries: docs/dev/benchmarks.md).
SPLIT_SHARE = 0.6

#: rel path -> (the summary file's StatKey as read, the entry made from it): usable summaries.
Made = dict[str, tuple[StatKey, Summary]]
#: What ``read_entries`` reads: (rel path of the report, its size, its summary's path).
ToRead = tuple[str, int, str]


def _make(items: Sequence[ToRead]) -> Made:
    """Read, decode and check each summary of ``items``; the entries of the usable ones."""
    out: Made = {}
    reads = read_files([path for _, _, path in items])
    for (rel, size, _), read in zip(items, reads, strict=True):
        if read is not None:
            found = from_summary(read[0], rel, size)
            if found is not None:
                out[rel] = (_stat_key(read[1], size), found)
    return out


def _can_fork() -> bool:
    """A child by ``fork`` only from a process running one thread: a thread of the caller's
    holding a lock at the fork would leave the child's copy of that lock held for ever."""
    import threading

    return hasattr(os, "fork") and threading.active_count() == 1 and _cpus() >= 2


def _cpus() -> int:
    """The CPUs this process may run on: with one, a second process only adds its cost."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class Entries(NamedTuple):
    """What ``read_entries`` made, and the same entries as the parts they were made in: a
    forked child's part as the ``marshal`` it sent, which the cache stores as it is."""

    made: Made
    parts: list[Made | bytes]


def read_entries(items: Sequence[ToRead], *, split: bool = True) -> Entries:
    """The entries of the usable summaries of ``items``. ``split`` (and ``SPLIT_MIN`` items
    or more, and a process that may fork): the last ``1 - SPLIT_SHARE`` of them in a forked
    child, the rest here meanwhile; the same entries either way. Raises CannotRunError when
    the child does not deliver its part (killed, out of memory, a crash): no partial view."""
    if not split or len(items) < SPLIT_MIN or not _can_fork():
        made = _make(items)
        return Entries(made, [made])
    cut = int(len(items) * SPLIT_SHARE)
    return _split(items[:cut], items[cut:])


def _split(mine: Sequence[ToRead], theirs: Sequence[ToRead]) -> Entries:
    """``mine`` here, ``theirs`` in a forked child that sends its entries back as ``marshal``
    behind their length over a pipe and leaves with ``os._exit`` (none of this process's
    exit handlers or buffered output runs twice)."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child; what it sends is what the tests compare
        _child(rfd, wfd, theirs)
    os.close(wfd)
    blob = b""
    delivered = False
    try:
        made = _make(mine)
        with open(rfd, "rb", buffering=0, closefd=False) as pipe:
            blob = pipe.readall()
        delivered = True
    finally:
        os.close(rfd)
        if not delivered:  # interrupted here: the child goes too
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    body = blob[8:]
    if code != 0 or len(blob) < 8 or int.from_bytes(blob[:8], "big") != len(body):
        ended = f"was killed by signal {-code}" if code < 0 else f"exited {code}"
        raise CannotRunError(
            f"the second process reading fleet summaries {ended} before it delivered the "
            f"entries of its {len(theirs)} summaries ({len(blob)} bytes sent): no partial "
            f"view", file=os.path.dirname(theirs[0][2]))
    del blob
    return Entries({**made, **marshal.loads(body)}, [made, body])


def _child(rfd: int, wfd: int, items: Sequence[ToRead]) -> None:  # pragma: no cover
    """The forked child of ``_split``: never returns."""
    status = 1
    try:
        os.close(rfd)
        body = marshal.dumps(_make(items))
        with open(wfd, "wb", closefd=False) as pipe:
            pipe.write(len(body).to_bytes(8, "big"))
            pipe.write(body)
        status = 0
    except BaseException as exc:  # reported here; the exit status tells the parent
        with contextlib.suppress(OSError):
            os.write(2, f"nodegate report: summary reader child: {exc!r}\n".encode())
    finally:
        os._exit(status)


# --- the summary cache ------------------------------------------------------------------------

#: Bump when ``entry`` changes what it makes: every older cache is then ignored. The cache
#: is also keyed on this module's and the summary checker's files (an upgrade that forgot to
#: bump it still starts afresh).
CACHE_VERSION = 2
#: Fleets with fewer reports are read without a cache (``summaries(cache=True)``): they
#: read in well under 0.1 s, and a test's or a one-node folder needs no file in ~/.cache.
CACHE_MIN_FILES = 500
#: ... and with more (a long history: 10,000 nodes x 30 reports) too: the cache would hold
#: every report's metrics in memory, which the history reader drops as it goes. Such a
#: fleet is read in one process, streamed (no split read: it holds its part's entries whole).
CACHE_MAX_FILES = 50_000
_MAGIC = b"NGFC"

#: rel path -> (StatKey, the entry as ``entry`` made it)
CacheEntries = dict[str, tuple[StatKey, Summary]]


def default_cache_file(root: Path) -> Path:
    """The per-user cache file for one report directory (by its resolved path)."""
    import hashlib

    from nodegate.paths import cache_dir

    name = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]
    return cache_dir() / "fleet" / f"{name}.marshal"


def _code_stamp() -> tuple[object, ...]:
    """What the cached entries were made by: the version and the files of the code."""
    stamp: list[object] = [CACHE_VERSION, fleet_summary.SCHEMA_ID]
    for module_file in (__file__, fleet_summary.__file__):
        try:
            info = os.stat(module_file)
            stamp += [info.st_size, info.st_mtime_ns]
        except (OSError, TypeError):
            stamp.append(None)
    return tuple(stamp)


class SummaryCache:
    """The entries made from a fleet's summaries, in one file: ``marshal`` (loading it runs
    no code, unlike pickle) of the code's stamp and a list of parts, each the ``marshal`` of
    a dict of entries (a split read's two), behind a magic and a CRC-32 of the rest, so a
    torn or damaged file is ignored, never half believed; a file not owned by this user or
    writable by others is ignored too. Written to a temporary name and renamed over
    (atomic), without fsync: a file lost in a crash only costs the next run its speed. Best
    effort both ways: a cache that cannot be read or written costs speed, never the
    report."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.stamp = _code_stamp()

    def load(self) -> CacheEntries:
        from nodegate.errors import ConfigError
        from nodegate.fileio import MiB, read_bytes

        try:  # the one reader: a FIFO at the cache's path is refused, never waited on
            info = os.stat(self.path)
            if info.st_uid != os.getuid() or info.st_mode & 0o022 or \
                    not S_ISREG(info.st_mode):
                return {}
            blob = read_bytes(self.path, kind="cache", limit=1024 * MiB)
        except (OSError, ConfigError):
            return {}
        body = memoryview(blob)[8:]
        if blob[:4] != _MAGIC or int.from_bytes(blob[4:8], "big") != zlib.crc32(body):
            return {}
        try:
            stamp, parts = marshal.loads(body)
            if stamp != self.stamp or type(parts) is not list:
                return {}
            entries: CacheEntries = {}
            for part in parts:
                loaded = marshal.loads(part)
                if type(loaded) is not dict:
                    return {}
                entries.update(loaded)
        except (EOFError, ValueError, TypeError):
            return {}
        return entries

    def save(self, parts: Sequence[CacheEntries | bytes]) -> None:
        """The entries of ``parts``: each a dict of entries, or one already in ``marshal``
        (a forked child's part as it sent it: not encoded twice)."""
        chunks = [part if isinstance(part, bytes) else marshal.dumps(part) for part in parts]
        payload: Any = (self.stamp, chunks)  # marshal's stub types no nested containers
        body = marshal.dumps(payload)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            with open(fd, "wb") as handle:
                handle.write(_MAGIC + zlib.crc32(body).to_bytes(4, "big"))
                handle.write(body)
            os.replace(tmp, self.path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _cache_for(cache: Path | bool | None, root: Path, count: int) -> SummaryCache | None:
    """``cache``: a file, True for the default one (fleets of ``CACHE_MIN_FILES`` reports or
    more), False/None for none; none either way beyond ``CACHE_MAX_FILES``."""
    if not cache or count > CACHE_MAX_FILES:
        return None
    if isinstance(cache, Path):
        return SummaryCache(cache)
    return SummaryCache(default_cache_file(root)) if count >= CACHE_MIN_FILES else None


def _summary_stats(paths: Sequence[str]) -> list[os.stat_result | None]:
    out: list[os.stat_result | None] = []
    for path in paths:
        try:
            out.append(os.stat(path))
        except OSError:
            out.append(None)
    return out


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
              history: History | None = None,
              cache: Path | bool | None = True) -> tuple[list[Summary], int]:
    """The entry of every report below ``root`` (path order) and how many reports were
    parsed in full for want of a usable summary (``strict``: every one, no cache);
    ``history`` sees each entry as it is read (and keeps it small); ``cache``: as
    ``_cache_for``."""
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
    paths = [fleet_summary.name_for(top + rel) for rel, _ in with_summary]
    store = None if strict else _cache_for(cache, root, len(with_summary))
    split = jobs is None or jobs > 1
    if store is None:
        _without_cache(with_summary, paths, out=out, todo=todo, history=history, split=split)
    else:
        _from_cache(store, with_summary, paths, out=out, todo=todo, history=history,
                    split=split)
    _parse_reports(root, todo, strict, jobs, out)
    if history is not None:
        for rel in todo:
            history.add(out[rel])
    return [out[rel] for rel, _, _ in files], len(todo)


def _without_cache(with_summary: Sequence[tuple[str, int]], paths: Sequence[str], *,
                   out: dict[str, Summary], todo: list[str], history: History | None,
                   split: bool) -> None:
    """``summaries`` without a cache: every summary read (``read_entries``), but a long
    history's in one process, each entry to ``history`` as it is read: it drops the metrics
    of older reports as it goes (300,000 entries held at once would be ~4 GB)."""
    if len(with_summary) > CACHE_MAX_FILES:
        for (rel, size), read in zip(with_summary, read_files(paths), strict=True):
            found = from_summary(None if read is None else read[0], rel, size)
            _take(rel, found, out, todo, history)
        return
    made = read_entries([(rel, size, path) for (rel, size), path
                         in zip(with_summary, paths, strict=True)], split=split).made
    for rel, _ in with_summary:
        hit = made.get(rel)
        _take(rel, None if hit is None else hit[1], out, todo, history)


def _take(rel: str, found: Summary | None, out: dict[str, Summary], todo: list[str],
          history: History | None) -> None:
    """An entry made from a summary goes to ``out`` (and ``history``); None: parse the report."""
    if found is None:
        todo.append(rel)
    else:
        out[rel] = found
        if history is not None:
            history.add(found)


def _from_cache(store: SummaryCache, with_summary: Sequence[tuple[str, int]],
                paths: Sequence[str], *, out: dict[str, Summary], todo: list[str],
                history: History | None, split: bool) -> None:
    """``summaries`` with a cache: entries whose key is unchanged come from it, the rest are
    read (``read_entries``: split over two processes when there are many, as on a first
    run); ``history`` sees them in path order all the same (which of two copies of a report
    it calls the duplicate depends on it); the cache is rewritten when anything in it
    changed."""
    cached = store.load()
    # with nothing cached (a first run) every summary is read: no stat of each first
    stats = _summary_stats(paths) if cached else [None] * len(paths)
    keys = [None if info is None else _stat_key(info, size)
            for (_, size), info in zip(with_summary, stats, strict=True)]
    misses = [(rel, size, path) for (rel, size), key, path
              in zip(with_summary, keys, paths, strict=True)
              if key is None or rel not in cached or cached[rel][0] != key]
    got = read_entries(misses, split=split)
    made = got.made
    fresh: CacheEntries = {}
    for (rel, _), key in zip(with_summary, keys, strict=True):
        hit = cached.get(rel)
        if hit is None or key is None or hit[0] != key:
            hit = made.get(rel)
        if hit is not None:
            fresh[rel] = hit
            _take(rel, dict(hit[1]), out, todo, history)  # a copy: history edits it
        else:
            _take(rel, None, out, todo, history)
    if not cached and made:  # a first run: the cache is what was read, part for part
        store.save(got.parts)
    elif made or fresh.keys() != cached.keys():
        store.save([fresh])


def _parse_reports(root: Path, rels: list[str], strict: bool, jobs: int | None,
                   out: dict[str, Summary]) -> None:
    """Parse ``rels`` in full into ``out``: in a process pool only when there are enough
    files to pay for starting it (a fleet of reports from before summaries)."""
    workers = jobs if jobs is not None else min(4, os.cpu_count() or 1)
    if workers > 1 and len(rels) >= 400:
        from concurrent.futures import ProcessPoolExecutor  # only an old fleet needs one

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
