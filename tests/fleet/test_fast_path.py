"""The fleet fast path (the writer's digest, read from each file's head) against the full parse.

The fast path must give exactly the fleet view a full decode gives; reports without a digest
(older writers) must still aggregate; a digest that does not belong to its file must never be
believed: the file then takes the full decode, and a digest that disagrees with the results
makes the file unreadable with an error naming it and the key.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nodegate.fleet import aggregate as agg
from nodegate.fleet.aggregate import (
    PREFIX_BYTES,
    FleetView,
    aggregate,
    summarize,
    summary_from_prefix,
)
from nodegate.fleet.synthetic import synthetic_report
from nodegate.report.model import dumps
from tests.conftest import run_cli

HGX0 = "rack0/hgx0/standard-20240514T0300Z.json"
HGX1 = "rack1/hgx1/standard-20240514T0300Z.json"


def _facts(view: FleetView) -> tuple[Any, ...]:
    """Everything the view says (NodeView/MetricView compare by value, summaries included)."""
    return (view.nodes, view.metrics, sorted(path for path, _ in view.unreadable))


def _reports(root: Path) -> list[Path]:
    return sorted(path for path in root.rglob("*.json") if path.name != "truncated.json")


def _fast(path: Path) -> dict[str, Any] | None:
    raw = path.read_bytes()
    return summary_from_prefix(raw[:PREFIX_BYTES], len(raw), path=path.name)


def _rewrite(path: Path, mutate: Any) -> None:
    """Edit the decoded report and write it back the way the writer does (``tail_bytes``
    recomputed), so only the edit itself can make the digest untrustworthy."""
    data = json.loads(path.read_text(encoding="utf-8"))
    mutate(data)
    path.write_text(dumps(data), encoding="utf-8")


def _error(view: FleetView, rel: str) -> str:
    return dict(view.unreadable)[rel]


def test_every_written_report_takes_the_fast_path_with_the_full_parse_result(
        fleet_dir: Path) -> None:
    for path in _reports(fleet_dir):
        fast = _fast(path)
        assert fast is not None, path
        assert fast == summarize(json.loads(path.read_bytes()), path=path.name)


def test_fast_view_equals_slow_and_strict_views(fleet_dir: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    fast = aggregate(fleet_dir, cache=False)
    strict = aggregate(fleet_dir, cache=False, strict=True)
    monkeypatch.setattr(agg, "summary_from_prefix", lambda *_a, **_k: None)
    slow = aggregate(fleet_dir, cache=False, jobs=1)
    assert fast.nodes and fast.metrics
    assert _facts(fast) == _facts(slow) == _facts(strict)


def test_reports_without_a_digest_aggregate_the_same(fleet_dir: Path, tmp_path: Path) -> None:
    before = aggregate(fleet_dir, cache=False)
    for path in _reports(fleet_dir):
        data = json.loads(path.read_text(encoding="utf-8"))
        del data["digest"]
        path.write_text(json.dumps(data, indent=2), encoding="utf-8")  # an older writer's file
        assert _fast(path) is None
    after = aggregate(fleet_dir, cache=tmp_path / "cache")
    assert after.parsed == 13
    assert _facts(after) == _facts(before)
    assert _facts(aggregate(fleet_dir, cache=False, strict=True)) == _facts(before)


def test_a_digest_of_another_version_is_ignored(fleet_dir: Path) -> None:
    before = aggregate(fleet_dir, cache=False)
    path = fleet_dir / HGX1
    _rewrite(path, lambda d: d.__setitem__("digest", {"v": 99, "future": [1, 2]}))
    assert _fast(path) is None
    assert _facts(aggregate(fleet_dir, cache=False)) == _facts(before)
    assert _facts(aggregate(fleet_dir, cache=False, strict=True)) == _facts(before)


def _bump_a_count(data: dict[str, Any]) -> None:
    data["digest"]["counts"]["FAIL"] += 1


def _foreign_report_id(data: dict[str, Any]) -> None:
    data["digest"]["report_id"] = "hgx7-20240514T030000Z-0badf00d"


def _malformed_metric(data: dict[str, Any]) -> None:
    data["digest"]["metrics"]["gemm_tflops[gpu]"][2] = "fast"


def _hidden_failure(data: dict[str, Any]) -> None:
    data["digest"]["failing"] = []


@pytest.mark.parametrize(
    ("mutate", "key"),
    [
        (_foreign_report_id, "$.digest.report_id"),
        (_bump_a_count, "$.digest.counts"),
        (_malformed_metric, '$.digest.metrics["gemm_tflops[gpu]"]'),
        (_hidden_failure, "$.digest.failing"),
    ],
)
def test_a_digest_that_does_not_fit_its_head_is_not_believed(
        fleet_dir: Path, mutate: Any, key: str) -> None:
    path = fleet_dir / HGX1
    _rewrite(path, mutate)
    assert _fast(path) is None  # the cheap checks refuse it: the file takes the full decode
    view = aggregate(fleet_dir, cache=False)
    error = _error(view, HGX1)
    assert "digest disagrees with the results" in error and f"(key {key})" in error
    assert [len(node.history) for node in view.nodes if node.node == "hgx1"] == [1]  # quick
    strict = aggregate(fleet_dir, cache=False, strict=True)
    assert f"key {key}" in _error(strict, HGX1)


def test_an_edited_body_is_caught_by_its_length(fleet_dir: Path) -> None:
    """A result edited by hand changes the body's length: ``tail_bytes`` no longer fits, the
    file is decoded in full, and its digest no longer matches the results."""
    path = fleet_dir / HGX0
    text = path.read_text(encoding="utf-8")
    head, tail = text.split('  "results": ', 1)
    value = json.loads(text)["results"][-1]["measured"]  # allreduce_busbw
    assert f'"measured": {value},' in tail
    path.write_text(head + '  "results": ' + tail.replace(
        f'"measured": {value},', '"measured": 401.25,', 1), encoding="utf-8")
    assert _fast(path) is None
    error = _error(aggregate(fleet_dir, cache=False), HGX0)
    assert '(key $.digest.metrics["allreduce_busbw[node]"])' in error


def test_a_body_cut_short_is_not_trusted(fleet_dir: Path) -> None:
    path = fleet_dir / HGX0
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 3])  # a failed copy: the head is whole, results are not
    assert _fast(path) is None
    assert "JSONDecodeError" in _error(aggregate(fleet_dir, cache=False), HGX0)


def test_same_length_edit_of_the_results_needs_strict(fleet_dir: Path) -> None:
    """The limit of reading only the head: an edit that keeps every length (a PASS flipped to
    FAIL) leaves the digest, counts and verdict consistent with each other, so the fast path
    keeps the digest; ``strict`` reads the results and refuses the file."""
    path = fleet_dir / HGX0
    text = path.read_text(encoding="utf-8")
    head, tail = text.split('  "results": ', 1)
    path.write_text(head + '  "results": ' + tail.replace('"PASS"', '"FAIL"', 1),
                    encoding="utf-8")
    assert _fast(path) is not None
    assert HGX0 not in dict(aggregate(fleet_dir, cache=False).unreadable)
    assert "key $.counts.FAIL" in _error(aggregate(fleet_dir, cache=False, strict=True), HGX0)


def test_counts_edited_in_the_head_are_refused(fleet_dir: Path) -> None:
    path = fleet_dir / HGX0

    def move_a_pass(data: dict[str, Any]) -> None:
        data["counts"]["PASS"] -= 1
        data["counts"]["SKIP"] += 1

    _rewrite(path, move_a_pass)
    assert _fast(path) is None
    assert "$.counts" in _error(aggregate(fleet_dir, cache=False), HGX0)


def test_cli_names_the_file_with_a_bad_digest(fleet_dir: Path, tmp_path: Path) -> None:
    _rewrite(fleet_dir / HGX1, _foreign_report_id)
    result = run_cli("report", str(fleet_dir), env={"NODEGATE_CACHE_DIR": str(tmp_path)})
    assert f"{fleet_dir / HGX1}: the embedded digest disagrees" in result.stderr
    assert "(key $.digest.report_id)" in result.stderr


def test_head_split_is_not_fooled_by_results_inside_labels(tmp_path: Path) -> None:
    labels = {"results": "in a label key", "note": 'text "results": [] here', "site": "lab"}
    report = synthetic_report("hgx9", seed=9, samples=3, labels=labels)
    path = report.write(tmp_path / "r.json")
    fast = _fast(path)
    assert fast is not None
    assert fast == summarize(json.loads(path.read_bytes()), path=path.name)


def test_a_head_longer_than_the_prefix_takes_the_slow_path(tmp_path: Path) -> None:
    labels = {f"label{index}": "x" * 100 for index in range(PREFIX_BYTES // 100)}
    report = synthetic_report("hgx9", seed=9, samples=3, labels=labels)
    root = tmp_path / "reports"
    path = report.write(root / "r.json")
    assert _fast(path) is None
    view = aggregate(root, cache=False)
    assert [node.node for node in view.nodes] == ["hgx9"] and not view.unreadable
    assert view.nodes[0].latest == summarize(json.loads(path.read_bytes()), path="r.json")
