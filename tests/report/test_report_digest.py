"""The fleet digest the writer embeds: where it is written, what it says, and that a report
whose digest disagrees with its results is refused like any other hand edit."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from nodegate.errors import ConfigError
from nodegate.report import NodeReport, build, load, to_json, validate
from nodegate.report import digest as report_digest
from nodegate.results import CheckResult, Severity, Verdict, overall_verdict


def _write_raw(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "report.json"
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return path


@pytest.mark.parametrize("indent", [2, 0, None])
def test_digest_is_written_before_results_with_the_body_length(
        report: NodeReport, indent: int | None) -> None:
    text = to_json(report, indent=indent)
    data = json.loads(text)
    assert list(data)[-4:] == ["digest", "results", "series", "matrices"]
    # the head and body are serialized apart, yet the file is exactly what json.dumps writes
    assert text == json.dumps(data, indent=indent, ensure_ascii=False) + "\n"
    raw = text.encode("utf-8")
    assert data["digest"]["tail_bytes"] == len(raw) - raw.index(b'"results"')


def test_write_embeds_the_same_digest(report: NodeReport, tmp_path: Path) -> None:
    path = report.write(tmp_path / "r.json")
    assert path.read_text(encoding="utf-8") == to_json(report)
    digest = json.loads(path.read_text(encoding="utf-8"))["digest"]
    assert digest == {**report.to_dict()["digest"], "tail_bytes": digest["tail_bytes"]}


def test_digest_content(report: NodeReport) -> None:
    digest = report.to_dict()["digest"]
    assert digest["v"] == report_digest.DIGEST_VERSION == 1
    assert digest["report_id"] == report.report_id
    assert digest["counts"] == report.counts
    assert digest["failing"] == ["nvlink_state[gpu3.link5]", "xid_errors[node]"]
    metrics = digest["metrics"]
    # booleans (nvlink_state), strings (pcie_link) and nulls (xid_errors) are not metrics
    assert sorted(metrics) == ["ecc_remap_pending[gpu]", "gpu_count[node]",
                               "hbm_bandwidth[gpu]", "p2p_bandwidth[gpu-gpu]"]
    assert metrics["p2p_bandwidth[gpu-gpu]"] == ["GB/s", "higher", 321.4, "gpu2-gpu3", 321.4, 1]
    assert metrics["ecc_remap_pending[gpu]"] == ["rows", "lower", 0.0, "gpu0", 0.0, 8]


def _result(entity: str, measured: Any, verdict: Verdict = Verdict.PASS) -> CheckResult:
    return CheckResult("hbm_bandwidth", entity, measured, {"min": 2600}, "GB/s", verdict,
                       Severity.WARNING)


def test_digest_median_worst_and_non_finite_values() -> None:
    results = [_result("gpu0", 2900.0), _result("gpu1", 2950), _result("gpu2", math.nan),
               _result("gpu3", 2500.5, Verdict.WARN), _result("gpu4", 3000.0)]
    rep = build(results, node="n", profile="p", level="standard", started_at=0.0,
                finished_at=1.0, backend="nvml")
    metric = rep.to_dict()["digest"]["metrics"]["hbm_bandwidth[gpu]"]
    # NaN became null on write and is no value; the median of four is the mean of the middle two
    assert metric == ["GB/s", "higher", 2500.5, "gpu3", 2925.0, 4]


def test_failing_ids_are_capped_but_counted() -> None:
    results = [_result(f"gpu{index}", 1.0, Verdict.FAIL) for index in range(30)]
    rep = build(results, node="n", profile="p", level="quick", started_at=0.0,
                finished_at=1.0, backend="nvml")
    digest = rep.to_dict()["digest"]
    assert len(digest["failing"]) == report_digest.MAX_FAILING_KEPT
    assert digest["counts"]["FAIL"] == 30
    validate(rep.to_dict())


@pytest.mark.parametrize(
    ("mutate", "key"),
    [
        (lambda d: d["digest"].__setitem__("report_id", "other-node-1"), "$.digest.report_id"),
        (lambda d: d["digest"]["counts"].__setitem__("FAIL", 0), "$.digest.counts"),
        (lambda d: d["digest"].__setitem__("failing", ["xid_errors[node]"]), "$.digest.failing"),
        (
            lambda d: d["digest"]["metrics"]["hbm_bandwidth[gpu]"].__setitem__(2, 2999.0),
            '$.digest.metrics["hbm_bandwidth[gpu]"]',
        ),
        (
            lambda d: d["digest"]["metrics"].pop("gpu_count[node]"),
            '$.digest.metrics["gpu_count[node]"]',
        ),
    ],
)
def test_a_digest_that_disagrees_with_the_results_is_refused(
        report: NodeReport, tmp_path: Path, mutate: Any, key: str) -> None:
    data = report.to_dict()
    mutate(data)
    path = _write_raw(tmp_path, data)
    with pytest.raises(ConfigError, match="digest disagrees with the results") as caught:
        load(path)
    assert caught.value.key == key
    assert caught.value.file == str(path) and str(path) in str(caught.value)


@pytest.mark.parametrize(
    ("mutate", "key"),
    [
        (lambda d: d["digest"].__setitem__("colour", "red"), "$.digest.colour"),
        (lambda d: d["digest"].pop("counts"), "$.digest.counts"),
        (
            lambda d: d["digest"]["metrics"]["gpu_count[node]"].pop(),
            '$.digest.metrics["gpu_count[node]"]',
        ),
        (lambda d: d["digest"].__setitem__("v", "1"), "$.digest.v"),
    ],
)
def test_a_malformed_digest_fails_the_schema(
        report: NodeReport, tmp_path: Path, mutate: Any, key: str) -> None:
    data = report.to_dict()
    mutate(data)
    with pytest.raises(ConfigError) as caught:
        load(_write_raw(tmp_path, data))
    assert caught.value.key == key


def test_reports_without_a_digest_still_load(report: NodeReport, tmp_path: Path) -> None:
    data = report.to_dict()
    del data["digest"]  # written by a nodegate from before the digest
    loaded = load(_write_raw(tmp_path, data))
    assert loaded.to_dict() == report.to_dict()


def test_a_digest_of_another_version_is_left_alone(report: NodeReport, tmp_path: Path) -> None:
    data = report.to_dict()
    data["digest"] = {"v": 2, "whatever": [1, 2, 3]}
    assert load(_write_raw(tmp_path, data)).to_dict() == report.to_dict()


@pytest.mark.parametrize(
    "verdicts",
    [[], ["SKIP"], ["SKIP", "SKIP"], ["SKIP", "PASS"], ["WARN", "SKIP"], ["ERROR", "WARN"],
     ["FAIL", "ERROR", "PASS"], ["PASS"]],
)
def test_verdict_from_counts_is_overall_verdict(verdicts: list[str]) -> None:
    results = [_result(f"gpu{index}", 1.0, Verdict(v)) for index, v in enumerate(verdicts)]
    counts = dict.fromkeys(("FAIL", "ERROR", "WARN", "SKIP", "PASS"), 0)
    for verdict in verdicts:
        counts[verdict] += 1
    assert report_digest.verdict_from_counts(counts) == overall_verdict(results).value


def test_head_check_refuses_what_does_not_belong(report: NodeReport) -> None:
    data = json.loads(to_json(report))
    head = {key: value for key, value in data.items() if key not in report_digest.TAIL_KEYS}
    assert report_digest.agrees_with_head(data["digest"], head) is None
    foreign = {**data["digest"], "report_id": "other"}
    assert "report_id" in str(report_digest.agrees_with_head(foreign, head))
    relabelled = {**head, "verdict": "PASS"}
    assert "verdict" in str(report_digest.agrees_with_head(data["digest"], relabelled))
    nan_metric = json.loads(json.dumps(data["digest"]))
    nan_metric["metrics"]["hbm_bandwidth[gpu]"][2] = math.nan
    assert "metrics" in str(report_digest.agrees_with_head(nan_metric, head))
    assert report_digest.agrees_with_head({"v": 2}, head) is not None
