"""The fleet digest: a small summary of a report's results, written before ``results``.

Why it exists: the fleet view (``nodegate report DIR``) over 10,000 reports of ~190 KB cannot
parse every ``results`` array on a cold run in seconds. The node already holds its results when
it writes the report, so it computes the fleet's per-file summary once (failing test ids, and
per metric group the node's worst and median value) and writes it as the top-level ``digest``
key, just before ``results``. A fleet reader then needs only the first few KB of each file.

The digest is derived data, never a second source of truth:

- ``validate`` (and so ``load`` and ``write``) recomputes it from ``results`` and refuses a
  report whose digest disagrees (``key $.digest.<field>``), like a hand-edited verdict.
- ``report_id`` and ``counts`` repeat the report's own head, so a reader that trusts it
  without reading the results can still check it belongs to that file; ``tail_bytes``
  (bytes from the ``"results"`` key to the end of the file) tells it the body was not cut
  short or rewritten since.
- ``v`` is the digest's own version: when the fleet's summary rules change it is bumped, and a
  reader that does not know a ``v`` ignores the digest and reads the results.

Standard library only: the cron health check imports this through ``nodegate.report``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from nodegate.errors import ConfigError
from nodegate.vocabulary import FAILING

#: Bump when what the digest means changes; readers ignore digests of another version.
DIGEST_VERSION = 1

#: Failing test ids kept per report (the count is kept in full).
MAX_FAILING_KEPT = 20


#: The bulky top-level keys, always written last and in this order; ``tail_bytes`` counts them.
TAIL_KEYS = ("results", "series", "matrices")

#: Position of each field of a ``metrics`` entry.
METRIC_FIELDS = ("unit", "direction", "worst", "worst_entity", "median", "n")

_DIGITS = re.compile(r"\d+")
#: Integers below this in size always convert to a float; far beyond it none do.
_INT_LIMIT = 2**1023
_COUNT_KEYS = ("FAIL", "ERROR", "WARN", "SKIP", "PASS")


@lru_cache(maxsize=4096)
def entity_kind(entity: str) -> str:
    """``gpu3.link5`` -> ``gpu.link``; ``gpu0-gpu1`` -> ``gpu-gpu``: what is compared across
    nodes is the same kind of thing, not the same index (remembered: a report names each
    entity for several checks, and a fleet's reports name the same ones)."""
    return _DIGITS.sub("", entity)


def direction(threshold: Any) -> str:
    """``higher`` (is better; outliers are below) unless only a ``max`` bounds the metric."""
    if isinstance(threshold, Mapping) and "max" in threshold and "min" not in threshold:
        return "lower"
    return "higher"


def _median(ordered: Sequence[float]) -> float:
    """``statistics.median`` without importing ``statistics`` (and its ``fractions``)."""
    size = len(ordered)
    middle = size // 2
    if size % 2:
        return float(ordered[middle])
    return float((ordered[middle - 1] + ordered[middle]) / 2)


def compute(results: Sequence[Mapping[str, Any]], report_id: str) -> dict[str, Any]:
    """The digest of JSON-ready result dicts (raises KeyError/TypeError/ValueError on
    malformed ones, ConfigError naming ``$.results[i].measured`` on a number no float holds,
    such as an integer of 400 digits: every reader of a report meets it here first).

    ``counts`` is results per verdict, as the head's; ``failing`` the first
    ``MAX_FAILING_KEPT`` failing test ids (``check[entity]``, FAIL or ERROR).

    ``metrics`` maps ``check[entity kind]`` to ``[unit, direction, worst, worst entity, median,
    n]`` over the finite numeric ``measured`` values (booleans are not numbers here).
    """
    counts = dict.fromkeys(_COUNT_KEYS, 0)
    failing: list[str] = []
    groups: dict[str, list[Any]] = {}
    for index, result in enumerate(results):
        check = result["check"]
        entity = result["entity"]
        verdict = result["verdict"]
        if verdict not in counts:
            raise ValueError(f"unknown verdict {verdict!r} in $.results")
        counts[verdict] += 1
        if verdict in FAILING and len(failing) < MAX_FAILING_KEPT:
            failing.append(f"{check}[{entity}]")
        measured = result.get("measured")
        if isinstance(measured, bool) or not isinstance(measured, (int, float)):
            continue
        if isinstance(measured, float) and not math.isfinite(measured):
            continue
        if isinstance(measured, int) and not -_INT_LIMIT < measured < _INT_LIMIT:
            try:  # the few just under 2**1024 that round up to it
                float(measured)
            except OverflowError:
                raise ConfigError("number out of range (no float holds it)",
                                  key=f"$.results[{index}].measured") from None
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
                        _median(sorted(values)), len(values)]
    return {
        "v": DIGEST_VERSION,
        "report_id": report_id,
        "counts": counts,
        "failing": failing,
        "metrics": metrics,
    }


def verdict_from_counts(counts: Mapping[str, int]) -> str:
    """The node verdict the counts imply, by ``overall_verdict``'s rule: the worst judged
    result; SKIP only when every result was skipped; PASS when there are none."""
    total = sum(counts.values())
    if total and counts.get("SKIP", 0) == total:
        return "SKIP"
    for verdict in ("FAIL", "ERROR", "WARN"):
        if counts.get(verdict, 0):
            return verdict
    return "PASS"


def agrees_with_head(digest: Any, head: Mapping[str, Any]) -> str | None:
    """Why ``digest`` cannot be trusted for this head (None when it can), checked without the
    results: its shape, and its ``report_id`` and ``counts`` against the head's (whose
    ``verdict`` must be the one the counts imply). Runs on every file of a fleet, so it is
    written for speed: exact JSON types (``json`` decodes a number written as ``8.0`` to
    ``float``, a count to ``int``)."""
    if type(digest) is not dict or digest.get("v") != DIGEST_VERSION:
        return "no digest of this version"
    if digest.get("report_id") != head.get("report_id"):
        return "report_id differs from the report's"
    counts = head.get("counts")
    if type(counts) is not dict or (total := _counts_total(counts)) is None:
        return "counts malformed"
    if digest.get("counts") != counts:
        return "counts differ from the report's"
    if head.get("verdict") != verdict_from_counts(counts):
        return "verdict differs from the counts"
    if not _failing_ok(digest.get("failing"), counts["FAIL"] + counts["ERROR"]):
        return "failing malformed"
    measured = _metrics_measured(digest.get("metrics"))
    if measured is None:
        return "metrics malformed"
    if measured > total:
        return "metrics count more values than there are results"
    return None


def _counts_total(counts: dict[str, Any]) -> int | None:
    """How many results the head's counts add up to; None unless they are one non-negative
    ``int`` per verdict."""
    if len(counts) != len(_COUNT_KEYS):
        return None
    total = 0
    for key in _COUNT_KEYS:
        count = counts.get(key)
        if type(count) is not int or count < 0:
            return None
        total += count
    return total


def _failing_ok(failing: Any, n_failing: int) -> bool:
    """A list of strings, as long as the failing results it can keep."""
    if type(failing) is not list or len(failing) != min(n_failing, MAX_FAILING_KEPT):
        return False
    return all(type(item) is str for item in failing)


def _metrics_measured(metrics: Any) -> int | None:
    """How many values the digest's metrics summarise; None when an entry is malformed."""
    if type(metrics) is not dict:
        return None
    measured = 0
    for entry in metrics.values():
        if type(entry) is not list or len(entry) != len(METRIC_FIELDS):
            return None
        unit, sense, worst, entity, median, count = entry
        # x - x == 0.0 is False for NaN and the infinities (json.loads accepts both)
        if (type(worst) is not float or type(median) is not float or worst - worst != 0.0
                or median - median != 0.0 or type(unit) is not str or type(entity) is not str
                or sense not in ("higher", "lower") or type(count) is not int
                or count < 1):
            return None
        measured += count
    return measured


def first_difference(embedded: Mapping[str, Any],
                     computed: Mapping[str, Any]) -> tuple[str, ...] | None:
    """Where an embedded digest and the one recomputed from the results first differ
    (``("counts",)``, ``("metrics", "p2p_bandwidth[gpu-gpu]")``), None when they agree;
    ``tail_bytes`` describes the file, not the data, and is not compared."""
    for name in ("v", "report_id", "counts", "failing"):
        if embedded.get(name) != computed.get(name):
            return (name,)
    mine = embedded.get("metrics")
    theirs = computed["metrics"]
    if not isinstance(mine, Mapping):
        return ("metrics",)
    for key in sorted(set(mine) | set(theirs)):
        if mine.get(key) != theirs.get(key):
            return ("metrics", key)
    extra = sorted(set(embedded) - set(computed) - {"tail_bytes"})
    return (extra[0],) if extra else None


def check(data: Mapping[str, Any], *, source: str,
          computed: Mapping[str, Any] | None = None) -> None:
    """Raise ConfigError (``key $.digest...``) when ``data`` embeds a digest of this version
    that its own results do not produce (``computed``: that digest, when the caller has it).
    A digest of another version is left alone."""
    embedded = data.get("digest")
    if not isinstance(embedded, Mapping) or embedded.get("v") != DIGEST_VERSION:
        return
    if computed is None:
        computed = compute(data["results"], str(data["report_id"]))
    where = first_difference(embedded, computed)
    if where is None:
        return
    raise ConfigError(
        f"the embedded digest disagrees with the results ({_short(_get(embedded, where))} in "
        f"the file, {_short(_get(computed, where))} from the results): the file was edited "
        f"after it was written",
        file=source,
        key=digest_path(where),
    )


def digest_path(where: Sequence[str]) -> str:
    """``("metrics", "p2p_bandwidth[gpu-gpu]")`` -> ``$.digest.metrics["p2p_bandwidth[gpu-gpu]"]``
    (the quoting ``model.json_path`` uses for keys that are not identifiers)."""
    out = "$.digest"
    for part in where:
        out += f".{part}" if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", part) else \
            f"[{json.dumps(part)}]"
    return out


def _get(digest: Mapping[str, Any], where: Sequence[str]) -> Any:
    value: Any = digest
    for part in where:
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def _short(value: Any) -> str:
    text = json.dumps(value, default=repr)
    return text if len(text) <= 80 else text[:77] + "..."
