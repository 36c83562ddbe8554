"""The fleet page reads top-down: what failed first (the node, its check, the reason its report
gives), then what moved; a metric with the same value on every node has nothing to plot and is
left out, counted and named; the pair matrix has its place but no data until a cluster check
gives it some."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

from nodegate.fleet.aggregate import FleetView, aggregate
from nodegate.fleet.html import PairMatrix, pair_matrix_section, render_html
from nodegate.fleet.trends import MetricTrend, TrendView
from nodegate.fleet.trends_html import section
from nodegate.report.fleet_summary import write_report
from nodegate_lab.synthetic_fleet import synthetic_report

NOW = dt.datetime.now(dt.timezone.utc)
FAULTY = "hgx3"


def _fleet(tmp_path: Path) -> FleetView:
    """Six nodes, one with an NVLink down (not the first by name)."""
    for index in range(6):
        node = f"hgx{index}"
        faults = ("nvlink-down@gpu3.link5",) if node == FAULTY else ()
        report = synthetic_report(node, faults=faults, seed=index, samples=10,
                                  started_at=NOW - dt.timedelta(hours=1))
        write_report(report, tmp_path / node / "standard-latest.json")
    return aggregate(tmp_path)


def test_the_faulty_node_comes_first_with_its_check_and_reason(tmp_path: Path) -> None:
    view = _fleet(tmp_path)
    assert [n.node for n in view.nodes if n.verdict == "FAIL"] == [FAULTY]
    page = render_html(view)
    body = page[page.index("<body>"):]
    headings = re.findall(r"<h2[^>]*>([^<]+)", body)
    assert headings[:2] == ["What failed", "What moved"], headings
    failed = body[body.index('id="failed"'):body.index('id="moved"')]
    rows = re.findall(r'<tr><td>(?:<a href="#node-[^"]+">)?([^<]+)', failed)
    assert rows == ["nvlink_state", FAULTY]  # the checks table, then the failing node
    assert "nvlink_state[gpu3.link5]: NVLink 5 on GPU 3 is inactive" in failed
    assert "serial " in failed  # the card to pull
    # the first node the page names, and the first node plotted, is the faulty one
    named = re.search(r"hgx\d", body)
    assert named is not None and named.group() == FAULTY
    plotted = re.findall(r'<h3 id="node-(hgx\d)"', body)
    assert plotted[0] == FAULTY and sorted(plotted) == [f"hgx{i}" for i in range(6)]
    assert failed.count('<h3 id="node-') == 1  # its plots under What failed, no others


def test_a_passing_fleet_says_so_first(tmp_path: Path) -> None:
    report = synthetic_report("hgx0", seed=1, started_at=NOW)
    write_report(report, tmp_path / "hgx0" / "standard-latest.json")
    page = render_html(aggregate(tmp_path), plots=0)
    assert '<h2 id="failed">What failed</h2><p>No node fails.</p>' in page


def test_a_metric_with_one_value_on_every_node_is_left_out_and_counted(tmp_path: Path) -> None:
    view = _fleet(tmp_path)
    flat = [m for m in view.metrics if m.stats["min"] == m.stats["max"]]
    varying = [m for m in view.metrics if m.stats["min"] != m.stats["max"]]
    assert "power_limit[gpu]" in {m.key for m in flat} and varying
    page = render_html(view, plots=0)
    for metric in flat:
        assert f'aria-label="{metric.key}, {metric.profile} across nodes"' not in page
    for metric in varying:
        assert f'aria-label="{metric.key}, {metric.profile} across nodes"' in page
    note = re.search(r'<p class="muted" id="left-out">(\d+) of (\d+) metrics left out: the '
                     r"same value on every node \(([^)]*)\)", page)
    assert note is not None
    assert (int(note.group(1)), int(note.group(2))) == (len(flat), len(view.metrics))
    assert "power_limit[gpu] = 700 W" in note.group(3)


def test_a_flat_trend_is_left_out_and_counted() -> None:
    day = 86400.0
    flat = MetricTrend("xid_events[node]", "p", "events", "counter", "lower",
                       fleet_line=[(i * day, 0.0) for i in range(5)], fleet_recent=0.0)
    moving = MetricTrend("gemm_tflops[gpu]", "p", "TFLOPS", "level", "higher",
                         fleet_line=[(i * day, 700.0 - i) for i in range(5)],
                         fleet_recent=696.0)
    html = "".join(section(TrendView([moving, flat], [], 5, {}, [])))
    assert "1 of 2 trend plots left out: one value throughout (xid_events[node], p)" in html
    assert 'aria-label="gemm_tflops[gpu], p"' in html
    assert 'aria-label="xid_events[node]' not in html


def test_the_pair_matrix_has_a_place_and_no_data_until_given(tmp_path: Path) -> None:
    view = _fleet(tmp_path)
    assert pair_matrix_section(None) == []
    assert "Pair matrix" not in render_html(view, plots=0)
    pairs = PairMatrix("all_reduce busbw, 2-node pairs", ["hgx0", "hgx1", "hgx2"],
                       [[None, 180.0, 181.0], [180.0, None, 12.0], [181.0, 12.0, None]],
                       "GB/s", named=["hgx1"])
    page = render_html(view, plots=0, pairs=pairs)
    part = page[page.index('id="pairs"'):]
    assert part.index("Named by the localisation: hgx1") < part.index("<svg")
    assert "hgx1 -&gt; hgx2: 12 GB/s" in part
    assert page.index('id="moved"') < page.index('id="pairs"') < page.index('id="metrics"')
