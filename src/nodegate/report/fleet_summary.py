"""The fleet summary file: what ``nodegate report DIR`` needs from one node report, written by
the node beside the report as ``<stem>.summary.json`` (``quick-latest.json`` ->
``quick-latest.summary.json``).

Why a file of its own: a standard report is ~190 KB (~400 results, telemetry series, the P2P
matrix), so the fleet view over 10,000 of them cannot parse them all in seconds. The writer
already holds every fact the view needs, so it writes them once, ~2 KB, in a file any reader
decodes whole with ``json.loads``: no reliance on the report's key order or on reading part
of a file.

The report stays the source of truth; the summary is derived from it by ``from_report`` (the
same function the fleet reader uses on a report that has no usable summary, so both give the
same view). A reader uses a summary only when ``problem`` finds none: this ``schema``, the
right shape, and ``report_bytes`` equal to the report's size now (a report rewritten or cut
short since is parsed instead). ``SCHEMA_ID`` is versioned: when what the fleet needs changes,
bump it and readers fall back to the reports until the nodes write the new version.

Standard library only: the cron health check writes summaries through ``nodegate.report``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodegate.errors import ConfigError
from nodegate.report import digest as report_digest
from nodegate.report._atomic import atomic_link, atomic_write_text
from nodegate.vocabulary import FAILING, VERDICT_ORDER

if TYPE_CHECKING:  # the model and the order load where used: see nodegate.report
    from nodegate.report.model import NodeReport

#: The verdicts, exactly as written (upper case): ``pass`` is no verdict.
VERDICTS = tuple(v.value for v in VERDICT_ORDER)

#: Bump when the summary's fields or their meaning change.
SCHEMA_ID = "nodegate.fleet-summary/1"
#: What replaces a report's ``.json`` in its summary's name.
SUFFIX = ".summary.json"

#: Top-level report keys a summary is computed from (``series``/``matrices`` are not).
REPORT_KEYS = frozenset({
    "schema", "report_id", "node", "profile", "level", "started_at", "finished_at",
    "verdict", "counts", "results",
})
#: The summary's string fields: ``node`` is the scheduler's name for the node (its
#: ``slurm_node`` label, else the host name), ``host`` its ``host`` label (the host name,
#: ``nodegate.identity``), else the report's own ``node``, ``level``
#: the suite for a report outside the battery (``multinode``), else its level.
TEXT_FIELDS = ("report_id", "node", "host", "profile", "level", "started_at", "finished_at",
               "verdict")


def path_for(report: str | os.PathLike[str]) -> Path:
    """Where the summary of ``report`` lives: beside it, same stem."""
    return Path(name_for(os.fspath(report)))


def name_for(report: str) -> str:
    """``path_for`` on a plain string (``a/quick-latest.json`` -> ``a/quick-latest.summary.json``):
    the fleet reader does this for every report."""
    return (report[: -len(".json")] if report.endswith(".json") else report) + SUFFIX


def is_summary_name(name: str) -> bool:
    """Whether a file name is a summary's (a reader of ``*.json`` reports skips those)."""
    return name.endswith(SUFFIX)


#: Files the battery leaves in the report folder that are not reports: the rail map for jobs
#: (``nodegate.probes.rail_map.MAP_FILE``, docs/network.md).
NOT_REPORTS = frozenset({"rail-map.json"})


def is_report_name(name: str) -> bool:
    """Whether a reader of ``*.json`` reports reads this file: not a summary, not a file
    nodegate writes beside the reports (a healthy node's own rail map is no unreadable
    report)."""
    return name.endswith(".json") and not is_summary_name(name) and name not in NOT_REPORTS


def from_report(data: Mapping[str, Any], *, source: str = "<report>",
                digest: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The summary of a decoded report, without ``report_bytes``.

    Its results are summarized here (``digest.compute``), and the report's counts, verdict
    and any embedded digest must agree with them. Raises ValueError (KeyError, TypeError) on
    a malformed report and ConfigError (``key $.digest...``) on a digest that disagrees.
    ``digest``: the one the writer computed from these very results a moment ago
    (``NodeReport.to_dict``'s), taken as is instead of computed and checked again.
    """
    from nodegate.report.model import SCHEMA_ID as REPORT_SCHEMA

    if data.get("schema") != REPORT_SCHEMA:
        raise ValueError(f"not a {REPORT_SCHEMA} report (schema {data.get('schema')!r})")
    missing = sorted(REPORT_KEYS - data.keys())
    if missing:
        raise ValueError(f"missing key $.{missing[0]}")
    if data["verdict"] not in VERDICTS:
        raise ValueError(f"key $.verdict: {str(data['verdict'])[:40]!r} is not a verdict "
                         f"({', '.join(VERDICTS)})")
    if digest is None:
        digest = _checked_digest(data, source)
    else:
        digest = {key: value for key, value in digest.items() if key != "tail_bytes"}
    labels = data.get("labels") or {}
    if not isinstance(labels, Mapping):
        raise ValueError("$.labels is not an object")
    return {
        "schema": SCHEMA_ID,
        "report_id": str(data["report_id"]),
        "node": str(labels.get("slurm_node") or data["node"]),
        "host": str(labels.get("host") or data["node"]),
        "profile": str(data["profile"]),
        "level": str(labels.get("suite") or data["level"]),
        "started_at": str(data["started_at"]),
        "finished_at": str(data["finished_at"]),
        "verdict": str(data["verdict"]),
        "counts": dict(data["counts"]),
        "gpus": identities(data.get("gpus")),
        "digest": digest,  # the results' part: failing test ids, per metric worst and median
        **order_fields(data),
    }


#: The report's ordering fields a summary carries when the report has them (and their
#: exact JSON types): ``nodegate.report.order``.
ORDER_TYPES: dict[str, tuple[type, ...]] = {
    "boot_id": (str,), "machine_id": (str,), "boottime_s": (int, float), "sequence": (int,)}


def order_fields(data: Mapping[str, Any]) -> dict[str, Any]:
    """The report's boot id, machine id, boot time and sequence, each where present. They
    decide which report is a node's newest, so one that is present and malformed makes the
    report unreadable (ValueError naming the key), as the report's schema would."""
    out: dict[str, Any] = {}
    for key, types in ORDER_TYPES.items():
        value = data.get(key)
        if value is None:
            continue
        if type(value) not in types or not _order_value_ok(key, value):
            raise ValueError(f"key $.{key}: {str(value)[:40]!r} is not a valid {key}")
        out[key] = value
    return out


def _order_value_ok(key: str, value: Any) -> bool:
    if key == "sequence":
        return bool(0 < value <= MAX_SEQUENCE)
    if key == "boottime_s":
        return bool(0 <= value < float("inf"))
    if key == "machine_id":
        from nodegate.report.order import MACHINE_ID_RE

        return MACHINE_ID_RE.match(value) is not None
    return True  # boot_id: any string (the kernel's is a UUID; the schema asks no more)


#: The largest sequence a report may carry (the schema's bound: exact in a double).
MAX_SEQUENCE = 2**53 - 1


def _checked_digest(data: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The digest of ``data``'s results, after checking the report's head against them."""
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
    report_digest.check(data, source=source, computed=computed)
    return computed


def identities(raw: Any) -> dict[str, dict[str, str]]:
    """The report's ``gpus`` map, non-empty string fields only: a malformed map costs the
    identities of that report (no swap is claimed from it), never the report's verdict."""
    if not isinstance(raw, Mapping):
        return {}
    return {str(entity): {str(k): v for k, v in ident.items() if isinstance(v, str) and v}
            for entity, ident in raw.items() if isinstance(ident, Mapping)}


def render(summary: Mapping[str, Any], report_bytes: int) -> str:
    """The summary file's text for a report of ``report_bytes`` bytes (UTF-8, as written)."""
    out = {"schema": summary["schema"], "report_bytes": report_bytes}
    out.update((key, value) for key, value in summary.items() if key != "schema")
    return json.dumps(out, ensure_ascii=False, allow_nan=False) + "\n"


def text_for(data: Mapping[str, Any], report_text: str, *,
             digest: Mapping[str, Any] | None = None) -> str:
    """The summary file's text for the report ``data`` serialized as ``report_text``;
    ``digest`` as ``from_report``'s."""
    return render(from_report(data, digest=digest), len(report_text.encode("utf-8")))


def write_files(path: str | os.PathLike[str], report_text: str,
                summary_text: str | None, *, sync_dir: bool = True) -> Path:
    """Write a report's text atomically, then (unless None) its summary beside it, also
    atomically. Report first: a crash in between leaves a report whose summary is missing or
    stale (its ``report_bytes`` no longer fits), which readers notice and parse the report.
    ``sync_dir``: as ``atomic_write_text``'s."""
    written = atomic_write_text(path, report_text, sync_dir=sync_dir)
    if summary_text is not None:
        atomic_write_text(path_for(written), summary_text, sync_dir=sync_dir)
    return written


def link_files(source: Path, path: str | os.PathLike[str], report_text: str,
               summary_text: str | None, *, sync_dir: bool = True) -> Path:
    """``path`` (and its summary) as second names of ``source`` (and its summary), which
    ``write_files`` wrote with the same texts: a report's latest copy costs a link, not a
    second write and fsync of the whole report. Where the filesystem has no hard links, the
    texts are written as ``write_files`` does."""
    try:
        linked = atomic_link(source, path, sync_dir=sync_dir)
        if summary_text is not None:
            atomic_link(path_for(source), path_for(linked), sync_dir=sync_dir)
    except OSError:
        return write_files(path, report_text, summary_text, sync_dir=sync_dir)
    return linked


def write_report(report: NodeReport, path: str | os.PathLike[str], *,
                 summary: bool = True) -> Path:
    """``NodeReport.write`` (validated, atomic) plus the fleet summary beside it; ``summary``
    False writes the report alone, as a nodegate from before summaries did."""
    from nodegate.report.model import dumps, validate

    data = report.to_dict()
    validate(data, source=str(path))
    text = dumps(data)
    return write_files(path, text, text_for(data, text) if summary else None)


def write_copy(path: str | os.PathLike[str], data: Mapping[str, Any]) -> Path:
    """Write a node's report received as data (the bastion's copy a deploy fetches) with its
    summary beside it. A report that cannot be summarized is still written, alone: the fleet
    reader then parses it and says why it cannot be read."""
    text = json.dumps(data, indent=2) + "\n"
    try:
        summary: str | None = text_for(data, text)
    except (ConfigError, ValueError, KeyError, TypeError, AttributeError):
        summary = None
    return write_files(path, text, summary)


def problem(summary: Any, report_bytes: int) -> str | None:
    """Why a decoded summary file cannot stand for a report of ``report_bytes`` bytes (None
    when it can). Runs on every file of a fleet, so it checks exact JSON types."""
    if type(summary) is not dict or summary.get("schema") != SCHEMA_ID:
        return f"not a {SCHEMA_ID} summary"
    if summary.get("report_bytes") != report_bytes:
        return "report_bytes differs from the report's size"
    for key in TEXT_FIELDS:
        if type(summary.get(key)) is not str:
            return f"{key} malformed"
    if summary["verdict"] not in VERDICTS:
        return "verdict malformed"
    if not _identities_ok(summary.get("gpus")):
        return "gpus malformed"
    for key, types in ORDER_TYPES.items():
        if key in summary and (type(summary[key]) not in types
                               or not _order_value_ok(key, summary[key])):
            return f"{key} malformed"
    return report_digest.agrees_with_head(summary.get("digest"), summary)


def _identities_ok(gpus: Any) -> bool:
    if type(gpus) is not dict:
        return False
    for ident in gpus.values():
        if type(ident) is not dict:
            return False
        for value in ident.values():
            if type(value) is not str:
                return False
    return True
