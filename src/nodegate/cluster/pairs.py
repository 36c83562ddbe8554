"""Cluster acceptance by pairs: which 2-node jobs to run, and which node the failures name.

A fabric fault shows as failing pairs, never as one failing node: a node with a bad NIC or
cable fails every pair it is in, while a bad link between two otherwise good nodes fails that
pair alone. So acceptance runs every pair (all-pairs, in rounds of disjoint pairs so a round's
jobs can run at once) and reads the matrix:

- a node with at least one failing pair and **no passing pair** is named: nothing it did
  worked, while the others worked with someone;
- a failing pair whose two nodes both pass with others names that **pair** (the path between
  them: a cable, a switch port, a route), not a node;
- when no pair passed at all, nothing is named: a fabric-wide fault, or too few nodes to tell
  one from another, and the report says so rather than blame every node.

A pair that could not be measured (ERROR: the job did not start, timed out) is never a pass;
it counts as failing evidence and is marked as such in the matrix. Per-rail results are read
one rail at a time, so a node with one bad rail is named on that rail only.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

# the reading of the matrix and the results' shape live with the judge (below the fleet page,
# which reads them too); re-exported here for the cluster check
from nodegate.judge.pairs import (
    PAIR_VERDICTS,
    RESULT_PREFIX,
    Localisation,
    PairResult,
    by_rail,
    localise,
    parse_entity,
    result_entity,
)

if TYPE_CHECKING:
    from nodegate.fleet.pair_records import PairMatrix

__all__ = ["PAIR_VERDICTS", "RESULT_PREFIX", "Localisation", "PairResult", "bisection_rounds",
           "by_rail", "localise", "matrix_html", "pair_matrix", "parse_entity", "reason_for",
           "result_entity", "rounds"]


def rounds(nodes: Sequence[str]) -> list[list[tuple[str, str]]]:
    """Every pair of ``nodes`` once, in ``n - 1`` rounds (``n`` for an odd count, one node
    resting each round) of disjoint pairs: the circle method, first node fixed."""
    ring = list(dict.fromkeys(nodes))
    if len(ring) < 2:
        return []
    if len(ring) % 2:
        ring.append("")  # the rest: its partner sits the round out
    half = len(ring) // 2
    out: list[list[tuple[str, str]]] = []
    for _ in range(len(ring) - 1):
        pairs = [(ring[i], ring[-1 - i]) for i in range(half)]
        out.append([(a, b) for a, b in pairs if a and b])
        ring = [ring[0], ring[-1], *ring[1:-1]]
    return out


#: A node must meet at least this many partners for the reading to clear it: with one, a
#: node whose only partner is the faulty one would fail every pair it is in and be named too.
MIN_PARTNERS = 2


def bisection_rounds(nodes: Sequence[str]) -> list[list[tuple[str, str]]]:
    """About ``log2(n)`` rounds of disjoint pairs instead of ``n - 1``: in round ``k`` node
    ``i`` meets node ``i XOR 2**k`` (the hypercube's edges), so every node meets
    ``ceil(log2 n)`` others and a faulty node fails each of its pairs while each other node
    fails at most the one pair it had with it. Where ``n`` is no power of two, a node with
    fewer than ``MIN_PARTNERS`` partners gets more, packed into the rounds (or new ones)
    where both nodes are free. Same reading as all-pairs (``localise``); a fault needing two
    bad nodes in one pair to show is beyond it, as it is beyond any plan short of all pairs."""
    ring = list(dict.fromkeys(nodes))
    n = len(ring)
    if n < 2:
        return []
    out: list[list[tuple[str, str]]] = []
    partners: dict[str, set[str]] = {name: set() for name in ring}
    bit = 1
    while bit < n:
        pairs = [(ring[i], ring[i ^ bit]) for i in range(n) if i < (i ^ bit) < n]
        for a, b in pairs:
            partners[a].add(b)
            partners[b].add(a)
        out.append(pairs)
        bit <<= 1
    for index, name in enumerate(ring):
        step = 1
        while len(partners[name]) < min(MIN_PARTNERS, n - 1) and step < n:
            other = ring[(index + step) % n]
            step += 1
            if other in partners[name]:
                continue
            partners[name].add(other)
            partners[other].add(name)
            _place(out, (name, other) if index < ring.index(other) else (other, name))
    return out


def _place(rounds_: list[list[tuple[str, str]]], pair: tuple[str, str]) -> None:
    """Put ``pair`` in the first round where neither node is busy, else in a new round."""
    for round_pairs in rounds_:
        if not any(node in p for p in round_pairs for node in pair):
            round_pairs.append(pair)
            return
    rounds_.append([pair])


def reason_for(node: str, loc: Localisation, rail: str | None = None) -> str:
    """The drain reason of a node the matrix named (it names the failing pairs)."""
    where = f" on rail {rail}" if rail else ""
    return f"nodegate: cluster-check{where}: {loc.why[node]}"


def pair_matrix(nodes: Sequence[str], results: Iterable[PairResult], loc: Localisation, *,
                title: str = "all_reduce bus bandwidth") -> PairMatrix:
    """The matrix as the fleet page draws it (``fleet.html.PairMatrix``): each pair's bus
    bandwidth in both halves (None: not measured, an ERROR pair included), the named nodes
    and pairs."""
    from nodegate.fleet.pair_records import PairMatrix

    cells = {r.key(): r.busbw_gbps for r in results}
    values = [[None if a == b else cells.get((a, b) if a <= b else (b, a)) for b in nodes]
              for a in nodes]
    named = [*loc.nodes, *(f"{a}-{b}" for a, b in loc.pairs)]
    return PairMatrix(title=title, nodes=list(nodes), values=values, unit="GB/s", named=named)


def matrix_html(nodes: Sequence[str], results: Iterable[PairResult], loc: Localisation, *,
                title: str = "pair matrix") -> str:
    """A self-contained page of the pair matrix: what the matrix names first, then the heat
    map the fleet page draws (``fleet.html.pair_matrix_section``: one renderer for both),
    then each pair's verdict as text (the map shows figures; FAIL and ERROR are read here)."""
    from nodegate.fleet.html import pair_matrix_section

    results = list(results)
    cells = {r.key(): r for r in results}
    esc = html.escape
    head = "".join(f"<th>{esc(n)}</th>" for n in nodes)
    rows = []
    for a in nodes:
        tds = []
        for b in nodes:
            r = cells.get((a, b) if a <= b else (b, a))
            if a == b or r is None:
                tds.append("<td class=none></td>")
                continue
            figure = f"<br>{r.busbw_gbps:.1f} GB/s" if r.busbw_gbps is not None else ""
            tds.append(f'<td class={r.verdict.lower()} title="{esc(r.detail)}">'
                       f'{esc(r.verdict)}{figure}</td>')
        named = " class=named" if a in loc.nodes else ""
        rows.append(f"<tr><th{named}>{esc(a)}</th>{''.join(tds)}</tr>")
    if loc.undetermined:
        verdict = f"<p class=undetermined>{esc(loc.undetermined)}</p>"
    elif loc.nodes or loc.pairs:
        items = "".join(f"<li><b>{esc(k)}</b>: {esc(v)}</li>" for k, v in loc.why.items())
        verdict = f"<p>Named by the matrix:</p><ul>{items}</ul>"
    else:
        verdict = "<p>Every pair passed.</p>"
    heat = "".join(pair_matrix_section(pair_matrix(nodes, results, loc)))
    return ("<!doctype html><meta charset=utf-8>"
            f"<title>{esc(title)}</title><style>body{{font-family:sans-serif}}"
            "table{border-collapse:collapse}td,th{border:1px solid #999;padding:4px 8px;"
            "text-align:center;font-size:13px}th.named{background:#f2a7a7}"
            "td.fail,td.error{font-weight:600}td.none{background:#eee}"
            ".muted{fill:#666}</style>"
            f"<h1>{esc(title)}</h1>{verdict}{heat}"
            f"<h3>Each pair's verdict</h3>"
            f"<table><tr><th></th>{head}</tr>{''.join(rows)}</table>")
