"""The fleet reader: summaries beside the reports against parsing the reports themselves.

The view from summaries must be exactly the view from the full reports; a report without a
usable summary (none, corrupt, another version, written for another size of the report) is
parsed in full and counted; a report that cannot be parsed is listed as unreadable, and an
embedded digest that disagrees with the results is named with its key, never half believed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nodegate.fleet.aggregate import FleetView, aggregate
from nodegate.fleet.read import from_report_file, summaries
from nodegate.report import fleet_summary
from nodegate.report.model import dumps
from tests.conftest import run_cli

HGX0 = "rack0/hgx0/standard-20240514T0300Z.json"
HGX1 = "rack1/hgx1/standard-20240514T0300Z.json"
N_FILES = 13  # 12 reports with summaries and truncated.json


def _facts(view: FleetView) -> tuple[Any, ...]:
    """Everything the view says (NodeView/MetricView compare by value, summaries included)."""
    return (view.nodes, view.metrics, sorted(path for path, _ in view.unreadable))


def _reports(root: Path) -> list[Path]:
    return sorted(path for path in root.rglob("*.json")
                  if path.name != "truncated.json" and not path.name.endswith(".summary.json"))


def _drop_summaries(root: Path) -> None:
    for path in root.rglob("*.summary.json"):
        path.unlink()


def _rewrite(path: Path, mutate: Any) -> None:
    """Edit the decoded report and write it back as the writer serializes it, without its
    summary (as a hand edit would leave it)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    mutate(data)
    path.write_text(dumps(data), encoding="utf-8")
    fleet_summary.path_for(path).unlink(missing_ok=True)


def _error(view: FleetView, rel: str) -> str:
    return dict(view.unreadable)[rel]


def test_each_summary_gives_the_full_parse_entry(fleet_dir: Path) -> None:
    entries, full_reads = summaries(fleet_dir)
    assert full_reads == 1  # truncated.json only
    by_path = {entry["path"]: entry for entry in entries}
    for path in _reports(fleet_dir):
        assert fleet_summary.path_for(path).is_file()
        rel = str(path.relative_to(fleet_dir))
        assert by_path[rel] == from_report_file(path, rel)


def test_view_from_summaries_equals_the_views_from_full_reports(fleet_dir: Path) -> None:
    from_summaries = aggregate(fleet_dir)
    strict = aggregate(fleet_dir, strict=True)
    assert strict.full_reads == N_FILES
    _drop_summaries(fleet_dir)
    full = aggregate(fleet_dir, jobs=1)
    assert from_summaries.nodes and from_summaries.metrics
    assert from_summaries.full_reads == 1 and full.full_reads == N_FILES
    assert _facts(from_summaries) == _facts(full) == _facts(strict)


def test_reports_without_summaries_are_read_in_full_and_said_so(fleet_dir: Path) -> None:
    before = aggregate(fleet_dir)
    _drop_summaries(fleet_dir)
    result = run_cli("report", str(fleet_dir))
    assert result.returncode == 1, result.stderr
    assert f"{N_FILES} of {N_FILES} reports read in full (no usable summary" in result.stdout
    assert _facts(aggregate(fleet_dir)) == _facts(before)


def _truncate(data: str) -> str:
    return data[: len(data) // 2]


def _field(key: str, value: Any) -> Any:
    def edit(text: str) -> str:
        data = json.loads(text)
        data[key] = value
        return json.dumps(data)
    return edit


def _metric_as_text(text: str) -> str:
    data = json.loads(text)
    next(iter(data["digest"]["metrics"].values()))[2] = "fast"
    return json.dumps(data)


def _serial_as_number(text: str) -> str:
    data = json.loads(text)
    data["gpus"]["gpu0"]["serial"] = 1654975287235
    return json.dumps(data)


def _hidden_failure(text: str) -> str:
    data = json.loads(text)
    data["digest"]["failing"] = []
    return json.dumps(data)


@pytest.mark.parametrize("corrupt", [
    pytest.param(_truncate, id="cut-short"),
    pytest.param(lambda _text: "\x00\xff not json", id="garbage"),
    pytest.param(lambda _text: "[]", id="not-an-object"),
    pytest.param(_field("schema", "nodegate.fleet-summary/2"), id="another-version"),
    pytest.param(_field("schema", None), id="no-version"),
    pytest.param(_field("report_bytes", 12), id="another-report-size"),
    pytest.param(_field("verdict", "PASS"), id="verdict-disagrees-with-counts"),
    pytest.param(_field("counts", {"PASS": 1}), id="counts-malformed"),
    pytest.param(_field("finished_at", "yesterday"), id="bad-timestamp"),
    pytest.param(_field("node", 7), id="node-not-text"),
    pytest.param(_metric_as_text, id="metric-not-a-number"),
    pytest.param(_serial_as_number, id="identity-not-text"),
    pytest.param(_hidden_failure, id="failing-ids-missing"),
])
def test_an_unusable_summary_falls_back_to_the_report(fleet_dir: Path, corrupt: Any) -> None:
    before = aggregate(fleet_dir)
    summary = fleet_summary.path_for(fleet_dir / HGX1)
    summary.write_text(corrupt(summary.read_text(encoding="utf-8")), encoding="utf-8")
    after = aggregate(fleet_dir)
    assert after.full_reads == before.full_reads + 1
    assert _facts(after) == _facts(before)


def test_a_summary_of_another_version_is_not_read(fleet_dir: Path) -> None:
    """What a newer node writes is left alone even when it looks like this version's."""
    summary = fleet_summary.path_for(fleet_dir / HGX1)
    data = json.loads(summary.read_text(encoding="utf-8"))
    data["schema"] = "nodegate.fleet-summary/2"
    data["verdict"] = "PASS"  # what the view would show if it believed this file
    data["counts"] = data["digest"]["counts"] = {"FAIL": 0, "ERROR": 0, "WARN": 0, "SKIP": 0,
                                                 "PASS": 1}
    data["digest"]["failing"] = []
    summary.write_text(json.dumps(data), encoding="utf-8")
    hgx1 = next(node for node in aggregate(fleet_dir).nodes if node.node == "hgx1")
    assert hgx1.verdict == "FAIL"


def test_a_summary_without_its_report_is_no_report(fleet_dir: Path) -> None:
    before = aggregate(fleet_dir)
    (fleet_dir / HGX0).unlink()
    after = aggregate(fleet_dir)
    assert after.n_reports == before.n_reports - 1
    assert HGX0 not in {s["path"] for node in after.nodes for s in node.history}


def _bump_a_count(data: dict[str, Any]) -> None:
    data["digest"]["counts"]["FAIL"] += 1


def _foreign_report_id(data: dict[str, Any]) -> None:
    data["digest"]["report_id"] = "hgx7-20240514T030000Z-0badf00d"


def _malformed_metric(data: dict[str, Any]) -> None:
    data["digest"]["metrics"]["gemm_tflops[gpu]"][2] = "fast"


def _hidden_failure_in_report(data: dict[str, Any]) -> None:
    data["digest"]["failing"] = []


@pytest.mark.parametrize(
    ("mutate", "key"),
    [
        (_foreign_report_id, "$.digest.report_id"),
        (_bump_a_count, "$.digest.counts"),
        (_malformed_metric, '$.digest.metrics["gemm_tflops[gpu]"]'),
        (_hidden_failure_in_report, "$.digest.failing"),
    ],
)
def test_an_embedded_digest_that_disagrees_makes_the_report_unreadable(
        fleet_dir: Path, mutate: Any, key: str) -> None:
    _rewrite(fleet_dir / HGX1, mutate)
    view = aggregate(fleet_dir)
    error = _error(view, HGX1)
    assert "digest disagrees with the results" in error and f"(key {key})" in error
    assert [len(node.history) for node in view.nodes if node.node == "hgx1"] == [1]  # quick
    strict = aggregate(fleet_dir, strict=True)
    assert f"key {key}" in _error(strict, HGX1)


def test_a_report_cut_short_is_not_believed_from_its_summary(fleet_dir: Path) -> None:
    path = fleet_dir / HGX0
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 3])  # a failed copy; its summary is still whole
    view = aggregate(fleet_dir)
    assert _error(view, HGX0).startswith("ValueError: not valid JSON: ")
    assert view.full_reads == 2


def test_a_report_that_cannot_be_parsed_is_listed_never_dropped(fleet_dir: Path) -> None:
    (fleet_dir / "rack0" / "list.json").write_text("[1, 2]", encoding="utf-8")
    (fleet_dir / "rack0" / "other.json").write_text('{"schema": "x/1"}', encoding="utf-8")
    view = aggregate(fleet_dir)
    assert _error(view, "truncated.json").startswith("ValueError: not valid JSON: ")
    assert _error(view, "rack0/list.json") == "ValueError: top level is not a JSON object"
    assert "not a nodegate.report/1 report" in _error(view, "rack0/other.json")
    assert view.n_reports + len(view.unreadable) == N_FILES + 2


def _measured_beyond_float(data: dict[str, Any]) -> None:
    data["results"][0]["measured"] = 10**400


def _finished_beyond_utc(data: dict[str, Any]) -> None:
    data["finished_at"] = "9999-12-31T23:59:59-14:00"


@pytest.mark.parametrize(("mutate", "words"), [
    (_measured_beyond_float, "key $.results[0].measured"),
    (_finished_beyond_utc, "$.finished_at"),
])
def test_numbers_and_dates_out_of_range_make_the_report_unreadable(
        fleet_dir: Path, mutate: Any, words: str) -> None:
    """An int of 400 digits or a date past year 9999 in UTC is an OverflowError in Python:
    the report is listed unreadable, naming the key, in the fast and the strict read."""
    _rewrite(fleet_dir / HGX1, mutate)
    for view in (aggregate(fleet_dir), aggregate(fleet_dir, strict=True)):
        assert words in _error(view, HGX1), _error(view, HGX1)


def test_json_nested_too_deeply_is_unreadable_not_a_crash(fleet_dir: Path) -> None:
    """200,000 ``[`` in a report, or in a summary (the report is then read in full)."""
    deep = "[" * 200_000
    (fleet_dir / "rack0" / "deep.json").write_text(deep, encoding="utf-8")
    fleet_summary.path_for(fleet_dir / HGX1).write_text(deep, encoding="utf-8")
    for view in (aggregate(fleet_dir), aggregate(fleet_dir, strict=True)):
        assert "nested too deeply" in _error(view, "rack0/deep.json")
        assert HGX1 not in dict(view.unreadable)
        assert any(s["path"] == HGX1 for n in view.nodes for s in n.history)


def test_same_length_edit_of_the_report_needs_strict(fleet_dir: Path) -> None:
    """The limit of trusting a summary: an edit of the report that keeps its length (a PASS
    flipped to FAIL in place) goes unseen; ``strict`` reads the reports and refuses it."""
    path = fleet_dir / HGX0
    text = path.read_text(encoding="utf-8")
    head, tail = text.split('  "results": ', 1)
    path.write_text(head + '  "results": ' + tail.replace('"PASS"', '"FAIL"', 1),
                    encoding="utf-8")
    assert HGX0 not in dict(aggregate(fleet_dir).unreadable)
    assert "key $.counts.FAIL" in _error(aggregate(fleet_dir, strict=True), HGX0)


def test_cli_names_the_file_with_a_bad_digest(fleet_dir: Path) -> None:
    _rewrite(fleet_dir / HGX1, _foreign_report_id)
    result = run_cli("report", str(fleet_dir), "--no-cache")  # no cache (none for 12 anyway)
    assert f"{fleet_dir / HGX1}: the embedded digest disagrees" in result.stderr
    assert "(key $.digest.report_id)" in result.stderr
