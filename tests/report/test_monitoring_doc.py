"""The monitoring files nodegate ships (templates/monitoring/, docs/monitoring.md): the rule file
is one Prometheus would load (groups of records and alerts, each with an expression), naming
only metrics nodegate writes and labels they carry, with every median per profile and level
(never across profiles), and checks the trends rely on exist in the catalogue; the Grafana
dashboard parses and its panels name only metrics nodegate writes or the rules record. The
metric list is derived from the code that writes the textfiles (report, gate, drain budget,
remediation, power poller), never typed here. PromQL is parsed and run by the real
``promtool`` (Debian's ``prometheus`` package, installed by scripts/setup-host.sh): ``promtool
check rules``, the shipped ``promtool test rules`` file, and a fleet of two profiles whose
series are the textfile's own. Without promtool these tests skip, except under CI=true, where
they fail."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodegate.battery.registry import CHECKS
from nodegate.cluster import gate_metrics
from nodegate.cluster.budget import BudgetOutcome, DrainBudget, PartitionCount, render_metrics
from nodegate.cluster.scheduler import NodeState
from nodegate.fleet.aggregate import MIN_NODES
from nodegate.fleet.trend_metrics import COUNTER_CHECKS, LEVEL_CHECKS
from nodegate.remediation import metrics as remediation_metrics
from nodegate.remediation.state import NodeRemediation
from nodegate.report.prometheus import render_prometheus
from nodegate_lab.synthetic_fleet import synthetic_report

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "monitoring.md"
SHIPPED = ROOT / "templates" / "monitoring"
RULES = SHIPPED / "nodegate-rules.yml"
RULES_TEST = SHIPPED / "nodegate-rules.test.yml"
DASHBOARD = SHIPPED / "nodegate-dashboard.json"


def _rules() -> dict[str, object]:
    data = yaml.safe_load(RULES.read_text())
    assert isinstance(data, dict)
    return data


START = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
#: What node_exporter adds to every series it scrapes from a textfile.
SCRAPE_LABELS = {"instance", "job"}


def _power_textfile() -> str:
    """The power poller's textfile for one PDU that read every quantity it exports and one
    BMC with a PSU's health and a fan."""
    from prometheus_client import CollectorRegistry, generate_latest

    from nodegate.power.poller import METRICS, Snapshot
    from nodegate.power.readings import DeviceReading, Reading

    pdu = DeviceReading("pdu1", "pdu", "apc", "snmp://10.0.0.9:161")
    pdu.readings = [Reading("device", quantity, 1.0, "x") for quantity in METRICS]
    bmc = DeviceReading("bmc1", "bmc", "redfish", "https://10.0.0.8")
    bmc.readings = [Reading("psu1", "health", "OK", ""), Reading("fan1", "speed", 1.0, "RPM")]
    snapshot = Snapshot()
    snapshot.devices = [pdu, bmc]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(snapshot)
    return generate_latest(registry).decode()


def _written_labels() -> dict[str, set[str]]:
    """Each metric nodegate's textfiles hold -> the labels its series carry once scraped:
    rendered by the code that writes them (battery report, gate, drain budget, remediation,
    power poller)."""
    report = synthetic_report("n1", started_at=START)
    outcome = BudgetOutcome(counts=[PartitionCount("gpu", 4, 2, 2)], marked="x", warn="x")
    text = render_prometheus(report) + render_metrics("n1", ("gpu",), outcome,
                                                      DrainBudget(0.5))
    text += gate_metrics.render("n1", "drain", NodeState("n1", "idle"), 0.0)
    text += remediation_metrics.render(NodeRemediation("n1"))
    text += _power_textfile()
    out: dict[str, set[str]] = {}
    for name, body in re.findall(r"^(nodegate_[a-z_]+)(?:\{(.*)\})? ", text, re.M):
        out.setdefault(name, set(SCRAPE_LABELS)).update(re.findall(r'(\w+)="', body or ""))
    return out


def _written_metric_names() -> set[str]:
    return set(_written_labels())


def _names(labels: str) -> set[str]:
    return {label.strip() for label in labels.split(",") if label.strip()}


#: ``by (labels) (`` then, past a quantile's parameter and any functions, the series
#: aggregated.
_BY = re.compile(r"\bby \(([^)]*)\) \((?:[0-9.]+, )?(?:[a-z_]+\()*([a-z_:]+)")
#: ``on (labels)``, an optional ``group_left (labels)``, then the right-hand series.
_ON = re.compile(r"\bon \(([^)]*)\)(?: group_left(?: \(([^)]*)\))?)?"
                 r" (?:[0-9.]+ \* )?([a-z_:]+)")


def _series_labels() -> dict[str, set[str]]:
    """The labels of every series the rules read: the textfiles' own, and each recorded one's
    (its first ``by`` plus what a ``group_left`` copies in)."""
    labels = _written_labels()
    for rule in _rules()["groups"][0]["rules"]:  # type: ignore[index]
        by = _BY.search(rule["expr"])
        assert by is not None, rule["record"]
        kept = _names(by.group(1))
        for on in _ON.finditer(rule["expr"]):
            kept |= _names(on.group(2) or "")
        labels[rule["record"]] = kept
    return labels


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


def test_rules_group_and_match_only_on_labels_the_series_carry() -> None:
    """``by``, ``on`` and ``group_left`` name labels the series they apply to have: the
    measured values carry no ``profile``, ``nodegate_report_info`` does."""
    labels = _series_labels()
    assert "profile" not in labels["nodegate_check_measured"]
    assert {"profile", "level", "instance"} <= labels["nodegate_report_info"]
    groups = _rules()["groups"]
    for rule in groups[0]["rules"] + groups[1]["rules"]:  # type: ignore[index]
        name = rule.get("record") or rule["alert"]
        for by in _BY.finditer(rule["expr"]):
            assert _names(by.group(1)) <= labels[by.group(2)], (name, by.group())
        for on in _ON.finditer(rule["expr"]):
            right = labels[on.group(3)]
            assert _names(on.group(1)) | _names(on.group(2) or "") <= right, (name, on.group())


def test_every_median_is_per_profile_and_level() -> None:
    """A median across nodes is taken per profile and level, never over the whole fleet
    (an A100 node sits below an H100 fleet's median for ever), and a node is compared with
    its own profile's median only where that has at least MIN_NODES nodes."""
    groups = _rules()["groups"]
    records = {r["record"]: r["expr"] for r in groups[0]["rules"]}  # type: ignore[index]
    labels = _series_labels()
    across = {name: expr for name, expr in records.items() if not name.startswith(
        ("instance:", "partition:"))}
    assert any(name.endswith(":median") for name in across)
    for name, expr in across.items():
        by = _BY.search(expr)
        assert name.startswith("profile_level:") and by is not None, name
        # per profile and level, over per-node series that took the profile from the info
        assert _names(by.group(1)) == {"profile", "level"}, name
        assert by.group(2).startswith("instance:") and "group_left (profile)" in records[
            by.group(2)] and "profile" in labels[by.group(2)], name
    for rule in groups[0]["rules"] + groups[1]["rules"]:  # type: ignore[index]
        expr = rule["expr"]
        assert "scalar(" not in expr and not re.search(r"\bquantile\s*\(", expr), expr
        if "profile_level:" in expr and "instance:" in expr:  # a node against its profile
            assert "on (profile, level)" in expr and f":count >= {MIN_NODES}" in expr, expr


def _promtool() -> str:
    """The real promtool; its absence skips only outside CI (CI=true fails)."""
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
            pytest.fail("promtool not installed under CI (Debian: prometheus; "
                        "scripts/setup-host.sh installs it)")
        pytest.skip("promtool not installed (Debian: prometheus; scripts/setup-host.sh)")
    return found


def test_the_doc_points_at_the_shipped_files_and_holds_no_copy() -> None:
    """The rules live in one place: docs/monitoring.md names the files, and carries no rule
    file of its own that could drift from them."""
    text = DOC.read_text()
    for path in (RULES, RULES_TEST, DASHBOARD):
        assert str(path.relative_to(ROOT)) in text, path
    assert "```yaml" not in text
    alerts = [r["alert"] for r in _rules()["groups"][1]["rules"]]  # type: ignore[index]
    missing = [name for name in alerts if f"`{name}`" not in text]
    assert not missing, f"alerts not described in docs/monitoring.md: {missing}"


def test_the_shipped_promtool_unit_tests_pass() -> None:
    """templates/monitoring/nodegate-rules.test.yml: a failing node's verdict, a node the
    gate holds and a gate that stopped running each raise their alert, a healthy node none."""
    tests = yaml.safe_load(RULES_TEST.read_text())
    assert tests["rule_files"] == [RULES.name]
    alerts = {t["alertname"] for t in tests["tests"][0]["alert_rule_test"]}
    assert {"NodegateNodeFailing", "NodegateNodeHeld"} <= alerts
    result = subprocess.run([_promtool(), "test", "rules", RULES_TEST.name], check=False,
                            cwd=SHIPPED, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_fails_the_shipped_tests_against_a_broken_rule(tmp_path: Path) -> None:
    """The unit tests can fail: with the failing-node alert's threshold changed, they do."""
    rules = RULES.read_text().replace('verdict=~"FAIL|ERROR"', 'verdict=~"ERROR"')
    assert rules != RULES.read_text()
    (tmp_path / RULES.name).write_text(rules)
    (tmp_path / RULES_TEST.name).write_text(RULES_TEST.read_text())
    result = subprocess.run([_promtool(), "test", "rules", RULES_TEST.name], check=False,
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "NodegateNodeFailing" in result.stdout + result.stderr


def _dashboard() -> dict[str, Any]:
    data = json.loads(DASHBOARD.read_text())
    assert isinstance(data, dict)
    return data


def _panel_exprs() -> list[tuple[str, str]]:
    return [(panel["title"], target["expr"]) for panel in _dashboard()["panels"]
            for target in panel["targets"]]


def test_the_dashboard_is_a_grafana_dashboard() -> None:
    """Parses; panels with unique ids, inside Grafana's 24-column grid, each with a query on
    the dashboard's Prometheus data source variable."""
    dash = _dashboard()
    assert dash["uid"] and dash["title"] and isinstance(dash["schemaVersion"], int)
    assert [v["name"] for v in dash["templating"]["list"]] == ["datasource"]
    ids = [panel["id"] for panel in dash["panels"]]
    assert len(ids) == len(set(ids)) >= 5
    for panel in dash["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["w"] > 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        assert panel["targets"] and panel["datasource"]["uid"] == "${datasource}"
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)) and all(t["expr"].strip() for t in panel["targets"])


def test_the_dashboard_names_only_metrics_nodegate_writes_or_records() -> None:
    written = _written_labels()
    records = {r["record"] for r in _rules()["groups"][0]["rules"]}  # type: ignore[index]
    used: set[str] = set()
    for title, expr in _panel_exprs():
        raw = set(re.findall(r"(?<![:\w])(nodegate_[a-z_]+)(?![:\w])", expr))
        recorded = set(re.findall(r"\b([a-z_]+:[a-z_0-9]+:[a-z0-9]+)\b", expr))
        assert raw or recorded, title
        assert raw <= set(written), (title, raw - set(written))
        assert recorded <= records, (title, recorded - records)
        for name in raw:  # a label matcher names a label the series carries
            for label in re.findall(name + r"\{([^}]*)\}", expr):
                keys = set(re.findall(r"(\w+)\s*=", label))
                assert keys <= written[name], (title, keys - written[name])
        used |= raw
    # the remediation and gate gauges, the operator's day-two view, are on it
    assert {"nodegate_remediation_phase", "nodegate_gate_node_nodegate_held"} <= used


def test_promtool_parses_every_dashboard_query(tmp_path: Path) -> None:
    """Each panel's PromQL as a recording rule: ``promtool check rules`` parses it."""
    promtool = _promtool()
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query_{i}:x", "expr": expr}
        for i, (_, expr) in enumerate(_panel_exprs())]}]}
    (tmp_path / "dash.yml").write_text(yaml.safe_dump(rules))
    result = subprocess.run([promtool, "check", "rules", str(tmp_path / "dash.yml")],
                            check=False, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_checks_the_rules(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yml"
    rules.write_text(yaml.safe_dump(_rules()))
    result = subprocess.run([_promtool(), "check", "rules", str(rules)], check=False,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def _node_series(node: str, profile: str, gemm_scale: float) -> list[dict[str, str]]:
    """A node's GEMM and report-info series as its textfile holds them, with the scrape's
    labels, constant for 3 hours of 1-minute samples."""
    report = synthetic_report(node, started_at=START, profile=profile, gemm_scale=gemm_scale,
                              samples=5)
    scrape = f'instance="{node}:9100",job="node",'
    return [{"series": line.rsplit(" ", 1)[0].replace("{", "{" + scrape, 1),
             "values": f"{line.rsplit(' ', 1)[1]}x180"}
            for line in render_prometheus(report).splitlines()
            if line.startswith("nodegate_report_info{")
            or (line.startswith("nodegate_check_measured{") and 'check="gemm_tflops"' in line)]


def test_promtool_runs_the_gemm_rules_on_a_fleet_of_two_profiles(tmp_path: Path) -> None:
    """Five H100 nodes (one at 85 %), four A100 nodes steady at 60 % of an H100's rate, two
    H200 nodes (one slow, but two are too few for a median): only the slow H100 alerts."""
    promtool = _promtool()
    fleet = [(f"h100-{i}", "xe9680-h100", 0.85 if i == 4 else 1.0) for i in range(5)]
    fleet += [(f"a100-{i}", "hgx-a100-80gb", 0.6) for i in range(4)]
    fleet += [("h200-0", "h200-single", 1.3), ("h200-1", "h200-single", 1.0)]
    series = [s for node in fleet for s in _node_series(*node)]
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(_rules()))
    count = "profile_level:nodegate_gemm_tflops:count"
    tests = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": series,
        "promql_expr_test": [{"expr": count, "eval_time": "10m", "exp_samples": [
            {"labels": f'{count}{{level="standard",profile="{p}"}}', "value": n}
            for p, n in (("hgx-a100-80gb", 4), ("h200-single", 2), ("xe9680-h100", 5))]}],
        "alert_rule_test": [{"eval_time": "2h", "alertname": "NodegateGemmBelowFleet",
                             "exp_alerts": [{
            "exp_labels": {"severity": "warning", "instance": "h100-4:9100",
                           "level": "standard", "profile": "xe9680-h100"},
            "exp_annotations": {"summary": "h100-4:9100: GEMM TFLOPS 5 % below the median "
                                           "of the xe9680-h100 nodes (standard)"}}]}],
    }]}
    (tmp_path / "test.yml").write_text(yaml.safe_dump(tests))
    result = subprocess.run([promtool, "test", "rules", "test.yml"], check=False, cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_doc_names_every_gate_action_and_remediation_phase() -> None:
    """docs/monitoring.md's label values are the code's."""
    from nodegate.remediation.state import Phase

    text = DOC.read_text()
    for value in [*gate_metrics.ACTIONS, *(p.value for p in Phase)]:
        assert f"`{value}`" in text, value
