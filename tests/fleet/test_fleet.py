"""The fleet view: verdicts, outliers across nodes, history, CLI and HTML structure."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from nodegate.errors import ConfigError
from nodegate.fleet.aggregate import aggregate
from nodegate.fleet.html import render_html
from nodegate.report import to_json
from nodegate_lab.synthetic_fleet import synthetic_report
from tests.conftest import run_cli


def test_view(fleet_dir: Path, tmp_path: Path) -> None:
    view = aggregate(fleet_dir)
    assert [n.node for n in view.nodes] == [f"hgx{i}" for i in range(6)]
    assert view.n_reports == 12
    hgx1 = view.nodes[1]
    # the newer quick pass does not clear the standard failure
    assert hgx1.latest["level"] == "quick" and hgx1.verdict == "FAIL"
    assert hgx1.failing() == (["standard: nvlink_state[gpu3.link5]"], 1)
    assert view.nodes[2].verdict == "WARN"
    assert view.verdicts() == {"PASS": 4, "FAIL": 1, "WARN": 1}
    assert view.unreadable and view.unreadable[0][0] == "truncated.json"
    metrics = {m.key: m for m in view.metrics}
    p2p = metrics["p2p_bandwidth[gpu-gpu]"]
    assert p2p.unit == "GB/s" and p2p.stats["n"] == 6
    assert [(o.node, o.entity.count("gpu2")) for o in p2p.outliers] == [("hgx2", 1)]
    assert p2p.outliers[0].deviation_pct < -10
    assert {o.node for m in view.metrics for o in m.outliers} == {"hgx2"}
    assert len(hgx1.history) == 2 and hgx1.history[0]["level"] == "standard"


def test_margin_and_direction(fleet_dir: Path) -> None:
    wide = aggregate(fleet_dir, margin_pct=50)
    assert not any(m.outliers for m in wide.metrics)
    with pytest.raises(ConfigError, match="margin"):
        aggregate(fleet_dir, margin_pct=120)
    hot = fleet_dir / "hot"
    synthetic_report("hgx9", level="quick", faults=("hot-gpu@gpu5",)).write(hot / "q.json")
    view = aggregate(fleet_dir)
    temps = {m.key: m for m in view.metrics}["idle_temperature[gpu]"]
    assert temps.direction == "lower"
    assert [(o.node, o.entity) for o in temps.outliers] == [("hgx9", "gpu5")]


def test_a_report_replaced_under_its_summary_is_read_in_full(fleet_dir: Path) -> None:
    """A report rewritten without its summary (a copy from an older node, a crash between the
    two writes) no longer has the size the summary was written for: the report is read."""
    assert aggregate(fleet_dir).full_reads == 1  # truncated.json, which has no summary
    path = next(fleet_dir.rglob("hgx3/quick-latest.json"))
    synthetic_report("hgx3", level="quick", faults=("xid@node",)).write(path)
    view = aggregate(fleet_dir)
    assert view.full_reads == 2 and view.nodes[3].verdict == "FAIL"
    assert view.nodes[3].failing() == (["xid_events[node]"], 1)


def test_strict_mode_reports_schema_errors(fleet_dir: Path) -> None:
    path = next(fleet_dir.rglob("hgx0/quick-latest.json"))
    data = json.loads(path.read_text())
    data["results"][0]["colour"] = "red"
    path.write_text(json.dumps(data))
    assert not any(p.startswith("rack0/hgx0") for p, _ in aggregate(fleet_dir)
                   .unreadable)
    strict = dict(aggregate(fleet_dir, strict=True).unreadable)
    assert "key $.results[0].colour" in strict["rack0/hgx0/quick-latest.json"]


def test_a_report_in_any_key_order_reads_the_same(fleet_dir: Path) -> None:
    """Reports are parsed whole: nothing depends on the writer's key order."""
    before = aggregate(fleet_dir)
    path = next(fleet_dir.rglob("hgx4/standard-20240514T0300Z.json"))
    data = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps(dict(reversed(data.items()))), encoding="utf-8")
    after = aggregate(fleet_dir)
    assert after.full_reads == before.full_reads + 1
    assert (after.nodes, after.metrics) == (before.nodes, before.metrics)


def test_cli_text_and_json(fleet_dir: Path, tmp_path: Path) -> None:
    result = run_cli("report", str(fleet_dir))
    assert result.returncode == 1, result.stderr  # a node fails
    # the truncated file has no summary: read in full (and unreadable)
    assert "1 of 13 reports read in full (no usable summary beside them)." in result.stdout
    assert re.search(r"^hgx1\s+FAIL\s+quick .* standard: nvlink_state\[gpu3.link5\]$",
                     result.stdout, re.M)
    assert "hgx2 p2p_bandwidth[gpu" in result.stdout
    assert "truncated.json" in result.stderr
    data = json.loads(run_cli("report", str(fleet_dir), "--json", "--margin", "15").stdout)
    assert data["margin_pct"] == 15 and data["nodes"][1]["current"] == {
        "quick": "PASS", "standard": "FAIL"}
    assert data["read_in_full"] == 1
    missing = run_cli("report", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "report directory not found" in missing.stderr


def test_html_is_self_contained(fleet_dir: Path) -> None:
    html = render_html(aggregate(fleet_dir))
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "<link" not in html and "@import" not in html
    assert html.count("<svg") >= 6 * 4 + 5  # heatmap + 3 series per node, distributions
    assert 'aria-label="p2p_bandwidth"' in html and "load: temperature_c" in html


def test_a_multinode_report_is_its_own_row_not_the_standard_run(tmp_path: Path) -> None:
    from nodegate.judge import load as verdicts
    from nodegate.report import build

    node = tmp_path / "reports" / "hgx0"
    node.mkdir(parents=True)
    standard = synthetic_report("hgx0", level="standard", faults=("nvlink-down@gpu3.link5",),
                                samples=4)
    (node / "standard-latest.json").write_text(to_json(standard))
    value = {"world": 2, "hosts": ["hgx0", "hgx9"], "backend": "cpu/gloo",
             "sweep": [{"bytes": 4 << 20, "seconds": 0.01, "iters": 8, "algbw_gbps": 0.3,
                        "busbw_gbps": 0.3}]}
    pair = build(verdicts.multinode(True, value, {}, {}, "peer-hgx9"), node="hgx0",
                 profile="sim-h100-hgx", level="standard", started_at=standard.finished_at,
                 duration_s=10.0, backend="cpu/gloo", nodegate_version="0.1.0",
                 labels={"suite": "multinode", "peer": "hgx9"})
    (node / "multinode-latest.json").write_text(to_json(pair))
    view = aggregate(tmp_path / "reports")
    (hgx0,) = view.nodes
    # newer and passing, yet it does not hide the standard run's failure
    assert hgx0.verdict == "FAIL"
    assert {s["level"] for s in hgx0.history} == {"standard", "multinode"}
    assert hgx0.failing() == (["standard: nvlink_state[gpu3.link5]"], 1)


def test_a_node_whose_newest_report_is_unreadable_is_error_not_its_older_pass(
        fleet_dir: Path) -> None:
    """hgx0's quick-latest.json cut short (a failed copy): its standard report still reads
    PASS, but the unreadable file in its folder may be its newest, so hgx0 is ERROR and the
    exit is 1. truncated.json at the top is nobody's (its folder holds every node)."""
    latest = fleet_dir / "rack0" / "hgx0" / "quick-latest.json"
    latest.write_bytes(latest.read_bytes()[:200])
    view = aggregate(fleet_dir)
    hgx0 = next(node for node in view.nodes if node.node == "hgx0")
    assert [s["level"] for s in hgx0.history] == ["standard"]
    assert hgx0.history[-1]["verdict"] == "PASS"
    assert hgx0.verdict == "ERROR"
    assert [path for path, _ in hgx0.unreadable] == ["rack0/hgx0/quick-latest.json"]
    assert hgx0.failing()[0][0] == "unreadable report rack0/hgx0/quick-latest.json"
    assert all(not node.unreadable for node in view.nodes if node.node != "hgx0")
    result = run_cli("report", str(fleet_dir), "--json")
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    node = next(n for n in data["nodes"] if n["node"] == "hgx0")
    assert node["verdict"] == "ERROR"
    assert node["unreadable"][0]["report"] == "rack0/hgx0/quick-latest.json"


def test_an_unreadable_file_fails_a_passing_fleet(tmp_path: Path) -> None:
    """Every node passes, one file cannot be read and cannot be told whose: not proven
    passing (exit 1); without it the same fleet exits 0; with nothing readable, exit 2."""
    root = tmp_path / "reports"
    for node in ("a1", "a2"):
        (root / node).mkdir(parents=True)
        (root / node / "quick-latest.json").write_text(
            to_json(synthetic_report(node, level="quick", seed=3)), encoding="utf-8")
    assert run_cli("report", str(root)).returncode == 0
    (root / "stray.json").write_text("[" * 200_000, encoding="utf-8")
    result = run_cli("report", str(root))
    assert result.returncode == 1, result.stderr
    assert "stray.json" in result.stderr and "nested too deeply" in result.stderr
    assert "not proven passing" in result.stderr
    for node in ("a1", "a2"):
        (root / node / "quick-latest.json").write_text("{}", encoding="utf-8")
    result = run_cli("report", str(root))
    assert result.returncode == 2, result.stderr
    assert "none of the 3" in result.stderr and "Traceback" not in result.stderr
