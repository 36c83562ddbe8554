"""docs/monitoring.md's Prometheus rules: a rule file Prometheus would load (groups of records
and alerts, each with an expression), naming only metrics nodegate writes, and checks the
trends rely on exist in the catalogue. promtool is not installed here, so PromQL syntax itself
is not parsed (docs/monitoring.md says so)."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import yaml

from nodegate.battery.registry import CHECKS
from nodegate.cluster.budget import BudgetOutcome, DrainBudget, PartitionCount, render_metrics
from nodegate.fleet.trend_metrics import COUNTER_CHECKS, LEVEL_CHECKS
from nodegate.report.prometheus import render_prometheus
from nodegate_lab.synthetic_fleet import synthetic_report

DOC = Path(__file__).resolve().parents[2] / "docs" / "monitoring.md"


def _rules() -> dict[str, object]:
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 1
    data = yaml.safe_load(blocks[0])
    assert isinstance(data, dict)
    return data


def _written_metric_names() -> set[str]:
    report = synthetic_report("n1", started_at=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc))
    outcome = BudgetOutcome(counts=[PartitionCount("gpu", 4, 2, 2)], marked="x", warn="x")
    text = render_prometheus(report) + render_metrics("n1", ("gpu",), outcome,
                                                      DrainBudget(0.5))
    return set(re.findall(r"^(nodegate_[a-z_]+)[{ ]", text, re.M))


def test_rules_are_a_rule_file_of_records_and_alerts() -> None:
    groups = _rules()["groups"]
    assert isinstance(groups, list) and [g["name"] for g in groups] == [
        "nodegate-recording", "nodegate-alerts"]
    records = {r["record"] for r in groups[0]["rules"]}
    for rule in groups[0]["rules"]:
        assert set(rule) == {"record", "expr"} and re.fullmatch(r"[a-z_]+:[a-z_0-9]+:[a-z0-9]+",
                                                                rule["record"])
    for rule in groups[1]["rules"]:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}
        assert re.fullmatch(r"Nodegate[A-Za-z]+", rule["alert"])
        assert rule["labels"]["severity"] in ("warning", "critical")
        # a recorded series an alert uses is recorded above
        for name in re.findall(r"\b([a-z_]+:[a-z_0-9]+:[a-z0-9]+)\b", rule["expr"]):
            assert name in records, (rule["alert"], name)
    assert "NodegateDrainBudgetExceeded" in {r["alert"] for r in groups[1]["rules"]}


def test_rules_name_only_metrics_and_checks_nodegate_writes() -> None:
    text = yaml.safe_dump(_rules())
    written = _written_metric_names()
    # raw names only: not the middle of a recorded name (instance:nodegate_gemm_tflops:min)
    used = set(re.findall(r"(?<![:\w])(nodegate_[a-z_]+)(?![:\w])", text))
    assert used and used <= written, used - written
    checks = set(re.findall(r'check="([a-z_0-9]+)"', text))
    assert checks <= set(CHECKS), checks - set(CHECKS)
    assert set(LEVEL_CHECKS | COUNTER_CHECKS) - {"burnin_tflops"} <= set(CHECKS)
