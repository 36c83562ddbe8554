"""Reads of the ledger: a card's lifetime, a node's history, the fleet view's entries.

Each read is one read transaction (a consistent snapshot while an ingest writes) and answers
plain JSON-ready dicts; ``render`` prints them.
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa

from nodegate.errors import ConfigError
from nodegate.fleet.read import Summary, entry
from nodegate.ledger import schema as t
from nodegate.ledger.engine import Ledger

__all__ = ["LIMIT", "fleet_items", "gpu_lifetime", "node_history", "pair_results"]

#: Runs, results and events listed per answer (the counts are always in full).
LIMIT = 50


def _event(row: Any) -> dict[str, Any]:
    return {"kind": row.kind, "at": row.at_text, "detail": json.loads(row.detail)}


def _result(row: Any) -> dict[str, Any]:
    return {"finished_at": row.finished_at, "host": row.host, "level": row.level,
            "check": row.check_name, "entity": row.entity, "verdict": row.verdict,
            "severity": row.severity, "measured": json.loads(row.measured),
            "threshold": json.loads(row.threshold), "unit": row.unit,
            "evidence": json.loads(row.evidence), "report": row.path}


def gpu_lifetime(ledger: Ledger, serial: str) -> dict[str, Any]:
    """One card by serial (or ``uuid:<uuid>``) across every host it was in: placements,
    runs, failures, remediations, RMA. ConfigError (exit 2) when the ledger never saw it."""
    with ledger.read() as conn:
        gpu = conn.execute(sa.select(t.gpus).where(t.gpus.c.serial == serial)).first()
        if gpu is None:
            raise ConfigError(f"no GPU with serial {serial!r} in the ledger",
                              file=ledger.name, key="SERIAL")
        placements = [
            {"host": row.host, "machine": row.machine, "slot": row.slot,
             "bus_id": row.bus_id or None, "from": _iso(row.first_seen),
             "to": _iso(row.last_seen)}
            for row in conn.execute(
                sa.select(t.placements, t.nodes.c.machine)
                .join(t.nodes, t.nodes.c.id == t.placements.c.node_id)
                .where(t.placements.c.gpu_id == gpu.id)
                .order_by(t.placements.c.first_seen, t.placements.c.id))]
        run_rows = sa.select(t.runs.c.id).join(
            t.run_gpus, t.run_gpus.c.run_id == t.runs.c.id).where(
            t.run_gpus.c.gpu_id == gpu.id)
        verdicts: dict[str, int] = dict(conn.execute(
            sa.select(t.runs.c.verdict, sa.func.count()).where(t.runs.c.id.in_(run_rows))
            .group_by(t.runs.c.verdict)).all())
        runs = [{"finished_at": row.finished_at, "host": row.host, "slot": row.slot,
                 "level": row.level, "verdict": row.verdict, "report": row.path}
                for row in conn.execute(
                    sa.select(t.runs, t.run_gpus.c.slot)
                    .join(t.run_gpus, t.run_gpus.c.run_id == t.runs.c.id)
                    .where(t.run_gpus.c.gpu_id == gpu.id)
                    .order_by(t.runs.c.finished.desc()).limit(LIMIT))]
        failures = [_result(row) for row in conn.execute(
            sa.select(t.results, t.runs.c.finished_at, t.runs.c.host, t.runs.c.level,
                      t.runs.c.path)
            .join(t.runs, t.runs.c.id == t.results.c.run_id)
            .where(t.results.c.gpu_id == gpu.id)
            .order_by(t.runs.c.finished.desc(), t.results.c.id).limit(LIMIT))]
        events = [_event(row) for row in conn.execute(
            sa.select(t.events).where(t.events.c.gpu_id == gpu.id)
            .order_by(t.events.c.at, t.events.c.id))]
    return {
        "serial": gpu.serial, "uuid": gpu.uuid, "board_part_number": gpu.board_part_number,
        "hosts": sorted({p["host"] for p in placements}),
        "placements": placements,
        "runs": {"count": sum(verdicts.values()), "verdicts": verdicts, "latest": runs},
        "failures": failures,
        "remediations": [e for e in events if e["kind"] == "remediation"],
        "rma": [e for e in events if e["kind"] == "rma"],
    }


def node_history(ledger: Ledger, name: str) -> dict[str, Any]:
    """Every machine that carried ``name`` (a reimage is a new machine id under the same
    name: both are shown, never merged), with names, boots, runs, failures, unreadable
    reports and events. ConfigError (exit 2) when the ledger never saw the name."""
    with ledger.read() as conn:
        node_ids = list(conn.scalars(sa.select(t.node_names.c.node_id)
                                     .where(t.node_names.c.name == name)
                                     .order_by(t.node_names.c.first_seen)))
        if not node_ids:
            raise ConfigError(f"no node named {name!r} in the ledger", file=ledger.name,
                              key="NAME")
        machines = [_machine(conn, node_id) for node_id in node_ids]
    return {"name": name, "machines": machines}


def _machine(conn: sa.Connection, node_id: int) -> dict[str, Any]:
    machine = conn.scalar(sa.select(t.nodes.c.machine).where(t.nodes.c.id == node_id))
    names = [{"name": row.name, "from": _iso(row.first_seen), "to": _iso(row.last_seen)}
             for row in conn.execute(sa.select(t.node_names)
                                     .where(t.node_names.c.node_id == node_id)
                                     .order_by(t.node_names.c.first_seen))]
    boots = [{"boot_id": row.boot_id, "from": _iso(row.first_seen), "to": _iso(row.last_seen)}
             for row in conn.execute(sa.select(t.boots).where(t.boots.c.node_id == node_id)
                                     .order_by(t.boots.c.first_seen))]
    verdicts: dict[str, int] = dict(conn.execute(sa.select(t.runs.c.verdict, sa.func.count())
                                 .where(t.runs.c.node_id == node_id)
                                 .group_by(t.runs.c.verdict)).all())
    runs = [{"finished_at": row.finished_at, "level": row.level, "verdict": row.verdict,
             "profile": row.profile, "driver": row.driver,
             "fabric_manager": row.fabric_manager, "sequence": row.sequence,
             "report_id": row.report_id, "report": row.path}
            for row in conn.execute(sa.select(t.runs).where(t.runs.c.node_id == node_id)
                                    .order_by(t.runs.c.finished.desc()).limit(LIMIT))]
    failures = [_result(row) for row in conn.execute(
        sa.select(t.results, t.runs.c.finished_at, t.runs.c.host, t.runs.c.level,
                  t.runs.c.path)
        .join(t.runs, t.runs.c.id == t.results.c.run_id)
        .where(t.runs.c.node_id == node_id)
        .order_by(t.runs.c.finished.desc(), t.results.c.id).limit(LIMIT))]
    unreadable = [{"report": row.path, "verdict": "ERROR", "error": row.error,
                   "seen": _iso(row.seen)}
                  for row in conn.execute(sa.select(t.unreadable)
                                          .where(t.unreadable.c.node_id == node_id)
                                          .order_by(t.unreadable.c.path))]
    events = [_event(row) for row in conn.execute(
        sa.select(t.events).where(t.events.c.node_id == node_id,
                                  t.events.c.kind != "cluster-check-pair")
        .order_by(t.events.c.at.desc(), t.events.c.id).limit(LIMIT))]
    cards = [{"slot": row.slot, "serial": row.serial, "bus_id": row.bus_id or None,
              "from": _iso(row.first_seen), "to": _iso(row.last_seen)}
             for row in conn.execute(
                 sa.select(t.placements, t.gpus.c.serial)
                 .join(t.gpus, t.gpus.c.id == t.placements.c.gpu_id)
                 .where(t.placements.c.node_id == node_id)
                 .order_by(t.placements.c.slot, t.placements.c.first_seen))]
    return {"machine": machine, "names": names, "boots": boots, "cards": cards,
            "runs": {"count": sum(verdicts.values()), "verdicts": verdicts, "latest": runs},
            "failures": failures, "unreadable": unreadable, "events": events}


def fleet_items(ledger: Ledger) -> list[Summary]:
    """Every run's fleet entry and every unreadable report's ``{"path", "error"}``, in
    path order: what ``fleet.read.summaries`` gives for the folder they were ingested from.
    A file once unreadable whose path now holds a report that was read (rewritten since)
    is that report; the ledger keeps the old record as evidence all the same."""
    items: list[tuple[str, Summary]] = []
    with ledger.read() as conn:
        for path, summary in conn.execute(sa.select(t.runs.c.path, t.runs.c.summary)):
            items.append((path, entry(json.loads(summary), path)))
        read = {path for path, _ in items}
        for path, error in conn.execute(sa.select(t.unreadable.c.path, t.unreadable.c.error)
                                        .distinct()):
            if path not in read:
                items.append((path, {"path": path, "error": error}))
    items.sort(key=lambda item: item[0])
    return [item for _, item in items]


def pair_results(ledger: Ledger) -> dict[str, dict[str, Any]]:
    """Report path -> ``{"results": [...]}``: the cluster check's pair results each run
    carried, for ``fleet.pair_records.pair_matrix``."""
    out: dict[str, dict[str, Any]] = {}
    with ledger.read() as conn:
        for path, detail in conn.execute(
                sa.select(t.runs.c.path, t.events.c.detail)
                .join(t.runs, t.runs.c.id == t.events.c.run_id)
                .where(t.events.c.kind == "cluster-check-pair")):
            out[path] = {"results": json.loads(detail)}
    return out


def _iso(seconds: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(seconds, dt.timezone.utc).isoformat(timespec="seconds")
