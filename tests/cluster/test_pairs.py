"""Cluster acceptance by pairs: the rounds cover every pair once, and the matrix names the
faulty node (or link) and no other."""

from __future__ import annotations

import itertools
from collections.abc import Collection

import pytest

from nodegate.cluster import pairs as pr


@pytest.mark.parametrize("count", [2, 3, 4, 5, 8, 9])
def test_rounds_cover_every_pair_once_with_disjoint_pairs_per_round(count: int) -> None:
    nodes = [f"n{i}" for i in range(count)]
    rounds = pr.rounds(nodes)
    seen = [tuple(sorted(p)) for r in rounds for p in r]
    assert sorted(seen) == sorted(itertools.combinations(nodes, 2))
    for r in rounds:
        members = [n for p in r for n in p]
        assert len(members) == len(set(members))  # one job per node per round
    assert len(rounds) == (count - 1 if count % 2 == 0 else count)
    assert pr.rounds(["n0"]) == [] and pr.rounds(["n0", "n0"]) == []


def _matrix(nodes: list[str], bad_nodes: Collection[str] = (),
            bad_links: Collection[tuple[str, str]] = (),
            rail: str | None = None) -> list[pr.PairResult]:
    out = []
    for a, b in itertools.combinations(nodes, 2):
        bad = a in bad_nodes or b in bad_nodes or (a, b) in bad_links
        out.append(pr.PairResult(a, b, "FAIL" if bad else "PASS", rail,
                                 12.0 if bad else 180.0))
    return out


def test_four_nodes_one_faulty_names_that_node_and_no_other() -> None:
    nodes = ["node1", "node2", "node3", "node4"]
    loc = pr.localise(_matrix(nodes, {"node3"}))
    assert loc.nodes == ("node3",) and loc.pairs == () and loc.undetermined is None
    assert loc.why["node3"] == "failed with node1, node2, node4; passed with none"
    assert pr.reason_for("node3", loc, "mlx5_2") == (
        "nodegate: cluster-check on rail mlx5_2: failed with node1, node2, node4; passed "
        "with none")


def test_a_bad_link_names_the_pair_not_its_nodes() -> None:
    loc = pr.localise(_matrix(["a", "b", "c", "d"], bad_links={("a", "c")}))
    assert loc.nodes == () and loc.pairs == (("a", "c"),)
    assert "the path between them" in loc.why["a-c"]


def test_two_faulty_of_six_are_both_named() -> None:
    loc = pr.localise(_matrix([f"n{i}" for i in range(6)], {"n1", "n4"}))
    assert loc.nodes == ("n1", "n4") and loc.pairs == ()


def test_all_failing_names_nobody_and_says_why() -> None:
    loc = pr.localise(_matrix(["a", "b", "c"], {"a", "b", "c"}))
    assert loc.nodes == () and loc.undetermined is not None
    assert loc.undetermined.startswith("all 3 pair(s) failed")
    assert pr.localise(_matrix(["a", "b"])) == pr.Localisation((), ())


def test_an_unmeasured_pair_is_never_a_pass() -> None:
    results = _matrix(["a", "b", "c", "d"])
    results = [pr.PairResult(r.a, r.b, "ERROR" if "d" in (r.a, r.b) else r.verdict,
                             detail="srun: job did not start") for r in results]
    assert pr.localise(results).nodes == ("d",)


def test_rails_are_localised_one_at_a_time() -> None:
    nodes = ["a", "b", "c", "d"]
    results = _matrix(nodes, {"b"}, rail="mlx5_1") + _matrix(nodes, rail="mlx5_0")
    rails = pr.by_rail(results)
    assert pr.localise(rails["mlx5_1"]).nodes == ("b",)
    assert pr.localise(rails["mlx5_0"]).nodes == ()


def test_the_heat_map_shows_each_pair_and_the_named_node_first() -> None:
    nodes = ["a", "b", "c", "<d>"]
    results = _matrix(nodes, {"<d>"})
    page = pr.matrix_html(nodes, results, pr.localise(results))
    assert page.index("Named by the matrix") < page.index("<table>")
    assert "&lt;d&gt;" in page and "<d>" not in page  # a node name is text, never markup
    assert page.count("FAIL<br>12.0 GB/s") == 6  # 3 pairs, each shown in both halves
    assert page.count("PASS<br>180.0 GB/s") == 6
    assert "<th class=named>&lt;d&gt;</th>" in page


def test_bisection_takes_log2_rounds_and_names_any_one_faulty_node() -> None:
    """For every partition size up to 40 and every faulty node: disjoint pairs in each round,
    every node with at least two partners, about log2(n) rounds, and the reading names the
    faulty node and no other."""
    import math

    from nodegate.cluster.pairs import MIN_PARTNERS, PairResult, bisection_rounds, localise

    assert bisection_rounds([]) == [] and bisection_rounds(["a"]) == []
    assert bisection_rounds(["a", "b"]) == [[("a", "b")]]
    assert bisection_rounds([f"n{i}" for i in range(4)]) == [
        [("n0", "n1"), ("n2", "n3")], [("n0", "n2"), ("n1", "n3")]]
    for n in range(3, 41):
        nodes = [f"n{i:02d}" for i in range(n)]
        plan = bisection_rounds(nodes)
        pairs = [p for r in plan for p in r]
        assert len(pairs) == len({frozenset(p) for p in pairs}), n  # no pair twice
        for round_pairs in plan:
            used = [node for p in round_pairs for node in p]
            assert len(used) == len(set(used)), (n, round_pairs)
        for node in nodes:
            assert sum(node in p for p in pairs) >= min(MIN_PARTNERS, n - 1), (n, node)
        assert len(plan) <= math.ceil(math.log2(n)) + 2, (n, len(plan))
        if n >= 16:
            assert len(pairs) < n * (n - 1) // 4, n  # far fewer jobs than all pairs
        for bad in nodes:
            results = [PairResult(a, b, "FAIL" if bad in (a, b) else "PASS")
                       for a, b in pairs]
            assert localise(results).nodes == (bad,), (n, bad)
