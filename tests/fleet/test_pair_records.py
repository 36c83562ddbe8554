"""The fleet page's pair matrix comes from the pair results a cluster check left in the node
reports (results whose check starts with ``cluster_pair_``, as ``cluster_check.node_report``
writes them): the node common to the failing pairs is
named, only the reports that hold pair results are decoded in full, and reports without any,
or with records of another shape, give no matrix and no error."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nodegate.fleet.aggregate import FleetView, aggregate
from nodegate.fleet.html import render_html
from nodegate.fleet.pair_records import has_pairs, pair_matrix, pair_records
from nodegate.report.fleet_summary import write_report
from nodegate.report.model import decode
from nodegate.results import CheckResult
from nodegate_lab.synthetic_fleet import synthetic_report

NOW = dt.datetime.now(dt.timezone.utc)
NODES = ("hgx0", "hgx1", "hgx2", "hgx3")


def _pair(peer: str, verdict: str, busbw: float | None, **evidence: str) -> dict[str, Any]:
    """One pair result as a node report holds it (``results[i]``), written out by hand in the
    shape ``cluster_check.node_report`` gives it (the last test holds the two together)."""
    rail = evidence.get("rail")
    return {"check": "cluster_pair_rail_bw" if rail else "cluster_pair_busbw",
            "entity": f"{rail}@{peer}" if rail else f"peer-{peer}", "measured": busbw,
            "threshold": {"min": 150.0}, "unit": "GB/s", "verdict": verdict,
            "severity": "critical", "evidence": dict(evidence)}


def _write(root: Path, node: str, extra: Sequence[Mapping[str, Any]], *,
           level: str = "standard", hours_ago: float = 1.0) -> Path:
    report = synthetic_report(node, level=level, seed=node, samples=5,
                              started_at=NOW - dt.timedelta(hours=hours_ago))
    report = dataclasses.replace(report, results=report.results + tuple(
        CheckResult.from_dict(dict(item)) for item in extra))
    return write_report(report, root / node / f"{level}-latest.json")


def _cluster(root: Path, bad: str | None, rail: str | None = None) -> FleetView:
    """Every pair of NODES ran; each pair's result is in both nodes' reports; a pair with
    ``bad`` in it failed (on ``rail`` only, when given)."""
    for node in NODES:
        extra = []
        for peer in NODES:
            if peer == node:
                continue
            failed = bad in (node, peer)
            for on in ((None,) if rail is None else ("mlx5_0", rail)):
                broken = failed and (rail is None or on == rail)
                evidence: dict[str, Any] = {"pair": [min(node, peer), max(node, peer)]}
                if on is not None:
                    evidence["rail"] = on
                extra.append(_pair(peer, "FAIL" if broken else "PASS",
                                   12.0 if broken else 180.0, **evidence))
        _write(root, node, extra)
    return aggregate(root)


class _Loads:
    """A report loader that counts what it decoded."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.paths: list[str] = []

    def __call__(self, rel: str) -> Mapping[str, Any] | None:
        self.paths.append(rel)
        try:
            data = decode((self.root / rel).read_bytes())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None


def test_the_node_common_to_the_failing_pairs_is_named_and_drawn(tmp_path: Path) -> None:
    view = _cluster(tmp_path, bad="hgx3")
    matrix = pair_matrix(view, _Loads(tmp_path))
    assert matrix is not None
    assert list(matrix.nodes) == list(NODES)
    assert list(matrix.named) == ["hgx3"]
    assert matrix.unit == "GB/s"
    assert matrix.values[0][1] == matrix.values[1][0] == 180.0
    assert matrix.values[1][3] == matrix.values[3][1] == 12.0
    assert [matrix.values[i][i] for i in range(4)] == [None] * 4
    page = render_html(view, plots=0)
    part = page[page.index('id="pairs"'):]
    assert part.index("Named by the localisation: hgx3") < part.index("<svg")
    assert "hgx1 -&gt; hgx3: 12 GB/s" in part
    assert "hgx0 -&gt; hgx1: 180 GB/s" in part


def test_a_rail_fault_is_named_on_that_rail_and_the_cell_shows_the_worse(
        tmp_path: Path) -> None:
    view = _cluster(tmp_path, bad="hgx1", rail="mlx5_1")
    matrix = pair_matrix(view, _Loads(tmp_path))
    assert matrix is not None
    assert list(matrix.named) == ["hgx1 (rail mlx5_1)"]
    assert matrix.values[0][1] == 12.0  # the worse of its two rails
    assert matrix.values[0][2] == 180.0


def test_only_reports_with_pair_results_are_decoded(tmp_path: Path) -> None:
    _cluster(tmp_path, bad=None)
    for node in ("hgx4", "hgx5"):
        _write(tmp_path, node, [])
    _write(tmp_path, "hgx0", [], level="quick", hours_ago=0.5)  # later, another level
    view = aggregate(tmp_path)
    loads = _Loads(tmp_path)
    matrix = pair_matrix(view, loads)
    assert matrix is not None and list(matrix.named) == []
    assert sorted(loads.paths) == [f"{node}/standard-latest.json" for node in NODES]
    assert [has_pairs(node.latest) for node in view.nodes] == [False] + [True] * 3 + [False] * 2


def test_no_pair_results_no_matrix_and_nothing_decoded(tmp_path: Path) -> None:
    for node in NODES:
        _write(tmp_path, node, [])
    view = aggregate(tmp_path)
    loads = _Loads(tmp_path)
    assert pair_matrix(view, loads) is None
    assert loads.paths == []
    assert 'id="pairs"' not in render_html(view, plots=0)


def test_records_of_another_shape_are_passed_over_and_unknown_verdicts_never_pass(
        tmp_path: Path) -> None:
    report = {"node": "hgx0", "results": [
        _pair("hgx1", "PASS", 180.0),
        _pair("hgx0", "PASS", 180.0),  # itself: no pair
        {**_pair("", "PASS", 1.0), "entity": ""},  # no peer at all
        {**_pair("hgx2", "PASS", None), "measured": "fast", "evidence": "n/a"},
        {**_pair("hgx3", "PASS", 170.0), "evidence": {"peer": "hgx9"}},  # evidence names it
        {"check": "nvlink_state", "entity": "gpu0.link0", "verdict": "PASS"},
        "not a result",
    ]}
    records = pair_records("hgx0", report)
    assert [(r.peer, r.value) for r in records] == [("hgx1", 180.0), ("hgx2", None),
                                                   ("hgx9", 170.0)]
    assert pair_records("hgx0", {"results": "none"}) == []
    trio = ("hgx0", "hgx1", "hgx2")
    for node in trio:
        _write(tmp_path, node, [_pair(peer, "PASS", 100.0) for peer in trio if peer != node])
    view = aggregate(tmp_path)

    def load(rel: str) -> Mapping[str, Any] | None:
        """hgx1's report as JSON this nodegate did not write: a verdict it does not know."""
        decoded = _Loads(tmp_path)(rel)
        if decoded is not None and rel.startswith("hgx1/"):
            decoded = {**decoded, "results": [
                {**item, "verdict": "MAYBE"} if item["check"] == "cluster_pair_busbw" else item
                for item in decoded["results"]]}
        return decoded

    matrix = pair_matrix(view, load)
    assert matrix is not None
    # hgx1's own records are no passes, and a pair's worse record counts: hgx1 passed with
    # nobody, while hgx0 and hgx2 passed together
    assert list(matrix.named) == ["hgx1"]


def test_an_unreadable_report_costs_its_records_not_the_page(tmp_path: Path) -> None:
    view = _cluster(tmp_path, bad="hgx3")
    assert pair_matrix(view, lambda rel: None) is None
    matrix = pair_matrix(view, lambda rel: None if rel.startswith("hgx3/") else
                         _Loads(tmp_path)(rel))
    assert matrix is not None and list(matrix.named) == ["hgx3"]


def test_the_fleet_reads_what_the_cluster_check_writes(tmp_path: Path) -> None:
    """The writer is ``nodegate cluster-check``'s own: its node reports, read back by the
    fleet, give the same matrix and name the same node as the check did."""
    from nodegate.cluster import cluster_check, pairs

    results = [pairs.PairResult(a, b, "FAIL" if "hgx2" in (a, b) else "PASS", None,
                                3.5 if "hgx2" in (a, b) else 40.0)
               for a, b in (("hgx0", "hgx1"), ("hgx0", "hgx2"), ("hgx0", "hgx3"),
                            ("hgx1", "hgx2"), ("hgx1", "hgx3"), ("hgx2", "hgx3"))]
    rail = [pairs.PairResult("hgx0", "hgx1", "FAIL", "mlx5_1", 1.0)]
    outcome = cluster_check.Outcome(nodes=list(NODES), rounds=[], results=results + rail,
                                    localisations={None: pairs.localise(results)})
    assert set(outcome.named) == {"hgx2"}
    for node in NODES:
        report = cluster_check.node_report(node, outcome)
        write_report(report, tmp_path / node / "cluster-check-latest.json")
    view = aggregate(tmp_path)
    matrix = pair_matrix(view, _Loads(tmp_path))
    assert matrix is not None
    assert list(matrix.nodes) == list(NODES)
    assert list(matrix.named) == ["hgx2"]  # the rail's one failing pair names no node
    assert matrix.values[0][2] == matrix.values[2][0] == 3.5
    assert matrix.values[0][1] == 1.0  # the worse of its collectives and its rail
    assert matrix.values[1][3] == 40.0
    records = pair_records("hgx0", decode(
        (tmp_path / "hgx0" / "cluster-check-latest.json").read_bytes()))
    assert sorted((r.peer, r.rail or "") for r in records) == [
        ("hgx1", ""), ("hgx1", "mlx5_1"), ("hgx2", ""), ("hgx3", "")]


def test_the_heat_map_shows_small_figures_and_its_whole_heading() -> None:
    from nodegate.fleet.html import heatmap_svg

    title = "cluster check: all_reduce bus bandwidth over four lab nodes"
    svg = heatmap_svg(title, ["node1", "node2"], [[None, 0.34], [12.4, None]], "GB/s")
    cells = [part.rsplit('font-size="9">', 1)[1] for part in svg.split("</text>")
             if 'font-size="9"' in part]
    assert cells == ["0.34", "12"]  # not "0" for a pair below 1 GB/s
    width = int(svg.split('width="', 1)[1].split('"', 1)[0])
    assert width >= 8 * len(f"{title} (GB/s)")
