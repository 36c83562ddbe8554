"""``nodegate report DIR`` shows a cluster check's pairs in its text and ``--json`` views, as
the HTML page does: the failing pairs, what the localisation names and why (the named node's
own ``cluster_check_localisation`` result); nothing where no report has pair results."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nodegate.fleet.aggregate import aggregate
from nodegate.fleet.pair_records import PairMatrix, pair_matrix, read_report
from nodegate.fleet.render import PAIR_LINES, pair_lines, render_text, to_data
from tests.conftest import run_cli
from tests.fleet.test_pair_records import NODES, _pair, _write

WHY = "failed with hgx0, hgx1, hgx2; passed with none"


def _localisation(why: str | None) -> dict[str, Any]:
    """The result ``cluster_check.node_report`` ends each node's pairs with, by hand."""
    return {"check": "cluster_check_localisation", "entity": "node",
            "measured": why or "not named", "threshold": "not named", "unit": "",
            "verdict": "FAIL" if why else "PASS", "severity": "critical" if why else "info",
            "evidence": {"nodes": list(NODES)}}


def _cluster(root: Path, *, rail: str | None = None) -> None:
    """Every pair of NODES ran; every pair with hgx3 failed (on ``rail`` when given); each
    report ends with the localisation's word on its node."""
    for node in NODES:
        extra = []
        for peer in NODES:
            if peer != node:
                failed = "hgx3" in (node, peer)
                evidence: dict[str, Any] = {"pair": sorted((node, peer))}
                if rail:
                    evidence["rail"] = rail
                extra.append(_pair(peer, "FAIL" if failed else "PASS",
                                   12.0 if failed else 180.0, **evidence))
        extra.append(_localisation(WHY if node == "hgx3" else None))
        _write(root, node, extra)


def test_text_names_the_failing_pairs_and_the_node_with_its_reason(tmp_path: Path) -> None:
    _cluster(tmp_path)
    view = aggregate(tmp_path)
    matrix = pair_matrix(view, read_report(view.root))
    assert matrix is not None
    assert list(matrix.localised) == [("hgx3", WHY)]
    assert [(p.a, p.b, p.verdict, p.value) for p in matrix.failing] == [
        ("hgx0", "hgx3", "FAIL", 12.0), ("hgx1", "hgx3", "FAIL", 12.0),
        ("hgx2", "hgx3", "FAIL", 12.0)]
    lines = pair_lines(matrix)
    assert lines == [
        "", "Pairs (cluster check: pairs from 4 nodes' reports): 3 of 6 pairs fail",
        "  Named by the localisation: hgx3",
        f"  hgx3, as its report says: {WHY}",
        "  FAIL  hgx0 - hgx3: 12 GB/s",
        "  FAIL  hgx1 - hgx3: 12 GB/s",
        "  FAIL  hgx2 - hgx3: 12 GB/s"]
    text = render_text(view, pairs=matrix)
    assert "\n".join(lines[1:]) in text
    assert "Pairs (" not in render_text(view)  # no matrix given: no section


def test_json_has_the_rows_the_named_nodes_and_every_failing_pair(tmp_path: Path) -> None:
    _cluster(tmp_path, rail="mlx5_1")
    view = aggregate(tmp_path)
    data = json.loads(json.dumps(to_data(view, pairs=pair_matrix(view, read_report(
        view.root)))))
    pairs = data["pairs"]
    assert pairs["nodes"] == list(NODES) and pairs["unit"] == "GB/s"
    assert pairs["named"] == ["hgx3 (rail mlx5_1)"]
    assert pairs["localisation"] == {"hgx3": WHY}
    assert pairs["rows"][0] == {"node": "hgx0", "values": [None, 180.0, 180.0, 12.0],
                                "verdicts": [None, "PASS", "PASS", "FAIL"]}
    assert pairs["rows"][3]["verdicts"] == ["FAIL", "FAIL", "FAIL", None]
    assert pairs["failing"][0] == {"a": "hgx0", "b": "hgx3", "rail": "mlx5_1",
                                   "verdict": "FAIL", "value": 12.0}
    assert len(pairs["failing"]) == 3
    assert "pairs" not in to_data(view)


def test_a_long_list_of_failing_pairs_is_cut_in_the_text_only() -> None:
    nodes = [f"n{i:02d}" for i in range(8)]
    values = [[None if i == j else 1.0 for j in range(8)] for i in range(8)]
    verdicts = [[None if i == j else "FAIL" for j in range(8)] for i in range(8)]
    from nodegate.fleet.pair_records import FailingPair

    failing = tuple(FailingPair(a, b, None, "FAIL", 1.0) for i, a in enumerate(nodes)
                    for b in nodes[i + 1:])
    matrix = PairMatrix("t", nodes, values, "GB/s", (), verdicts, failing)
    lines = pair_lines(matrix)
    assert lines[1] == "Pairs (t): 28 of 28 pairs fail"
    assert len([line for line in lines if line.startswith("  FAIL ")]) == PAIR_LINES
    assert lines[-1] == f"  ... and {28 - PAIR_LINES} more failing pair(s) (--json lists " \
                        "every one)"
    assert pair_lines(None) == []


def test_the_command_shows_pairs_only_where_reports_carry_them(tmp_path: Path) -> None:
    with_pairs = tmp_path / "with"
    _cluster(with_pairs)
    text = run_cli("report", str(with_pairs))
    assert text.returncode == 1, text.stderr  # hgx3 fails
    assert "Pairs (cluster check: pairs from 4 nodes' reports): 3 of 6 pairs fail" in text.stdout
    assert f"hgx3, as its report says: {WHY}" in text.stdout
    data = json.loads(run_cli("report", str(with_pairs), "--json").stdout)
    assert data["pairs"]["named"] == ["hgx3"]
    without = tmp_path / "without"
    for node in NODES:
        _write(without, node, [])
    plain = run_cli("report", str(without))
    assert plain.returncode == 0, plain.stderr
    assert "Pairs" not in plain.stdout
    assert "pairs" not in json.loads(run_cli("report", str(without), "--json").stdout)
