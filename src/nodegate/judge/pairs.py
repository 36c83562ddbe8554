"""Which node (or path) a cluster check's failing pairs name: the reading of the pair matrix.

The cluster check measures pairs (``nodegate.cluster.cluster_check``); this decides what they
name, as ``nodegate.cluster.pairs``'s docstring sets out, and fixes the shape of the pair
results each node's report carries, which the fleet page reads back
(``nodegate.fleet.pair_records``). Here, below both, so neither imports the other for it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

#: The verdicts of one pair's job, worst last.
PAIR_VERDICTS = ("PASS", "WARN", "FAIL", "ERROR")
#: The check names of the pair results a cluster check writes into each node's report start
#: with this; the fleet page reads them back (``nodegate.fleet.pair_records``).
RESULT_PREFIX = "cluster_pair_"


def result_entity(other: str, rail: str | None) -> str:
    """The entity of a node's pair result: the other node, and the rail when one was tested."""
    return f"{rail}@{other}" if rail else f"peer-{other}"


def parse_entity(entity: str) -> tuple[str, str | None] | None:
    """``(other node, rail or None)`` of a ``result_entity``; None for any other string."""
    if entity.startswith("peer-") and len(entity) > len("peer-"):
        return entity[len("peer-"):], None
    rail, at, other = entity.partition("@")
    return (other, rail) if at and rail and other else None


@dataclass(frozen=True)
class PairResult:
    """One pair's job: ``a`` hosted the rendezvous, ``b`` joined; ``rail`` the rail it tested
    (None: the node's collectives over every rail); the bus bandwidth it reached."""

    a: str
    b: str
    verdict: str
    rail: str | None = None
    busbw_gbps: float | None = None
    detail: str = ""

    @property
    def passed(self) -> bool:
        return self.verdict in ("PASS", "WARN")

    def key(self) -> tuple[str, str]:
        return (self.a, self.b) if self.a <= self.b else (self.b, self.a)


@dataclass(frozen=True)
class Localisation:
    """What the matrix names: nodes, pairs, or nothing with the reason."""

    nodes: tuple[str, ...]
    pairs: tuple[tuple[str, str], ...]
    why: dict[str, str] = field(default_factory=dict)
    undetermined: str | None = None


def localise(results: Iterable[PairResult]) -> Localisation:
    """Read one rail's (or the collectives') pair results as the module docstring says."""
    results = list(results)
    passes: dict[str, int] = {}
    fails: dict[str, list[str]] = {}
    for r in results:
        for me, other in ((r.a, r.b), (r.b, r.a)):
            passes.setdefault(me, 0)
            fails.setdefault(me, [])
            if r.passed:
                passes[me] += 1
            else:
                fails[me].append(other)
    failing = [r for r in results if not r.passed]
    if not failing:
        return Localisation((), ())
    if not any(r.passed for r in results):
        return Localisation((), (), undetermined=(
            f"all {len(results)} pair(s) failed: a fabric-wide fault, or too few nodes to "
            "tell which one"))
    named = tuple(sorted(n for n in fails if fails[n] and passes[n] == 0))
    why = {n: f"failed with {', '.join(sorted(fails[n]))}; passed with none" for n in named}
    pairs = tuple(sorted({r.key() for r in failing if r.a not in named and r.b not in named}))
    for a, b in pairs:
        why[f"{a}-{b}"] = (f"{a} and {b} each pass with others but failed together: the path "
                           "between them (cable, switch port, route) or a flaky run")
    return Localisation(named, pairs, why)


def by_rail(results: Iterable[PairResult]) -> dict[str | None, list[PairResult]]:
    out: dict[str | None, list[PairResult]] = {}
    for r in results:
        out.setdefault(r.rail, []).append(r)
    return out
