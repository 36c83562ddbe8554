"""The fleet summary file: written beside each report, atomically, by every writer of reports
(the node's ``write_outputs``, the bastion's copy, ``write_report``), and refused by
``problem`` whenever it cannot stand for the report beside it."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

import pytest

from nodegate.cluster.cli import node_reports
from nodegate.errors import ConfigError
from nodegate.report import NodeReport, build, fleet_summary
from nodegate.report.model import dumps
from nodegate.report.outputs import prune, write_outputs
from nodegate.results import CheckResult, Severity, Verdict


def _summary(report_path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(fleet_summary.path_for(report_path).read_bytes())
    return data


def test_path_is_beside_the_report_with_the_same_stem(tmp_path: Path) -> None:
    assert fleet_summary.path_for(tmp_path / "quick-latest.json") == \
        tmp_path / "quick-latest.summary.json"
    assert fleet_summary.name_for("a/standard-20240514T030000.000Z.json") == \
        "a/standard-20240514T030000.000Z.summary.json"
    assert fleet_summary.is_summary_name("quick-latest.summary.json")
    assert not fleet_summary.is_summary_name("quick-latest.json")


def test_write_report_writes_the_summary_beside_it(report: NodeReport, tmp_path: Path) -> None:
    path = fleet_summary.write_report(report, tmp_path / "r.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "r.summary.json"]
    summary = _summary(path)
    assert summary["schema"] == fleet_summary.SCHEMA_ID == "nodegate.fleet-summary/1"
    assert summary["report_bytes"] == path.stat().st_size
    assert fleet_summary.problem(summary, path.stat().st_size) is None
    data = json.loads(path.read_bytes())
    assert summary["report_id"] == data["report_id"] and summary["verdict"] == "FAIL"
    assert summary["digest"] == {k: v for k, v in data["digest"].items() if k != "tail_bytes"}
    assert summary == {"report_bytes": path.stat().st_size, **fleet_summary.from_report(data)}
    assert fleet_summary.path_for(path).stat().st_mode & 0o777 == 0o644
    assert len(fleet_summary.path_for(path).read_bytes()) < 4096


def test_write_report_without_summary_is_an_older_writer(report: NodeReport,
                                                         tmp_path: Path) -> None:
    fleet_summary.write_report(report, tmp_path / "r.json", summary=False)
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_labels_name_the_node_and_the_suite(tmp_path: Path) -> None:
    result = CheckResult("multinode_busbw", "node", 1.0, {"min": 0.5}, "GB/s", Verdict.PASS,
                         Severity.INFO, {})
    report = build([result], node="host-a", profile="p", level="standard", started_at=0.0,
                   duration_s=1.0, backend="cpu/gloo",
                   labels={"slurm_node": "gpu-a", "suite": "multinode"})
    summary = fleet_summary.from_report(report.to_dict())
    assert (summary["node"], summary["host"], summary["level"]) == (
        "gpu-a", "host-a", "multinode")


def test_summary_write_is_atomic(report: NodeReport, tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash while the summary is written leaves the report, no summary (or the previous
    one) and no temp file: a reader then parses the report."""
    path = fleet_summary.write_report(report, tmp_path / "r.json")
    old_summary = fleet_summary.path_for(path).read_bytes()
    real_replace = os.replace

    def crash_on_summary(src: Any, dst: Any) -> None:
        if str(dst).endswith(fleet_summary.SUFFIX):
            raise OSError("power lost")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", crash_on_summary)
    with pytest.raises(ConfigError, match="power lost"):
        fleet_summary.write_report(report, tmp_path / "new.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.json", "r.json",
                                                          "r.summary.json"]
    # rewriting r.json with another report leaves its old summary, now for another size
    other = build(list(report.results)[:5], node="n2", profile="p", level="quick",
                  started_at=0.0, duration_s=1.0, backend="nvml")
    with pytest.raises(ConfigError, match="power lost"):
        fleet_summary.write_report(other, path)
    assert fleet_summary.path_for(path).read_bytes() == old_summary
    assert fleet_summary.problem(json.loads(old_summary), path.stat().st_size) == \
        "report_bytes differs from the report's size"


def test_write_outputs_writes_summaries_and_prune_removes_them(report: NodeReport,
                                                               tmp_path: Path) -> None:
    files = write_outputs(report, report_dir=tmp_path, textfile_dir=None, junit=False)
    for path in (files.json, files.latest):
        assert fleet_summary.problem(_summary(path), path.stat().st_size) is None
    assert _summary(files.json) == _summary(files.latest)
    level = report.level.value
    later = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
    second = build(list(report.results), node=report.node, profile=report.profile,
                   level=level, started_at=later, duration_s=1.0, backend="nvml")
    newer = write_outputs(second, report_dir=tmp_path, textfile_dir=None, junit=False)
    prune(tmp_path, level, keep=1)
    # summaries are not counted as reports: the newest dated report stays, with its summary
    # (beside the hidden sequence counter and its lock)
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == sorted([
        newer.json.name, fleet_summary.path_for(newer.json).name,
        f"{level}-latest.json", f"{level}-latest.summary.json"])


def test_a_bastion_copy_gets_a_summary_unless_it_cannot(report: NodeReport,
                                                        tmp_path: Path) -> None:
    data = report.to_dict()
    path = fleet_summary.write_copy(tmp_path / "n1" / "quick-latest.json", data)
    assert path.read_text(encoding="utf-8") == json.dumps(data, indent=2) + "\n"
    assert fleet_summary.problem(_summary(path), path.stat().st_size) is None
    broken = {**data, "counts": {"PASS": 1}}
    path = fleet_summary.write_copy(tmp_path / "n2" / "quick-latest.json", broken)
    assert path.is_file() and not fleet_summary.path_for(path).exists()


def test_from_report_refuses_what_is_not_a_report(report: NodeReport) -> None:
    data = report.to_dict()
    with pytest.raises(ValueError, match=r"not a nodegate\.report/1 report"):
        fleet_summary.from_report({**data, "schema": "other/1"})
    with pytest.raises(ValueError, match="missing key"):
        fleet_summary.from_report({k: v for k, v in data.items() if k != "counts"})
    with pytest.raises(ValueError, match="labels"):
        fleet_summary.from_report({**data, "labels": ["a"]})
    with pytest.raises(ValueError, match="disagrees with its failing results"):
        fleet_summary.from_report({**data, "verdict": "PASS"})
    digest = {**data["digest"], "failing": []}
    with pytest.raises(ConfigError) as caught:
        fleet_summary.from_report({**data, "digest": digest})
    assert caught.value.key == "$.digest.failing"


def test_problem_names_each_reason(report: NodeReport) -> None:
    data = report.to_dict()
    text = dumps(data)
    size = len(text.encode("utf-8"))
    good = json.loads(fleet_summary.text_for(data, text))
    assert fleet_summary.problem(good, size) is None
    cases = {
        "not a nodegate.fleet-summary/1 summary": {**good, "schema": "nodegate.fleet-summary/2"},
        "report_bytes differs": {**good, "report_bytes": size + 1},
        "host malformed": {**good, "host": None},
        "gpus malformed": {**good, "gpus": {"gpu0": ["x"]}},
        "report_id differs": {**good, "report_id": "other"},
        "verdict differs from the counts": {**good, "verdict": "PASS"},
        "metrics malformed": {**good, "digest": {**good["digest"], "metrics": {"m": [1]}}},
    }
    for reason, summary in cases.items():
        assert reason in str(fleet_summary.problem(summary, size)), reason
    assert fleet_summary.problem([good], size) is not None


def test_cluster_reads_reports_not_their_summaries(report: NodeReport, tmp_path: Path) -> None:
    fleet_summary.write_report(report, tmp_path / "fetched" / "a.json")
    assert [r.report_id for r in node_reports(tmp_path, None)] == [report.report_id]
