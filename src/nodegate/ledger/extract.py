"""One fetched file -> what the ledger keeps of it; no database here.

Reports are read only through the project's reader: ``fileio.read_bytes`` (a FIFO or device
is refused, never opened), ``report.model.decode``, ``fleet_summary.from_report`` (shape,
counts, verdict and digest checked against the results) and ``fleet.read.entry``; a report
any of them refuses is ``Unreadable`` with the very error ``nodegate report DIR`` prints for
it. A remediation state file (``remediation.json``) is read by the remediation's own
``NodeRemediation.from_dict``. Every text kept passes the redaction filter
(``nodegate.redaction.redact``) here, before it can reach a database.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from nodegate.errors import ConfigError
from nodegate.fileio import read_bytes
from nodegate.fleet import read as fleet_read
from nodegate.fleet.pair_records import LOCALISATION, PREFIX
from nodegate.fleet.trend_metrics import has_trend
from nodegate.redaction import redact
from nodegate.remediation.state import STATE_FILE, NodeRemediation, Phase
from nodegate.report import fleet_summary
from nodegate.report.digest import entity_kind
from nodegate.report.model import decode, format_timestamp, parse_timestamp
from nodegate.results import CheckResult

__all__ = ["Card", "Event", "Parsed", "Remediation", "Result", "Run", "Unreadable",
           "parse_file"]

#: The checks whose measured value names the driver and the fabric manager of a run.
DRIVER_CHECK = "driver_version"
FABRIC_CHECK = "fabricmanager_service"
VERSION_CHECKS = frozenset({DRIVER_CHECK, FABRIC_CHECK})


@dataclass(frozen=True)
class Card:
    slot: str  # the entity (gpu3)
    serial: str  # the card's key: its serial, or uuid:<uuid>
    uuid: str | None
    bus_id: str
    board_part_number: str | None


@dataclass(frozen=True)
class Result:
    check: str
    entity: str
    verdict: str
    severity: str
    measured: str  # JSON, redacted
    threshold: str
    unit: str
    evidence: str


@dataclass(frozen=True)
class Event:
    identity: str
    kind: str
    at: float
    at_text: str
    detail: str  # JSON, redacted
    serial: str | None = None


@dataclass
class Run:
    identity: str
    report_id: str
    machine: str
    name: str
    host: str
    profile: str
    level: str
    verdict: str
    sequence: int | None
    boottime_s: float | None
    boot_id: str | None
    started_at: str
    finished_at: str
    finished: float
    driver: str | None
    fabric_manager: str | None
    path: str
    summary: str  # JSON of the fleet summary, redacted
    cards: list[Card] = field(default_factory=list)
    results: list[Result] = field(default_factory=list)  # the non-PASS ones
    metrics: list[tuple[str, str, float]] = field(default_factory=list)  # key, entity, value
    events: list[Event] = field(default_factory=list)  # cluster-check pairs, localisation


@dataclass(frozen=True)
class Unreadable:
    path: str
    identity: str
    error: str
    name: str | None = None  # the node it names, where it names one


@dataclass(frozen=True)
class Remediation:
    path: str
    name: str
    events: list[Event]


Parsed = Run | Unreadable | Remediation


def _json(value: Any) -> str:
    return redact(json.dumps(value, sort_keys=True, default=str, allow_nan=False)
                  if _finite(value) else json.dumps(None))


def _finite(value: Any) -> bool:
    return not (isinstance(value, float) and not math.isfinite(value))


def parse_file(root: Path, rel: str, size: int) -> Parsed:
    """The file ``rel`` below ``root`` (``size``: its size, or a ``fleet.read.UNREADABLE``
    code from ``fleet.read.scan``)."""
    if size < 0:
        return Unreadable(rel, f"{rel}#{size}", fleet_read.UNREADABLE[size])
    path = root / rel
    try:
        raw = read_bytes(path, kind="report", limit=fleet_read.MAX_REPORT_BYTES)
    except (ConfigError, OSError) as exc:
        return _unreadable(root, rel, b"", exc)
    if Path(rel).name == STATE_FILE:
        return _remediation(root, rel, raw)
    try:
        data = decode(raw)
        if not isinstance(data, dict):
            raise ValueError("top level is not a JSON object")
        summary = fleet_summary.from_report(data, source=rel)
        entry = fleet_read.entry(summary, rel)
        return _run(data, summary, entry, rel)
    except (ConfigError, ValueError, KeyError, TypeError, AttributeError, OverflowError,
            RecursionError) as exc:
        return _unreadable(root, rel, raw, exc)


def _unreadable(root: Path, rel: str, raw: bytes, exc: BaseException) -> Unreadable:
    """The error ``nodegate report DIR`` gives this file (its own reader says it; where it
    reads the report, which a result of no known verdict or severity can make, ours), and
    the node the file names where it is a JSON object that names one."""
    error = fleet_read.from_report_file(root / rel, rel).get("error") or \
        f"{type(exc).__name__}: {str(exc)[:157]}"
    name = None
    try:
        data = decode(raw) if raw else None
        if isinstance(data, dict):
            labels = data.get("labels")
            slurm = labels.get("slurm_node") if isinstance(labels, dict) else None
            candidate = slurm if isinstance(slurm, str) and slurm else data.get("node")
            name = candidate[:255] if isinstance(candidate, str) and candidate else None
    except (ConfigError, ValueError, RecursionError):
        name = None
    digest = hashlib.sha256(raw).hexdigest()[:32]
    return Unreadable(redact(rel), f"{rel}#{digest}", redact(error),
                      redact(name) if name else None)


def identity_of(fields: Mapping[str, Any]) -> str:
    """A report's identity from its summary (or fleet entry): machine id, boot id and
    sequence; ``report:<report id>`` for a report written before them. Redacted as stored."""
    machine_id, boot_id = fields.get("machine_id"), fields.get("boot_id")
    sequence = fields.get("sequence")
    return redact(f"{machine_id}/{boot_id}/{sequence}"
                  if machine_id and boot_id and sequence is not None
                  else f"report:{fields['report_id']}")


def known_identity(root: Path, rel: str, size: int) -> str | None:
    """The identity of the report ``rel`` read from its fleet summary beside it, where one
    is usable (``fleet.read.from_summary``: its version, shape and the report's size now),
    without parsing the report: the ingest skips a report the ledger already holds by it.
    None: parse the report."""
    if size < 0:
        return None
    try:
        raw = read_bytes(root / fleet_summary.name_for(rel), kind="report",
                         limit=fleet_read.MAX_SUMMARY_BYTES)
    except (ConfigError, OSError):
        return None
    found = fleet_read.from_summary(raw, rel, size)
    return identity_of(found) if found is not None else None


def _run(data: dict[str, Any], summary: dict[str, Any], entry: dict[str, Any],
         rel: str) -> Run:
    machine_id = summary.get("machine_id")
    boot_id = summary.get("boot_id")
    identity = identity_of(summary)
    run = Run(
        identity=identity, report_id=redact(summary["report_id"]),
        machine=machine_id or redact(f"name:{summary['node']}"),
        name=redact(summary["node"]), host=redact(summary["host"]),
        profile=redact(summary["profile"]), level=summary["level"],
        verdict=entry["verdict"], boottime_s=summary.get("boottime_s"),
        boot_id=redact(boot_id) if boot_id else None,
        started_at=summary["started_at"], finished_at=summary["finished_at"],
        sequence=summary.get("sequence"),
        finished=entry["finished"], driver=None, fabric_manager=None, path=redact(rel),
        summary=redact(json.dumps(summary, allow_nan=False)))
    for slot, ident in sorted(fleet_summary.identities(data.get("gpus")).items()):
        key = ident.get("serial") or (f"uuid:{ident['uuid']}" if ident.get("uuid") else None)
        if key:
            run.cards.append(Card(redact(slot), redact(key), ident.get("uuid"),
                                  ident.get("pci_bus_id", ""), ident.get("board_part_number")))
    _results(run, data["results"])
    seen = {(key, entity) for key, entity, _ in run.metrics}
    for key, metric in (summary["digest"].get("metrics") or {}).items():
        entity = metric[3] if isinstance(metric, list) and len(metric) > 3 else None
        value = metric[2] if isinstance(metric, list) and len(metric) > 2 else None
        if has_trend(key) and isinstance(entity, str) and (key, entity) not in seen and \
                _number(value):
            run.metrics.append((key, entity, float(value)))  # type: ignore[arg-type]
            seen.add((key, entity))
    return run


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and \
        math.isfinite(value)


def _results(run: Run, results: list[Any]) -> None:
    """Non-PASS results with their evidence; per-GPU (and per-NIC, per-node) values of the
    trend metrics; the driver and fabric manager; the cluster check's pair results."""
    pairs: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    for item in results:
        if not isinstance(item, dict):
            continue
        check, entity, measured = item.get("check"), item.get("entity"), item.get("measured")
        if not isinstance(check, str) or not isinstance(entity, str):
            continue
        if check in VERSION_CHECKS:
            _versions(run, check, measured)
        if check.startswith(PREFIX) or check == LOCALISATION:
            pairs.append(item)
        key = _trend_key(check, entity)
        if key is not None and _number(measured) and (key, entity) not in seen:
            seen.add((key, entity))
            run.metrics.append((key, redact(entity), float(measured)))  # type: ignore[arg-type]
        if item.get("verdict") != "PASS":
            result = CheckResult.from_dict(item)
            run.results.append(Result(
                redact(result.check), redact(result.entity), result.verdict.value,
                result.severity.value, _json(result.measured), _json(result.threshold),
                redact(result.unit or ""), _json(result.evidence)))
    if pairs:
        run.events.append(Event(f"pairs:{run.identity}", "cluster-check-pair", run.finished,
                                run.finished_at, _json(pairs)))


@lru_cache(maxsize=65536)
def _trend_key(check: str, entity: str) -> str | None:
    """The trend metric key of a per-GPU (per-NIC, per-node) result, None for any other
    (a link, a pair, a check without a trend): asked for every result of every report."""
    if "." in entity or "-" in entity:
        return None
    key = f"{check}[{entity_kind(entity)}]"
    return key if has_trend(key) else None


def _versions(run: Run, check: str, measured: Any) -> None:
    if check == DRIVER_CHECK and isinstance(measured, str):
        run.driver = redact(measured)
    elif check == FABRIC_CHECK and measured is not None:
        run.fabric_manager = redact(str(measured))


def _remediation(root: Path, rel: str, raw: bytes) -> Parsed:
    """A node's remediation state: every action (one event per card it named, so a card's
    count follows its serial to another host) and an RMA."""
    try:
        state = NodeRemediation.from_dict(decode(raw))
    except (ConfigError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        text = str(exc)
        return Unreadable(redact(rel), f"{rel}#{hashlib.sha256(raw).hexdigest()[:32]}",
                          redact(f"not a remediation state: {type(exc).__name__}: "
                                 f"{text[:157]}"))
    events: list[Event] = []
    actions = [*state.history, *([state.action] if state.action else [])]
    for action in actions:
        at = format_timestamp(action.started_at)
        base = f"remediation:{state.node}:{action.action}:{at}"
        detail = _json(action.to_dict())
        serials: list[str | None] = [*sorted(set(action.serials.values()))]
        for serial in serials or [None]:
            events.append(Event(redact(f"{base}:{serial or ''}"), "remediation",
                                action.started_at.timestamp(), at, detail,
                                redact(serial) if serial else None))
    if state.phase is Phase.RMA and state.since is not None:
        at = format_timestamp(state.since)
        events.append(Event(redact(f"rma:{state.node}:{at}"), "rma",
                            parse_timestamp(at).timestamp(), at,
                            _json({"reason": state.rma_reason, "node": state.node})))
    return Remediation(redact(rel), redact(state.node), events)
