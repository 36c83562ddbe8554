"""The pair matrix of the fleet page, read from the pair results a cluster check left in
node reports.

``nodegate cluster-check`` runs 2-node jobs and writes each pair's result into both nodes'
reports as a check result whose check name starts with ``cluster_pair_`` (``PREFIX``, that is
``nodegate.judge.pairs.RESULT_PREFIX``; ``cluster_check.node_report`` writes them). What
this reader takes from such a result, and nothing more:

- the peer: ``evidence.peer``; else the one of the evidence's ``pair`` (or of its ``a`` and
  ``b``) that is not this node; else the node in the result's ``entity`` (``peer-<node>`` or
  ``<rail>@<node>``, ``pairs.result_entity``);
- ``verdict``; ``measured`` when it is a number (the pair's bus bandwidth, in ``unit``);
  the rail, when the pair tested one: ``evidence.rail``, else the entity's.

Which reports hold any is told by their summaries (a metric or failing id under ``PREFIX``),
so only those few reports are decoded in full, the newest of each level per node, at most
``MAX_NODES`` nodes (those in failing pairs first): a matrix wider than that is no picture
anyway. A fleet without any draws nothing: no matrix, no placeholder. Results that are not
shaped as above are passed over, never a reason to fail the page.

Where the two nodes' records of one pair differ (two rails, two checks, two reports), the
cell shows the worse: the lower figure, the worse verdict. What the matrix names is
``judge.pairs.localise``'s reading of the same results, one rail at a time; beside it, the
cluster check's own word on each node its reports carry (``LOCALISATION``, FAIL with the
reason where it named the node), so the text, JSON and HTML views can say why.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodegate.fleet.aggregate import FleetView, NodeView, Summary
from nodegate.judge.pairs import RESULT_PREFIX, parse_entity

__all__ = ["LOCALISATION", "MAX_NODES", "PREFIX", "FailingPair", "PairMatrix", "has_pairs",
           "localisation_of", "pair_matrix", "pair_records", "read_report"]

#: The check names of pair results start with this.
PREFIX = RESULT_PREFIX
#: The result ``cluster_check.node_report`` adds to each node's report after its pairs: FAIL,
#: with the reason in ``measured``, where the localisation named the node.
LOCALISATION = "cluster_check_localisation"
#: The most nodes drawn in the matrix (their reports are decoded in full).
MAX_NODES = 64
#: A pair's verdicts from best to worst; any other counts as ERROR (never as a pass), and a
#: SKIP (not run) is no evidence either way.
_VERDICTS = ("PASS", "WARN", "FAIL", "ERROR")
_RANK = {verdict: rank for rank, verdict in enumerate(_VERDICTS)}
ERROR = _RANK["ERROR"]


@dataclass(frozen=True)
class FailingPair:
    """One pair (on one rail, when it tested one) whose worse record failed."""

    a: str
    b: str
    rail: str | None
    verdict: str
    value: float | None


@dataclass(frozen=True)
class PairMatrix:
    """Results of node pairs (a cluster check's 2-node runs): ``values[i][j]`` is the figure
    of the pair ``nodes[i]`` -> ``nodes[j]`` (None: not run, or no figure), in ``unit``;
    ``named``: the nodes (or rails, or pairs) the localisation names, drawn out above it."""

    title: str
    nodes: Sequence[str]
    values: Sequence[Sequence[float | None]]
    unit: str
    named: Sequence[str] = ()
    #: ``verdicts[i][j]``: the pair's worse verdict over its rails (None: not run)
    verdicts: Sequence[Sequence[str | None]] = ()
    #: every failing (FAIL or ERROR) pair and rail, by pair
    failing: Sequence[FailingPair] = ()
    #: (node, reason) for each node whose own report says the cluster check named it
    localised: Sequence[tuple[str, str]] = ()


@dataclass(frozen=True)
class PairRecord:
    """One pair result as read from one node's report."""

    node: str
    peer: str
    verdict: str
    value: float | None
    unit: str
    rail: str | None


def has_pairs(summary: Summary) -> bool:
    """Whether a report's entry shows pair results (a pair metric, or a failing pair)."""
    return any(key.startswith(PREFIX) for key in summary.get("metrics") or ()) or any(
        item.startswith(PREFIX) for item in summary.get("failing") or ())


def pair_records(node: str, report: Mapping[str, Any]) -> list[PairRecord]:
    """The pair results in a decoded report of ``node`` (module docstring)."""
    results = report.get("results")
    if not isinstance(results, list):
        return []
    out = []
    for result in results:
        if not isinstance(result, dict):
            continue
        check = result.get("check")
        if not isinstance(check, str) or not check.startswith(PREFIX):
            continue
        evidence = result.get("evidence")
        evidence = evidence if isinstance(evidence, dict) else {}
        entity = result.get("entity")
        parsed = parse_entity(entity) if isinstance(entity, str) else None
        peer = _peer(node, parsed[0] if parsed else entity, evidence)
        if peer is None:
            continue
        measured = result.get("measured")
        value = float(measured) if isinstance(measured, (int, float)) and not isinstance(
            measured, bool) and math.isfinite(measured) else None
        rail = evidence.get("rail") or (parsed[1] if parsed else None)
        unit = result.get("unit")
        out.append(PairRecord(node, peer, str(result.get("verdict")), value,
                              unit if isinstance(unit, str) else "",
                              rail if isinstance(rail, str) and rail else None))
    return out


def localisation_of(report: Mapping[str, Any]) -> str | None:
    """The reason the cluster check named this report's node (its ``LOCALISATION`` result
    FAILed; a result without a text reason reads "named"); None when it did not."""
    results = report.get("results")
    for result in results if isinstance(results, list) else ():
        if isinstance(result, dict) and result.get("check") == LOCALISATION and \
                result.get("verdict") in ("FAIL", "ERROR"):
            why = result.get("measured")
            return why if isinstance(why, str) and why else "named"
    return None


def read_report(root: Path) -> Callable[[str], Mapping[str, Any] | None]:
    """A loader for ``pair_matrix``: a report's path below ``root`` -> the report decoded
    in full (None when it cannot be read or is no JSON object)."""
    from nodegate.errors import ConfigError
    from nodegate.fileio import read_bytes
    from nodegate.report.model import decode

    def load(rel: str) -> Mapping[str, Any] | None:
        try:
            data = decode(read_bytes(root / rel, kind="report"))
        except (OSError, ValueError, ConfigError):
            return None
        return data if isinstance(data, dict) else None

    return load


def _peer(node: str, entity: Any, evidence: Mapping[str, Any]) -> str | None:
    peer = evidence.get("peer")
    if isinstance(peer, str) and peer:
        return peer if peer != node else None
    pair = evidence.get("pair")
    a, b = pair if isinstance(pair, list) and len(pair) == 2 else (
        evidence.get("a"), evidence.get("b"))
    if isinstance(a, str) and isinstance(b, str) and node in (a, b) and a != b:
        return b if a == node else a
    return entity if isinstance(entity, str) and entity and entity != node else None


def _report_nodes(view: FleetView) -> tuple[list[tuple[NodeView, list[Summary]]], int]:
    """Nodes whose current reports show pair results (those with a failing pair first),
    with those reports, at most ``MAX_NODES``; and how many nodes show any. Runs over every
    node of the fleet, so it asks each report only for the pair metrics the fleet has."""
    keys = [metric.key for metric in view.metrics if metric.key.startswith(PREFIX)]
    found = []
    for node in view.nodes:
        with_pairs = []
        failing = False
        for summary in node.current():
            metrics = summary["metrics"]
            failed = any(item.startswith(PREFIX) for item in summary["failing"])
            if failed or any(key in metrics for key in keys):
                with_pairs.append(summary)
                failing = failing or failed
        if with_pairs:
            found.append((not failing, node.node, node, with_pairs))
    found.sort(key=lambda item: item[:2])
    return [(node, summaries) for _, _, node, summaries in found[:MAX_NODES]], len(found)


def pair_matrix(view: FleetView,
                load: Callable[[str], Mapping[str, Any] | None]) -> PairMatrix | None:
    """The matrix of the pair results in ``view``'s reports (``load``: a report's path below
    the view's root -> the decoded report, None when it cannot be read); None when no
    report has any."""
    chosen, total = _report_nodes(view)
    records: list[PairRecord] = []
    localised: dict[str, str] = {}
    for node, reports in chosen:
        for summary in reports:
            data = load(summary["path"])
            if data is not None:
                records.extend(pair_records(node.node, data))
                why = localisation_of(data)
                if why is not None:
                    localised.setdefault(node.node, why)
    if not records:
        return None
    matrix = _matrix(records, reporting=len(chosen), total=total)
    return dataclasses.replace(matrix, localised=tuple(sorted(localised.items())))


def _matrix(records: Sequence[PairRecord], *, reporting: int, total: int) -> PairMatrix:
    """One result per pair and rail (the worse of its records), drawn per pair (the worse
    over its rails) and localised per rail."""
    merged: dict[tuple[str, str, str | None], tuple[int, float | None]] = {}
    for record in records:
        if record.verdict == "SKIP":
            continue  # not run: no evidence either way
        key = (min(record.node, record.peer), max(record.node, record.peer), record.rail)
        merged[key] = _worse(merged.get(key), (_RANK.get(record.verdict, ERROR), record.value))
    cells: dict[tuple[str, str], tuple[int, float | None]] = {}
    for (a, b, _), result in merged.items():
        cells[(a, b)] = _worse(cells.get((a, b)), result)
    nodes = sorted({name for key in cells for name in key})
    index = {name: i for i, name in enumerate(nodes)}
    values: list[list[float | None]] = [[None] * len(nodes) for _ in nodes]
    verdicts: list[list[str | None]] = [[None] * len(nodes) for _ in nodes]
    for (a, b), (rank, value) in cells.items():
        values[index[a]][index[b]] = values[index[b]][index[a]] = value
        verdicts[index[a]][index[b]] = verdicts[index[b]][index[a]] = _VERDICTS[rank]
    failing = [FailingPair(a, b, rail, _VERDICTS[rank], value)
               for (a, b, rail), (rank, value) in sorted(
                   merged.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or ""))
               if rank >= _RANK["FAIL"]]
    units = sorted({record.unit for record in records if record.unit})
    read = f"{reporting} of {total}" if total > reporting else f"{reporting}"
    return PairMatrix(f"cluster check: pairs from {read} nodes' reports", nodes, values,
                      units[0] if len(units) == 1 else "", tuple(_named(merged)),
                      verdicts, tuple(failing))


def _worse(old: tuple[int, float | None] | None,
           new: tuple[int, float | None]) -> tuple[int, float | None]:
    """The worse verdict and the lower figure of two results of one pair."""
    if old is None:
        return new
    figures = [value for value in (old[1], new[1]) if value is not None]
    return max(old[0], new[0]), min(figures) if figures else None


def _named(merged: Mapping[tuple[str, str, str | None], tuple[int, float | None]]
           ) -> list[str]:
    """What ``cluster.pairs.localise`` names, each rail read on its own."""
    from nodegate.judge.pairs import PairResult, by_rail, localise

    results = [PairResult(a, b, _VERDICTS[rank], rail, value)
               for (a, b, rail), (rank, value) in merged.items()]
    named: list[str] = []
    for rail, group in sorted(by_rail(results).items(), key=lambda kv: kv[0] or ""):
        found = localise(group)
        where = f" (rail {rail})" if rail else ""
        named += [f"{node}{where}" for node in found.nodes]
        named += [f"{a} - {b}{where}" for a, b in found.pairs]
    return named
