"""The node report: one validation run on one node, the source of truth for every rendering.

A report is built from the judge's ``CheckResult`` list plus run metadata, written as JSON
(``nodegate.report/1``, schema shipped next to this module) and read back only through
``load``, which validates it. JUnit, Prometheus and the summary table are rendered from it,
never from pytest's own state, so every consumer sees the same verdicts.

jsonschema is imported inside ``validate`` only: ``nodegate health`` imports this module and
must start fast.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path, PurePath
from typing import Any

from nodegate.errors import ConfigError
from nodegate.fileio import read_text
from nodegate.report import digest as _digest
from nodegate.report._atomic import atomic_write_text
from nodegate.results import CheckResult, Verdict, overall_verdict
from nodegate.vocabulary import VERDICT_ORDER, Level

SCHEMA_ID = "nodegate.report/1"
SCHEMA_RESOURCE = "nodegate.report-1.schema.json"

#: gpus[entity] = {serial, uuid, pci_bus_id, vbios, board_part_number}, each only when NVML
#: gave it: which physical card an entity was during this run (RMA, swap detection).
Gpus = dict[str, dict[str, str]]
#: The identity fields a ``gpus`` entry may carry, in report order.
IDENTITY_FIELDS = ("serial", "uuid", "pci_bus_id", "vbios", "board_part_number")
#: The ``run`` record's fields, in report order: the check groups asked for, the load's
#: duration scale (absent when no load level ran), the fault-injection seams set in the
#: environment (``nodegate.load.seams``) and the resolved profile's digest.
RUN_FIELDS = ("groups", "duration_scale", "seams", "profile_digest")
#: Optional fields that order a node's reports without the wall clock (added in 1.x, written
#: after ``backend`` when known): ``nodegate.report.order``.
ORDER_FIELDS = ("machine_id", "boottime_s", "sequence")
#: series[set_name][entity][metric] = [[t_seconds_since_start, value], ...]
Series = dict[str, dict[str, dict[str, list[list[float | None]]]]]
#: matrices[name] = {"unit": str, "entities": [...], "values": [[...], ...]}
Matrices = dict[str, dict[str, Any]]


@dataclass(frozen=True)
class NodeReport:
    """A validated-shape node report; ``verdict`` and ``counts`` derive from ``results``."""

    report_id: str
    node: str
    profile: str
    level: Level
    started_at: dt.datetime
    finished_at: dt.datetime
    duration_s: float
    nodegate_version: str
    backend: str
    results: tuple[CheckResult, ...]
    boot_id: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    series: Series = field(default_factory=dict)
    matrices: Matrices = field(default_factory=dict)
    gpus: Gpus = field(default_factory=dict)
    #: what ran (``RUN_FIELDS``): the evidence a join rests on; empty in older reports
    run: dict[str, Any] = field(default_factory=dict)
    #: order that survives clock steps (``nodegate.report.order``): /etc/machine-id, the
    #: boot-relative finish time (CLOCK_BOOTTIME) and the node's report sequence number;
    #: None in reports from older writers (and from writers that do not number them)
    machine_id: str | None = None
    boottime_s: float | None = None
    sequence: int | None = None

    @property
    def schema(self) -> str:
        return SCHEMA_ID

    @property
    def verdict(self) -> Verdict:
        return overall_verdict(list(self.results))

    @property
    def counts(self) -> dict[str, int]:
        return count_verdicts(self.results)

    def identity_of(self, entity: str) -> dict[str, str]:
        """The identity of the card ``entity`` is or is part of (``gpu3``, ``gpu3.link5``);
        empty for node-level entities, GPU pairs (``gpu0-gpu1``) and unknown cards."""
        return self.gpus.get(entity.split(".", 1)[0], {})

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready dict; non-finite floats become null (JSON has no NaN).

        Key order is part of the format: the small keys, the optional ``gpus`` identity map,
        then the fleet ``digest`` (computed from the JSON-ready results, so it is exactly what
        a reader would compute from the file), the optional ``run`` record (what ran: the join
        gate reads it; the fleet reader does not need it), then the bulk: ``results``,
        ``series``, ``matrices``. A fleet reader needs only the part before ``results`` (which
        holds the identities it compares across a node's reports). ``digest.tail_bytes`` is
        added on serialization.
        """
        data: dict[str, Any] = {
            "schema": SCHEMA_ID,
            "report_id": self.report_id,
            "node": self.node,
            "profile": self.profile,
            "level": self.level.value,
            "started_at": format_timestamp(self.started_at),
            "finished_at": format_timestamp(self.finished_at),
            "duration_s": _finite_or_zero(self.duration_s),
            "nodegate_version": self.nodegate_version,
            "boot_id": self.boot_id,
            "backend": self.backend,
        }
        for key in ORDER_FIELDS:
            value = getattr(self, key)
            if value is not None:
                data[key] = _jsonable(value)
        if self.labels:
            data["labels"] = dict(self.labels)
        data["verdict"] = self.verdict.value
        data["counts"] = self.counts
        if self.gpus:
            data["gpus"] = {entity: {key: ident[key] for key in IDENTITY_FIELDS if key in ident}
                            for entity, ident in self.gpus.items()}
        results = [_result_json(result) for result in self.results]
        data["digest"] = _digest.compute(results, self.report_id)
        if self.run:
            data["run"] = {key: _jsonable(self.run[key]) for key in RUN_FIELDS
                           if key in self.run}
        data["results"] = results
        data["series"] = _jsonable(self.series)
        data["matrices"] = _jsonable(self.matrices)
        return data

    def to_json(self, *, indent: int | None = 2) -> str:
        return to_json(self, indent=indent)

    def write(self, path: str | os.PathLike[str]) -> Path:
        return write(self, path)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "<report>") -> NodeReport:
        """Build from a report dict after validating it (``source`` names it in errors)."""
        validate(data, source=source)
        return cls(
            report_id=data["report_id"],
            node=data["node"],
            profile=data["profile"],
            level=Level(data["level"]),
            started_at=parse_timestamp(data["started_at"]),
            finished_at=parse_timestamp(data["finished_at"]),
            duration_s=float(data["duration_s"]),
            nodegate_version=data["nodegate_version"],
            backend=data["backend"],
            results=tuple(CheckResult.from_dict(item) for item in data["results"]),
            boot_id=data["boot_id"],
            labels=dict(data.get("labels") or {}),
            series=data["series"],
            matrices=data["matrices"],
            gpus={str(entity): dict(ident) for entity, ident in (data.get("gpus") or {}).items()},
            run=dict(data.get("run") or {}),
            machine_id=data.get("machine_id"),
            boottime_s=data.get("boottime_s"),
            sequence=data.get("sequence"),
        )


def count_verdicts(results: Iterable[CheckResult]) -> dict[str, int]:
    """Results per verdict, every verdict present (zeros included) so consumers need no default."""
    counts = {verdict.value: 0 for verdict in VERDICT_ORDER}
    for result in results:  # _value_: the enum's value without its property (~800 a run)
        counts[result.verdict._value_] += 1
    return counts


def build(
    results: Iterable[CheckResult],
    *,
    node: str,
    profile: str,
    level: Level | str,
    started_at: dt.datetime | float,
    finished_at: dt.datetime | float | None = None,
    duration_s: float | None = None,
    backend: str,
    boot_id: str | None = None,
    report_id: str | None = None,
    nodegate_version: str | None = None,
    labels: Mapping[str, str] | None = None,
    series: Series | None = None,
    matrices: Matrices | None = None,
    gpus: Gpus | None = None,
    run: Mapping[str, Any] | None = None,
) -> NodeReport:
    """Assemble a report from judged results and run metadata.

    Timestamps are aware datetimes or Unix seconds; naive datetimes are refused because a
    report compared across a fleet must not depend on each node's local time zone.
    ``finished_at`` defaults to now; ``duration_s`` to finished - started (pass a monotonic
    measurement when you have one: wall clocks jump under NTP). ``gpus`` is the board's
    identity map (``BoardSnapshot.identities()``); empty or None writes no ``gpus`` key.
    ``run`` is what ran (``RUN_FIELDS``; ``nodegate.report.run_record.run_record``).
    """
    start = _to_utc(started_at, "started_at")
    finish = _to_utc(finished_at, "finished_at") if finished_at is not None else _now()
    if duration_s is None:
        duration_s = max(0.0, (finish - start).total_seconds())
    if nodegate_version is None:
        from nodegate import __version__

        nodegate_version = __version__
    return NodeReport(
        report_id=report_id or new_report_id(node, start),
        node=node,
        profile=profile,
        level=Level(level),
        started_at=start,
        finished_at=finish,
        duration_s=float(duration_s),
        nodegate_version=nodegate_version,
        backend=backend,
        results=tuple(results),
        boot_id=boot_id,
        labels=dict(labels or {}),
        series=series if series is not None else {},
        matrices=matrices if matrices is not None else {},
        gpus={entity: dict(ident) for entity, ident in (gpus or {}).items() if ident},
        run=dict(run or {}),
    )


def new_report_id(node: str, started_at: dt.datetime) -> str:
    """``<node>-<UTC start>-<8 hex>``: sortable by time, unique, safe as a file name."""
    safe_node = re.sub(r"[^A-Za-z0-9._-]+", "_", node).strip("_") or "node"
    stamp = started_at.astimezone(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{safe_node}-{stamp}-{os.urandom(4).hex()}"  # not uuid: its import is ~5 ms


def to_json(report: NodeReport, *, indent: int | None = 2) -> str:
    """Serialize; strict JSON (no NaN), stable key order, trailing newline."""
    return dumps(report.to_dict(), indent=indent)


def dumps(data: Mapping[str, Any], *, indent: int | None = 2, rows: bool = False) -> str:
    """``json.dumps(data, indent=indent)`` plus a newline, with ``digest.tail_bytes`` set.
    ``rows`` (with an ``indent``): the same JSON one row a line (``_jsontext.dumps_rows``:
    each result on a line of its own, compact within it), as the report set writes it.

    ``tail_bytes`` is the UTF-8 length from the ``"results"`` key to the end of the file, so a
    reader of only the head can tell the body is still the one the digest was computed from
    (not cut short by a failed copy, not rewritten). The bulk is serialized once: head and
    tail are dumped apart and joined exactly as ``json.dumps`` would have joined them.
    """
    digest = data.get("digest")
    if not isinstance(digest, Mapping) or tuple(data)[-len(_digest.TAIL_KEYS):] != (
            _digest.TAIL_KEYS):
        return _json_text(data, indent, rows) + "\n"
    tail = {key: data[key] for key in _digest.TAIL_KEYS}
    tail_text = _json_text(tail, indent, rows)
    # json.dumps opens an object with "{" then, when indenting, a newline and the indent
    body = tail_text[1 if indent is None else 2 + indent :] + "\n"
    head = {key: value for key, value in data.items() if key not in _digest.TAIL_KEYS}
    head["digest"] = {**digest, "tail_bytes": len(body.encode("utf-8"))}
    head_text = _json_text(head, indent, rows)
    # ... and closes it with an optional newline and "}"; members are joined with ", " or ",\n"
    if indent is None:
        return f"{head_text[:-1]}, {body}"
    return f"{head_text[:-2]},\n{' ' * indent}{body}"


def _json_text(data: Mapping[str, Any], indent: int | None, rows: bool = False) -> str:
    """``json.dumps(data, indent=indent, allow_nan=False, ensure_ascii=False)``; indented
    through ``_jsontext`` (the standard library indents in slow pure Python), or ``rows``."""
    if indent is None:
        return json.dumps(data, allow_nan=False, ensure_ascii=False)
    from nodegate.report._jsontext import dumps_indented, dumps_rows

    if rows and type(data) is dict:
        return dumps_rows(data, indent)
    return dumps_indented(data, indent)


def write(report: NodeReport, path: str | os.PathLike[str]) -> Path:
    """Validate and write atomically: a crash leaves the previous file or none, never half."""
    data = report.to_dict()
    validate(data, source=str(path))
    return atomic_write_text(path, dumps(data, indent=2))


def load(path: str | os.PathLike[str]) -> NodeReport:
    """Read and validate a report file; any problem is a ConfigError naming file and key."""
    source = str(path)
    try:
        text = read_text(path, kind="report")
    except FileNotFoundError:
        raise ConfigError("report file not found", file=source) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read report: {exc}", file=source) from None
    try:
        data = decode(text)
    except ValueError as exc:
        raise ConfigError(str(exc), file=source) from None
    return NodeReport.from_dict(data, source=source)


def decode(text: str | bytes) -> Any:
    """``json.loads`` for a report or summary file, whose every way of failing is a
    ValueError with a short reason: malformed JSON (``not valid JSON: MSG (line L, column
    C)``), nesting deeper than the decoder can follow (a file of 200,000 ``[``: Python's own
    RecursionError), an integer of more digits than Python converts, bytes that are not
    UTF-8, ``NaN`` or ``Infinity`` (not JSON numbers: ``not valid JSON: NaN is not a JSON
    number``)."""
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    except RecursionError:
        raise ValueError("not valid JSON: nested too deeply to read") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 at byte {exc.start}") from None
    except ValueError as exc:  # int_max_str_digits: "Exceeds the limit (4300 digits) ..."
        raise ValueError(f"not valid JSON: {_clip(str(exc))}") from None


def _refuse_constant(name: str) -> Any:
    """JSON has no NaN or Infinity; Python's decoder accepts them unless told not to, and a
    NaN measurement compares false with every threshold."""
    raise ValueError(f"{name} is not a JSON number")


def coerce(report: NodeReport | Mapping[str, Any]) -> NodeReport:
    """Accept either a report object or a report dict (validated) for the renderers."""
    if isinstance(report, NodeReport):
        return report
    return NodeReport.from_dict(report)


# --- validation ------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    """The shipped JSON Schema (draft 2020-12) for ``nodegate.report/1``."""
    from importlib import resources

    text = resources.files("nodegate.report").joinpath(SCHEMA_RESOURCE).read_text("utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def validate(data: Any, *, source: str = "<report>") -> None:
    """Raise ConfigError(file=source, key=JSON path) unless ``data`` is a valid report.

    Beyond the schema it checks what a schema cannot say: the stored verdict and counts agree
    with the results (a hand-edited PASS over a FAIL is caught), matrices are square,
    timestamps parse and finish after they start, and an embedded ``digest`` is the one the
    results produce (the fleet view trusts it without reading the results).
    """
    if isinstance(data, Mapping) and "schema" in data and data["schema"] != SCHEMA_ID:
        raise ConfigError(
            f"unsupported report schema {data['schema']!r} (this nodegate reads {SCHEMA_ID})",
            file=source,
            key="$.schema",
        )
    from nodegate.schema_check import first_problem  # not on the cron path, which skips this

    problem = first_problem(schema(), data)
    if problem is not None:
        more = f" (and {problem.count - 1} more)" if problem.count > 1 else ""
        raise ConfigError(f"{_clip(problem.message)}{more}", file=source,
                          key=json_path(problem.path))
    try:
        _check_semantics(data, source)
    except ConfigError as exc:
        if exc.file is None:
            raise ConfigError(exc.message, file=source, key=exc.key) from None
        raise
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        # a net under the checks above: whatever they missed is still this file's fault
        raise ConfigError(f"invalid report: {_clip(str(exc))}", file=source) from None


def _clip(text: str, limit: int = 160) -> str:
    """A message about a value quotes it; a value can be megabytes of ``[[[[...``."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def json_path(parts: Sequence[str | int]) -> str:
    """``["results", 3, "verdict"]`` -> ``$.results[3].verdict`` (odd keys quoted)."""
    out = "$"
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", part):
            out += f".{part}"
        else:
            out += f"[{json.dumps(part)}]"
    return out


def _check_semantics(data: Mapping[str, Any], source: str) -> None:
    results = [CheckResult.from_dict(item) for item in data["results"]]
    expected_counts = count_verdicts(results)
    for name, count in expected_counts.items():
        if data["counts"][name] != count:
            raise ConfigError(
                f"count {data['counts'][name]} disagrees with the results ({count})",
                file=source,
                key=json_path(["counts", name]),
            )
    expected_verdict = overall_verdict(results).value
    if data["verdict"] != expected_verdict:
        raise ConfigError(
            f"verdict {data['verdict']} disagrees with the results (worst is {expected_verdict})",
            file=source,
            key="$.verdict",
        )
    _check_times(data, source)
    for name, matrix in data["matrices"].items():
        size = len(matrix["entities"])
        if len(matrix["values"]) != size:
            raise ConfigError(
                f"{len(matrix['values'])} rows for {size} entities",
                file=source,
                key=json_path(["matrices", name, "values"]),
            )
        for row_index, row in enumerate(matrix["values"]):
            if len(row) != size:
                raise ConfigError(
                    f"{len(row)} columns for {size} entities",
                    file=source,
                    key=json_path(["matrices", name, "values", row_index]),
                )
    _digest.check(data, source=source)


def _check_times(data: Mapping[str, Any], source: str) -> None:
    """Timestamps that parse, in UTC's range, in order; a duration a float holds."""
    moments = {}
    for name in ("started_at", "finished_at"):
        try:
            moments[name] = parse_timestamp(data[name])
        except ValueError as exc:
            raise ConfigError(str(exc), file=source, key=f"$.{name}") from None
    if moments["finished_at"] < moments["started_at"]:
        raise ConfigError("finished before it started", file=source, key="$.finished_at")
    try:
        if not math.isfinite(float(data["duration_s"])):
            raise OverflowError
    except OverflowError:
        raise ConfigError("number out of range", file=source, key="$.duration_s") from None


# --- timestamps and JSON coercion -------------------------------------------------------------


def format_timestamp(moment: dt.datetime) -> str:
    """UTC ISO 8601 with millisecond precision and a ``Z``: ``2024-05-01T12:00:00.000Z``."""
    return (
        moment.astimezone(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


def parse_timestamp(text: str) -> dt.datetime:
    """Inverse of ``format_timestamp`` (also accepts ``+00:00``; Python 3.10 lacks ``Z``).

    Raises ValueError on text that is not one, or names a moment that UTC cannot hold
    (``9999-12-31T23:59:59-14:00`` is in the year 10000)."""
    moment = dt.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    try:
        return moment.astimezone(dt.timezone.utc)
    except OverflowError:
        raise ValueError(f"timestamp {_clip(text)!r} is out of range in UTC") from None


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _to_utc(moment: dt.datetime | float, name: str) -> dt.datetime:
    if isinstance(moment, dt.datetime):
        if moment.tzinfo is None or moment.utcoffset() is None:
            raise ValueError(f"{name} must be timezone-aware (got naive {moment.isoformat()})")
        return moment.astimezone(dt.timezone.utc)
    return dt.datetime.fromtimestamp(float(moment), tz=dt.timezone.utc)


def _finite_or_zero(value: float) -> float:
    return value if math.isfinite(value) else 0.0


def _result_json(result: CheckResult) -> dict[str, Any]:
    """``_jsonable(result.to_dict())`` without building the intermediate dict (~800 results
    in every cron health check's report)."""
    return {
        "check": _jsonable(result.check),
        "entity": _jsonable(result.entity),
        "measured": _jsonable(result.measured),
        "threshold": _jsonable(result.threshold),
        "unit": _jsonable(result.unit),
        "verdict": _jsonable(result.verdict._value_),  # .value without the enum property
        "severity": _jsonable(result.severity._value_),
        "evidence": _jsonable(dict(result.evidence)),
    }


def _jsonable(value: Any) -> Any:
    """Plain JSON types only, so what validates is exactly what gets written.

    Probes hand back numpy-free but varied values (tuples, enums, paths, datetimes, NaN from a
    failed read); they are mapped here once instead of in every renderer.
    """
    kind = type(value)  # the plain types first, by identity: ~800 results, every cron run
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is dict:
        return {str(key): _jsonable(item) for key, item in value.items()}
    return _jsonable_other(value)


def _jsonable_other(value: Any) -> Any:
    """``_jsonable`` of anything but a plain str, int, bool, None or dict."""
    if isinstance(value, (bool, int, str)):
        return value.value if isinstance(value, enum.Enum) else value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, enum.Enum):
        return _jsonable(value.value)
    if isinstance(value, Mapping):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_jsonable(item) for item in value), key=repr)
    if isinstance(value, dt.datetime):
        return format_timestamp(value) if value.tzinfo else value.isoformat()
    if isinstance(value, PurePath):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _jsonable(dataclasses.asdict(value))
    return str(value)
