"""Text and JSON renderings of the fleet view (the HTML one is in ``html``)."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from nodegate.fleet.aggregate import FleetView, NodeView, Swap
from nodegate.identity import escape
from nodegate.vocabulary import FAILING

if TYPE_CHECKING:
    from nodegate.fleet.pair_records import FailingPair, PairMatrix

#: Failing pairs listed in the text view (``--json`` lists every one).
PAIR_LINES = 10


def failing_text(node: NodeView, limit: int = 3) -> str:
    items, total = node.failing()
    shown = items[:limit]
    more = total - len(shown)
    return ", ".join(shown) + (f", +{more} more" if more > 0 else "")


def card_text(identity: dict[str, str]) -> str:
    """``serial 1652922009382, bus 00000000:18:00.0, part 692-2G520-0200-000``."""
    names = (("serial", "serial"), ("uuid", "uuid"), ("pci_bus_id", "bus"),
             ("board_part_number", "part"), ("vbios", "vbios"))
    return ", ".join(f"{label} {identity[key]}" for key, label in names if key in identity)


def swap_text(swap: Swap) -> str:
    return (f"{swap.entity} swapped: {swap.field} {swap.before} -> {swap.after} (slot "
            f"{swap.slot}, between {_short_time(swap.since)} and {_short_time(swap.until)})")


def _short_time(text: str) -> str:
    return text[:16].replace("T", " ") + "Z"


def _fmt(value: float) -> str:
    return f"{value:.4g}" if abs(value) < 1e6 else f"{value:.3e}"


def render_text(view: FleetView, *, history: int = 5, pairs: PairMatrix | None = None) -> str:
    """The fleet summary an operator reads in a terminal: nodes (failing first), metrics with
    their spread and outliers per profile, the cluster check's pairs (``pairs``, from
    ``pair_records.pair_matrix``; none: no section), and the recent history of nodes that
    have one."""
    ordered = sorted(view.nodes, key=lambda n: (n.verdict not in FAILING, n.node))
    lines = [*_header_lines(view), "", *_node_lines(ordered), *_metric_lines(view),
             *pair_lines(pairs), *_card_lines(ordered), *_swap_lines(view),
             *_history_lines(view, history), *_unreadable_lines(view)]
    # every name here came from a report: escaped, so an ANSI sequence or a newline in a node
    # name can neither clear the terminal nor forge a row (``identity.escape``)
    return "\n".join(escape(line) for line in lines) + "\n"


def pair_lines(matrix: PairMatrix | None) -> list[str]:
    """The cluster check's pairs in a few lines (led by a blank one): how many fail, what the
    localisation names and why (each named node's own report), then the failing pairs, up
    to ``PAIR_LINES``. Nothing without a matrix."""
    if matrix is None or not matrix.nodes:
        return []
    grid = matrix.verdicts or matrix.values  # a matrix made by hand may give figures alone
    ran = sum(cell is not None for row in grid for cell in row) // 2
    failing = {(pair.a, pair.b) for pair in matrix.failing}
    lines = ["", f"Pairs ({matrix.title}): "
             + (f"{len(failing)} of {ran} pairs fail" if failing else f"all {ran} pairs pass")]
    if matrix.named:
        lines.append("  Named by the localisation: " + ", ".join(matrix.named))
    for node, why in matrix.localised:
        lines.append(f"  {node}, as its report says: {_clip(why, 160)}")
    for pair in matrix.failing[:PAIR_LINES]:
        lines.append(f"  {pair.verdict:<5} {pair_text(pair, matrix.unit)}")
    more = len(matrix.failing) - PAIR_LINES
    if more > 0:
        lines.append(f"  ... and {more} more failing pair(s) (--json lists every one)")
    return lines


def pair_text(pair: FailingPair, unit: str) -> str:
    """``hgx0 - hgx3 (rail mlx5_1): 12 GB/s``."""
    rail = f" (rail {pair.rail})" if pair.rail else ""
    figure = f"{_fmt(pair.value)} {unit}".rstrip() if pair.value is not None else "no figure"
    return f"{pair.a} - {pair.b}{rail}: {figure}"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _header_lines(view: FleetView) -> list[str]:
    counts = view.verdicts()
    count_text = ", ".join(f"{counts[v]} {v}" for v in ("FAIL", "ERROR", "WARN", "SKIP", "PASS")
                           if counts.get(v))
    return [f"Fleet {view.root}: {len(view.nodes)} nodes, {view.n_reports} reports"
            + (f", {len(view.unreadable)} unreadable" if view.unreadable else "")
            + (f". Verdicts: {count_text}" if count_text else ""),
            *([f"{full_reads_text(view)}."] if view.full_reads else [])]


def full_reads_text(view: FleetView) -> str:
    """How many reports were parsed in full: why a run was slow, and which nodes still write
    no summaries (older nodegate)."""
    return (f"{view.full_reads} of {view.n_reports + len(view.unreadable)} reports read in "
            f"full (no usable summary beside them)")


def _node_lines(ordered: list[NodeView]) -> list[str]:
    width = max([4, *(len(n.node) for n in ordered)])
    lines = [f"{'NODE':<{width}}  VERDICT  LATEST      FINISHED           FAILING"]
    for node in ordered:
        latest = node.latest
        lines.append(f"{node.node:<{width}}  {node.verdict:<7}  {latest['level']:<10}  "
                     f"{_short_time(latest['finished_at'])}  {failing_text(node)}".rstrip())
    return lines


def _metric_lines(view: FleetView) -> list[str]:
    """The spread table per metric and profile, the notes on profiles too few for outliers,
    then every outlier (each section led by a blank line)."""
    if not view.metrics:
        return []
    lines = ["", f"Metrics: each node's worst entity, per profile; outliers worse than the "
                 f"median of their profile's nodes by more than {view.margin_pct:g}%"]
    # as the HTML page: a metric with the same value on every node has nothing to show
    shown = [m for m in view.metrics if m.outliers or not m.flat]
    flat = [m for m in view.metrics if not m.outliers and m.flat]
    key_width = max([6, *(len(m.key) for m in shown)])
    profile_width = max([7, *(len(m.profile) for m in shown)])
    if shown:
        lines.append(f"{'METRIC':<{key_width}}  {'PROFILE':<{profile_width}}  {'UNIT':<7} "
                     f"{'NODES':>6} {'MIN':>9} {'MEDIAN':>9} {'MAX':>9}  OUTLIERS")
    for metric in shown:
        stats = metric.stats
        lines.append(f"{metric.key:<{key_width}}  {metric.profile:<{profile_width}}  "
                     f"{metric.unit:<7} {int(stats['n']):>6} {_fmt(stats['min']):>9} "
                     f"{_fmt(stats['median']):>9} {_fmt(stats['max']):>9}  "
                     f"{len(metric.outliers)}")
    if flat:
        lines.append(f"  ({len(flat)} of {len(view.metrics)} metrics left out: the same "
                     f"value on every node; --json and --html list them)")
    lines += [f"  ({note})" for note in view.notes]
    outliers = [(m, o) for m in view.metrics for o in m.outliers]
    if outliers:
        lines += ["", "Outliers:"]
        for metric, outlier in outliers:
            check = metric.key.split("[", 1)[0]
            lines.append(f"  {outlier.node} {check}[{outlier.entity}] {_fmt(outlier.value)} "
                         f"{metric.unit} ({outlier.deviation_pct:+.1f}% vs the "
                         f"{outlier.profile} median {_fmt(metric.stats['median'])})")
    return lines


def _card_lines(ordered: list[NodeView]) -> list[str]:
    cards = [(node, card) for node in ordered for card in node.failing_cards()]
    if not cards:
        return []
    lines = ["", "Failing cards (the physical GPU behind each failing check):"]
    for node, (entity, identity, items) in cards:
        more = f", +{len(items) - 3} more" if len(items) > 3 else ""
        lines.append(f"  {node.node} {entity} ({card_text(identity)}): "
                     + ", ".join(items[:3]) + more)
    return lines


def _swap_lines(view: FleetView) -> list[str]:
    swaps = [(node, swap) for node in view.nodes for swap in node.swaps()]
    if not swaps:
        return []
    lines = ["", "Swapped cards (a slot's serial changed between two reports):"]
    lines += [f"  {node.node} {swap_text(swap)}" for node, swap in swaps]
    return lines


def _history_lines(view: FleetView, history: int) -> list[str]:
    """The last ``history`` reports of each node that has more than one, swaps marked."""
    with_history = [n for n in view.nodes if len(n.history) > 1]
    if not (with_history and history):
        return []
    lines = ["", f"History (last {history} reports, oldest first):"]
    for node in with_history:
        swapped: dict[str, list[str]] = {}
        for swap in node.swaps():
            swapped.setdefault(swap.report, []).append(swap.entity)
        steps = [f"{_short_time(s['finished_at'])} {s['level']} {s['verdict']}"
                 + (f" [swapped {','.join(swapped[s['path']])}]"
                    if s["path"] in swapped else "")
                 for s in node.history[-history:]]
        lines.append(f"  {node.node}: " + " -> ".join(steps))
    return lines


def _unreadable_lines(view: FleetView) -> list[str]:
    if not view.unreadable:
        return []
    lines = ["", "Unreadable reports (a node's own makes it ERROR; any makes the exit 1):"]
    lines += [f"  {path}: {error}" for path, error in view.unreadable]
    return lines


def pairs_data(matrix: PairMatrix) -> dict[str, Any]:
    """The pair matrix as plain JSON: one row per node (the figure and the verdict of its
    pair with each node, in ``nodes`` order; null: not run), what the localisation names,
    each named node's reason as its report gives it, every failing pair."""
    return {
        "title": matrix.title, "unit": matrix.unit, "nodes": list(matrix.nodes),
        "rows": [{"node": node, "values": list(values),
                  "verdicts": list(matrix.verdicts[i]) if matrix.verdicts else []}
                 for i, (node, values) in enumerate(zip(matrix.nodes, matrix.values,
                                                        strict=True))],
        "named": list(matrix.named),
        "localisation": dict(matrix.localised),
        "failing": [{"a": p.a, "b": p.b, "rail": p.rail, "verdict": p.verdict,
                     "value": p.value} for p in matrix.failing],
    }


def to_data(view: FleetView, *, pairs: PairMatrix | None = None) -> dict[str, Any]:
    """Plain JSON for scripts (``nodegate report DIR --json``); ``pairs`` (a cluster check's
    matrix, ``pairs_data``) only where the reports carry pair results."""
    return {
        "root": str(view.root),
        "generated_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "margin_pct": view.margin_pct,
        "verdicts": view.verdicts(),
        "read_in_full": view.full_reads,
        "notes": view.notes,
        "nodes": [
            {
                "node": node.node,
                "verdict": node.verdict,
                "latest": {"level": node.latest["level"],
                           "finished_at": node.latest["finished_at"],
                           "verdict": node.latest["verdict"], "report": node.latest["path"]},
                "current": {s["level"]: s["verdict"] for s in node.current()},
                "failing": node.failing()[0],
                "unreadable": [{"report": path, "error": error}
                               for path, error in node.unreadable],
                "n_failing": node.failing()[1],
                "gpus": node.gpus(),
                "failing_cards": [{"entity": entity, **identity, "failing": items}
                                  for entity, identity, items in node.failing_cards()],
                "swaps": [{"entity": s.entity, "slot": s.slot, "field": s.field,
                           "before": s.before, "after": s.after, "since": s.since,
                           "until": s.until, "report": s.report} for s in node.swaps()],
                "history": [
                    {"finished_at": s["finished_at"], "level": s["level"],
                     "verdict": s["verdict"], "report": s["path"]}
                    for s in node.history
                ],
            }
            for node in view.nodes
        ],
        "metrics": [
            {
                "metric": m.key, "profile": m.profile, "unit": m.unit,
                "direction": m.direction, "stats": m.stats,
                "outliers": [
                    {"node": o.node, "profile": o.profile, "entity": o.entity,
                     "value": o.value, "deviation_pct": o.deviation_pct}
                    for o in m.outliers
                ],
            }
            for m in view.metrics
        ],
        "unreadable": [{"report": path, "error": error} for path, error in view.unreadable],
        **({"pairs": pairs_data(pairs)} if pairs is not None and pairs.nodes else {}),
    }
