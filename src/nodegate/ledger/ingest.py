"""``nodegate ledger ingest DIR``: fetched reports into the ledger, each once.

A report's identity is its machine id, boot id and sequence (``report:<report id>`` for a
report written before those): the same report twice (a second ingest, the
``<level>-latest.json`` copy beside its dated original, a second bastion) is one row.
Files are read in path order (``fleet.read.scan``, as ``nodegate report DIR`` reads them)
and written in batches of ``BATCH`` files, each batch one transaction: a kill leaves the
ledger as it was before the batch or after it, and the next ingest adds what is missing.
Files are parsed before the transaction starts, so a writer holds the lock only to write.
Unreadable files are recorded last (as ERROR evidence of the node they name, or whose name
is a folder above them), when every batch has brought its nodes.

Two ingests at once: on SQLite the second writer waits for the first one's transaction
(``BEGIN IMMEDIATE``, ``engine.BUSY_TIMEOUT_S``); on PostgreSQL every insert is
``ON CONFLICT DO NOTHING`` on the identity (the second of two inserting one identity waits for
the first to commit, then inserts nothing), rows are written in key order so two batches lock
them in the same order, and a batch that still meets a deadlock is run again.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from nodegate.errors import CannotRunError, ConfigError
from nodegate.fleet import read as fleet_read
from nodegate.ledger import extract
from nodegate.ledger import schema as t
from nodegate.ledger.engine import Ledger

__all__ = ["BATCH", "Counts", "ingest"]

#: Files per transaction.
BATCH = 500
#: Rows per ``IN (...)`` list (both engines take far more; kept small for their planners).
IN_CHUNK = 500
#: Tries of a PostgreSQL batch that meets a deadlock or a serialization failure.
RETRIES = 5
#: Test seam: a file name; the ingest creates it when batch ``SEAM_BATCH`` (default 1) is
#: written but not yet committed, then sleeps (a test SIGKILLs it there). Unset in production.
SEAM_PAUSE = "NODEGATE_LEDGER_SEAM_PAUSE"
SEAM_BATCH = "NODEGATE_LEDGER_SEAM_BATCH"


@dataclass
class Counts:
    read: int = 0
    new: int = 0
    already: int = 0
    unreadable: int = 0

    def line(self) -> str:
        return (f"{self.read} read, {self.new} new, {self.already} already there, "
                f"{self.unreadable} unreadable")


def ingest(ledger: Ledger, root: Path, *, batch: int = BATCH,
           jobs: int | None = None) -> Counts:
    """Every report (and remediation state) below ``root`` into ``ledger``; ``jobs``:
    processes parsing reports (default 1: this one; see ``_parsers``)."""
    if not root.is_dir():
        raise ConfigError("not a folder of reports", file=str(root))
    files = fleet_read.scan(root)
    counts = Counts()
    unreadable: list[extract.Unreadable] = []
    with _parsers(jobs, len(files)) as parse:
        chunks = [files[start:start + batch] for start in range(0, len(files), batch)]
        # the next batch is parsed (by the pool) while this one is written
        ahead = _parse_ahead(ledger, root, chunks[0], parse) if chunks else None
        for number, _chunk in enumerate(chunks, 1):
            assert ahead is not None
            held, pending = ahead
            ahead = (_parse_ahead(ledger, root, chunks[number], parse)
                     if number < len(chunks) else None)
            parsed = list(pending)
            _take_batch(ledger, counts, unreadable, held, parsed, number=number)
    # last: each is charged to a node by name, which a later batch may have brought
    for start in range(0, len(unreadable), batch):
        with ledger.write() as conn:
            _write_unreadable(conn, unreadable[start:start + batch])
    counts.unreadable = len(unreadable)
    return counts


#: Most processes parsing reports (JSON decoding and the digest's check are CPU-bound).
MAX_JOBS = 4
#: Fewer files than this are parsed here: a pool costs more than it saves.
POOL_MIN_FILES = 200

#: Parses some files of a folder (``fleet.read.scan``'s tuples), in order.
Parser = Callable[[Path, Sequence[tuple[str, int, bool]]], Iterable[extract.Parsed]]


@contextmanager
def _parsers(jobs: int | None, files: int) -> Iterator[Parser]:
    """A function parsing files of a folder: in forked worker processes (they only parse:
    the ledger's connections are never used there, and a worker leaves by ``os._exit``), or
    here for one job or a small folder. One job is the default: on these 2 cores shared with
    other work, two parsers were slower than one (332 against 419 reports/s, load 4,
    docs/dev/benchmarks.md); the results come back pickled, ~20 % more CPU in all."""
    count = min(jobs or 1, MAX_JOBS, os.cpu_count() or 1)
    if count <= 1 or files < POOL_MIN_FILES:
        yield lambda root, chunk: [extract.parse_file(root, rel, size)
                                   for rel, size, _ in chunk]
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(count, mp_context=multiprocessing.get_context("fork")) as pool:
        yield lambda root, chunk: pool.map(
            extract.parse_file, [root] * len(chunk), [rel for rel, _, _ in chunk],
            [size for _, size, _ in chunk], chunksize=max(1, len(chunk) // (count * 4)))


def _parse_ahead(ledger: Ledger, root: Path, chunk: Sequence[tuple[str, int, bool]],
                 parse: Parser) -> tuple[set[str], Iterable[extract.Parsed]]:
    """The files of ``chunk`` the ledger holds, and the others being parsed."""
    held = _already_held(ledger, root, chunk)
    return held, parse(root, [item for item in chunk if item[0] not in held])


def _take_batch(ledger: Ledger, counts: Counts, unreadable: list[extract.Unreadable],
                held: set[str], parsed: list[extract.Parsed], *, number: int) -> None:
    """Count and write one batch (its unreadable files kept for the end)."""
    bad = [item for item in parsed if isinstance(item, extract.Unreadable)]
    unreadable.extend(bad)
    new = _write_batch(ledger, [item for item in parsed
                                if not isinstance(item, extract.Unreadable)], number)
    counts.read += len(held) + len(parsed)
    counts.new += new
    counts.already += len(held) + len(parsed) - len(bad) - new


def _already_held(ledger: Ledger, root: Path,
                  chunk: Sequence[tuple[str, int, bool]]) -> set[str]:
    """The files of ``chunk`` whose report the ledger holds, told by their fleet summaries
    (``extract.known_identity``) without parsing the reports: a folder fetched again and
    again is mostly reports already ingested."""
    known = {rel: extract.known_identity(root, rel, size)
             for rel, size, beside in chunk if beside}
    wanted = sorted({identity for identity in known.values() if identity})
    if not wanted:
        return set()
    held: set[str] = set()
    with ledger.read() as conn:
        for part in _chunks(wanted):
            held.update(conn.scalars(sa.select(t.runs.c.identity)
                                     .where(t.runs.c.identity.in_(part))))
    return {rel for rel, identity in known.items() if identity in held}


def _write_batch(ledger: Ledger, parsed: Sequence[extract.Parsed], number: int) -> int:
    for attempt in range(RETRIES):
        try:
            with ledger.write() as conn:
                new = _write(conn, parsed)
                _seam(number)
            return new
        except sa.exc.OperationalError as exc:
            code = getattr(getattr(exc, "orig", None), "sqlstate", None)
            if code in ("40P01", "40001") and attempt + 1 < RETRIES:
                time.sleep(0.05 * (attempt + 1))
                continue
            raise CannotRunError(f"could not write to the ledger: "
                                 f"{str(exc.orig or exc).strip().splitlines()[0]}",
                                 file=ledger.name) from None
    raise AssertionError("unreachable")  # pragma: no cover


def _seam(number: int) -> None:
    marker = os.environ.get(SEAM_PAUSE)
    if marker and str(number) == os.environ.get(SEAM_BATCH, "1"):
        Path(marker).write_text(str(os.getpid()))
        time.sleep(120)


def _insert(conn: sa.Connection, table: sa.Table) -> Any:
    """The engine's INSERT, which knows ON CONFLICT (both engines spell it the same)."""
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(table)
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert(table)


def _chunks(items: Sequence[Any]) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), IN_CHUNK):
        yield items[start:start + IN_CHUNK]


def _ids(conn: sa.Connection, table: sa.Table, key: str, keys: Sequence[str],
         rows: dict[str, dict[str, Any]] | None = None) -> dict[str, int]:
    """``key`` -> id for every key, inserting the missing ones (``rows``: their other
    columns), in key order."""
    column = table.c[key]
    ordered = sorted(set(keys))
    found: dict[str, int] = {}
    for part in _chunks(ordered):
        found.update((k, i) for i, k in conn.execute(
            sa.select(table.c.id, column).where(column.in_(part))))
    missing = [k for k in ordered if k not in found]
    if missing:
        conn.execute(_insert(conn, table).on_conflict_do_nothing(index_elements=[key]),
                     [{key: k, **((rows or {}).get(k) or {})} for k in missing])
        for part in _chunks(missing):
            found.update((k, i) for i, k in conn.execute(
                sa.select(table.c.id, column).where(column.in_(part))))
    return found


def _span(conn: sa.Connection, table: sa.Table, keys: Sequence[str],
          spans: dict[tuple[Any, ...], tuple[float, float]]) -> None:
    """Insert or widen (first_seen, last_seen) of each key tuple of ``table``."""
    if not spans:
        return
    stmt = _insert(conn, table)
    excluded = stmt.excluded
    stmt = stmt.on_conflict_do_update(index_elements=list(keys), set_={
        "first_seen": sa.case((excluded.first_seen < table.c.first_seen, excluded.first_seen),
                              else_=table.c.first_seen),
        "last_seen": sa.case((excluded.last_seen > table.c.last_seen, excluded.last_seen),
                             else_=table.c.last_seen)})
    conn.execute(stmt, [{**dict(zip(keys, key, strict=True)), "first_seen": first,
                         "last_seen": last}
                        for key, (first, last) in sorted(spans.items())])


def _widen(spans: dict[tuple[Any, ...], tuple[float, float]], key: tuple[Any, ...],
           at: float) -> None:
    first, last = spans.get(key, (at, at))
    spans[key] = (min(first, at), max(last, at))


def _write(conn: sa.Connection, parsed: Sequence[extract.Parsed]) -> int:
    """One batch; returns how many of its files added something new."""
    runs: dict[str, extract.Run] = {}
    for item in parsed:
        if isinstance(item, extract.Run):
            runs.setdefault(item.identity, item)  # the first copy (path order) is kept
    node_ids = _ids(conn, t.nodes, "machine", [run.machine for run in runs.values()])
    existing: set[str] = set()
    identities = sorted(runs)
    for part in _chunks(identities):
        existing.update(conn.scalars(sa.select(t.runs.c.identity)
                                     .where(t.runs.c.identity.in_(part))))
    fresh = [runs[identity] for identity in identities if identity not in existing]
    new_files = 0
    if fresh:
        run_ids = _write_runs(conn, fresh, node_ids)
        new_files += len(run_ids)
    new_files += _write_remediations(conn, [p for p in parsed
                                            if isinstance(p, extract.Remediation)])
    return new_files


def _write_runs(conn: sa.Connection, fresh: Sequence[extract.Run],
                node_ids: dict[str, int]) -> dict[str, int]:
    """The new runs and what hangs on them; identity -> run id of those this batch wrote
    (another ingest may have written some first)."""
    boot_ids = _write_names_and_boots(conn, fresh, node_ids)
    now = time.time()
    inserted = conn.execute(
        _insert(conn, t.runs).on_conflict_do_nothing(index_elements=["identity"])
        .returning(t.runs.c.id, t.runs.c.identity),
        [{"identity": r.identity, "report_id": r.report_id, "node_id": node_ids[r.machine],
          "boot": boot_ids.get((node_ids[r.machine], r.boot_id or "")), "name": r.name,
          "host": r.host, "profile": r.profile, "level": r.level, "verdict": r.verdict,
          "sequence": r.sequence, "boottime_s": r.boottime_s, "started_at": r.started_at,
          "finished_at": r.finished_at, "finished": r.finished, "driver": r.driver,
          "fabric_manager": r.fabric_manager, "path": r.path, "summary": r.summary,
          "ingested": now} for r in fresh])
    run_ids = {identity: run_id for run_id, identity in inserted}
    written = [r for r in fresh if r.identity in run_ids]
    cards = {card.serial: {"uuid": card.uuid, "board_part_number": card.board_part_number}
             for r in written for card in r.cards}
    gpu_ids = _ids(conn, t.gpus, "serial", list(cards), cards) if cards else {}
    _write_children(conn, written, run_ids, node_ids, gpu_ids)
    return run_ids


def _write_names_and_boots(conn: sa.Connection, fresh: Sequence[extract.Run],
                           node_ids: dict[str, int]) -> dict[tuple[int, str], int]:
    """Names over time and boots of the runs' nodes; (node id, boot id) -> boot row id."""
    boots: dict[tuple[Any, ...], tuple[float, float]] = {}
    names: dict[tuple[Any, ...], tuple[float, float]] = {}
    for run in fresh:
        node = node_ids[run.machine]
        _widen(names, (node, run.name), run.finished)
        if run.boot_id:
            _widen(boots, (node, run.boot_id), run.finished)
    _span(conn, t.node_names, ("node_id", "name"), names)
    _span(conn, t.boots, ("node_id", "boot_id"), boots)
    boot_ids: dict[tuple[int, str], int] = {}
    for part in _chunks(sorted({node for node, _ in boots})):
        for row in conn.execute(sa.select(t.boots.c.id, t.boots.c.node_id, t.boots.c.boot_id)
                                .where(t.boots.c.node_id.in_(part))):
            boot_ids[(row.node_id, row.boot_id)] = row.id
    return boot_ids


def _write_children(conn: sa.Connection, written: Sequence[extract.Run],
                    run_ids: dict[str, int], node_ids: dict[str, int],
                    gpu_ids: dict[str, int]) -> None:
    """Cards in their slots and placements, non-PASS results, metrics, pair events."""
    placements: dict[tuple[Any, ...], tuple[float, float]] = {}
    run_gpus: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    metrics: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    for r in written:
        run_id, node = run_ids[r.identity], node_ids[r.machine]
        slots: dict[str, int] = {}
        for card in r.cards:
            slots[card.slot] = gpu_ids[card.serial]
            run_gpus.append({"run_id": run_id, "slot": card.slot, "gpu_id": slots[card.slot]})
            _widen(placements, (slots[card.slot], node, r.host, card.slot, card.bus_id),
                   r.finished)
        results.extend({"run_id": run_id, "gpu_id": slots.get(res.entity.split(".")[0]),
                        "check_name": res.check, "entity": res.entity, "verdict": res.verdict,
                        "severity": res.severity, "measured": res.measured,
                        "threshold": res.threshold, "unit": res.unit,
                        "evidence": res.evidence} for res in r.results)
        metrics.extend({"run_id": run_id, "key": key, "entity": entity,
                        "gpu_id": slots.get(entity.split(".")[0]), "value": value}
                       for key, entity, value in r.metrics)
        events.extend({"identity": event.identity, "kind": event.kind, "node_id": node,
                       "gpu_id": None, "run_id": run_id, "at": event.at,
                       "at_text": event.at_text, "detail": event.detail}
                      for event in r.events)
    _span(conn, t.placements, ("gpu_id", "node_id", "host", "slot", "bus_id"), placements)
    for table, rows in ((t.run_gpus, run_gpus), (t.results, results), (t.metrics, metrics)):
        if rows:
            conn.execute(table.insert(), rows)
    if events:
        conn.execute(_insert(conn, t.events).on_conflict_do_nothing(
            index_elements=["identity"]), events)


def _node_by_name(conn: sa.Connection, names: Iterable[str]) -> dict[str, int]:
    """The node each name was last seen on."""
    out: dict[str, tuple[float, int]] = {}
    wanted = sorted(set(names))
    for part in _chunks(wanted):
        for row in conn.execute(sa.select(t.node_names.c.name, t.node_names.c.node_id,
                                          t.node_names.c.last_seen)
                                .where(t.node_names.c.name.in_(part))):
            if row.name not in out or row.last_seen > out[row.name][0]:
                out[row.name] = (row.last_seen, row.node_id)
    return {name: node for name, (_, node) in out.items()}


def _write_remediations(conn: sa.Connection, items: Sequence[extract.Remediation]) -> int:
    if not items:
        return 0
    nodes = _node_by_name(conn, [item.name for item in items])
    serials = sorted({e.serial for item in items for e in item.events if e.serial})
    gpu_ids = _ids(conn, t.gpus, "serial", serials) if serials else {}
    new = 0
    for item in items:
        if not item.events:
            continue
        rows = [{"identity": e.identity, "kind": e.kind, "node_id": nodes.get(item.name),
                 "gpu_id": gpu_ids.get(e.serial) if e.serial else None, "run_id": None,
                 "at": e.at, "at_text": e.at_text, "detail": e.detail}
                for e in sorted(item.events, key=lambda e: e.identity)]
        done = conn.execute(_insert(conn, t.events).on_conflict_do_nothing(
            index_elements=["identity"]).returning(t.events.c.id), rows).all()
        new += bool(done)
    return new


def _write_unreadable(conn: sa.Connection, items: Sequence[extract.Unreadable]) -> None:
    """Each as ERROR evidence of the node it names, or else of the node whose name is a
    folder above it (as the fleet view charges it), else of no node."""
    if not items:
        return
    candidates = {item.path: ([item.name] if item.name else []) + list(
        reversed(Path(item.path).parent.parts)) for item in items}
    nodes = _node_by_name(conn, [name for names in candidates.values() for name in names])
    now = time.time()
    rows = []
    for item in sorted(items, key=lambda i: i.identity):
        node = next((nodes[n] for n in candidates[item.path] if n in nodes), None)
        rows.append({"identity": item.identity, "node_id": node, "path": item.path,
                     "error": item.error, "seen": now})
    conn.execute(_insert(conn, t.unreadable).on_conflict_do_nothing(
        index_elements=["identity"]), rows)
