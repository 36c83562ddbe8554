"""Trends over each node's report history: the degrading list and the plots, on a synthetic
fleet where one node's GEMM TFLOPS decays, alone or beside nodes of another
profile whose figures are steadily lower (compared with their own kind only)."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

import pytest

from nodegate.fleet.aggregate import FleetView, build_view
from nodegate.fleet.html import render_html
from nodegate.fleet.read import entry
from nodegate.fleet.trends import counter_rates, text_lines, to_data, trends, worse_pct
from nodegate.fleet.trends_html import section
from nodegate.report.fleet_summary import from_report, text_for, write_files
from nodegate.report.model import dumps
from nodegate_lab.synthetic_fleet import synthetic_history
from tests.conftest import run_cli

START = dt.datetime(2026, 11, 1, 3, 0, tzinfo=dt.timezone.utc)
DECAYING = "hgx3"
H100 = "xe9680-h100"
#: Another card: an A100's bf16 GEMM is ~60 % of an H100's (312 vs 989 TFLOPS dense spec,
#: ~430 vs ~720 measured), every run: a steady group at a clearly different level.
A100 = "hgx-a100-80gb"
A100_GEMM = 0.6


def _fleet(nodes: int, reports: int, decay: float, *, a100_nodes: int = 0,
           a100_decaying: str | None = None) -> FleetView:
    """The view the reader builds, from each report's summary (no disk): ``nodes`` H100
    nodes ``hgx<i>`` (``DECAYING`` loses ``decay`` of its GEMM rate per run), and
    ``a100_nodes`` steady A100 nodes ``a100-<i>`` (but ``a100_decaying``, which decays too)."""
    histories = [synthetic_history(f"hgx{index}", reports=reports, start=START,
                                   gemm_decay=decay if f"hgx{index}" == DECAYING else 0.0)
                 for index in range(nodes)]
    histories += [synthetic_history(f"a100-{index}", reports=reports, start=START,
                                    profile=A100, gemm_scale=A100_GEMM,
                                    gemm_decay=decay if f"a100-{index}" == a100_decaying
                                    else 0.0)
                  for index in range(a100_nodes)]
    items = [entry(from_report(r.to_dict()), f"{r.node}/{i}.json")
             for history in histories for i, r in enumerate(history)]
    return build_view(Path("fleet"), items)


@pytest.fixture(scope="module")
def decaying() -> FleetView:
    return _fleet(nodes=5, reports=8, decay=0.02)  # 2 % of TFLOPS lost per run


def test_the_decaying_node_is_the_degrading_list(decaying: FleetView) -> None:
    view = trends(decaying)
    assert view.nodes_with_history == 5 and view.limits == {H100: 5.0}
    listed = {(d.node, d.metric, d.against) for d in view.degrading}
    assert listed == {(DECAYING, "gemm_tflops[gpu]", "own"),
                      (DECAYING, "gemm_tflops[gpu]", "fleet")}
    own = next(d for d in view.degrading if d.against == "own")
    # baseline: median of the first 2 runs (~0.99 of healthy); recent: of the last 3 (~0.89)
    assert 8 < own.change_pct < 14 and own.recent < own.reference
    gemm = next(m for m in view.metrics if m.key == "gemm_tflops[gpu]")
    assert list(gemm.nodes) == [DECAYING] and len(gemm.nodes[DECAYING]) == 8
    assert gemm.profile == H100 and gemm.fleet_recent is not None and gemm.fleet_recent > 700
    lines = text_lines(view)
    assert lines[1] == "Trends: 5 nodes with 3+ reports, 5 metrics; degrading: 2"
    assert all(line.startswith(f"  {DECAYING}: gemm_tflops[gpu] ") for line in lines[2:])


def test_a_decay_within_the_profiles_margin_is_not_listed() -> None:
    slow = _fleet(nodes=4, reports=6, decay=0.005)  # ~2 % over the history, limit 5 %
    assert trends(slow).degrading == []
    tight = trends(slow, drift_pct=1.0)  # --drift 1: now it is
    assert {d.node for d in tight.degrading if d.metric == "gemm_tflops[gpu]"} == {DECAYING}


def test_trend_plot_and_list_in_the_html(decaying: FleetView) -> None:
    page = render_html(decaying, plots=0, extra=section(trends(decaying)))
    trend_part = page[page.index("<h2>Trends</h2>"):]
    table = trend_part[trend_part.index('id="degrading"'):trend_part.index("</table>")]
    assert table.count("<tr><td>") == 2 and f"<td>{DECAYING}</td>" in table
    svg = re.search(r'<svg[^>]*aria-label="gemm_tflops\[gpu\], xe9680-h100".*?</svg>',
                    trend_part)
    assert svg is not None
    lines = re.findall(r'<polyline [^>]*points="([^"]+)"><title>([^<]+)</title>', svg.group())
    assert [name for _, name in lines] == ["median", DECAYING]
    node_points = [tuple(map(float, p.split(","))) for p in lines[1][0].split()]
    assert len(node_points) == 8
    assert node_points[-1][1] > node_points[0][1]  # SVG y grows downwards: the line falls
    assert "0 d" in svg.group() and "TFLOPS" in svg.group()


def test_a_steady_profile_at_another_level_is_not_degrading_vs_the_fleet() -> None:
    """Four A100 nodes run steadily at ~60 % of the H100s' GEMM rate. One fleet-wide
    median listed all four as degrading (30 % below it, though they never changed); each
    profile's own median lists only the H100 node that decays."""
    mixed = _fleet(nodes=5, reports=8, decay=0.02, a100_nodes=4)
    view = trends(mixed)
    assert view.nodes_with_history == 9
    listed = {(d.node, d.metric, d.against) for d in view.degrading}
    assert listed == {(DECAYING, "gemm_tflops[gpu]", "own"),
                      (DECAYING, "gemm_tflops[gpu]", "fleet")}
    fleet = next(d for d in view.degrading if d.against == "fleet")
    assert fleet.profile == H100 and fleet.reference > 700  # the H100s' median, not the mix
    assert any(line.endswith("worse than the xe9680-h100 median (limit 5 %)")
               for line in text_lines(view))
    gemm = {m.profile: m for m in view.metrics if m.key == "gemm_tflops[gpu]"}
    assert set(gemm) == {H100, A100}
    a100, h100 = gemm[A100].fleet_recent, gemm[H100].fleet_recent
    assert a100 is not None and 400 < a100 < 460 and h100 is not None and h100 > 700
    # each profile has a median line of its own; no A100 node is listed
    assert gemm[A100].nodes == {} and gemm[A100].fleet_line and gemm[H100].fleet_line
    data = json.loads(json.dumps(to_data(view)))
    assert [(m["profile"], m["fleet_recent"] > 700) for m in data["metrics"]
            if m["metric"] == "gemm_tflops[gpu]"] == [(A100, False), (H100, True)]
    assert {d["profile"] for d in data["degrading"]} == {H100}
    # the HTML: one plot per profile, each with its own median
    page = "".join(section(view))
    for profile, names in ((H100, ["median", DECAYING]), (A100, ["median"])):
        svg = re.search(rf'<svg[^>]*aria-label="gemm_tflops\[gpu\], {profile}".*?</svg>',
                        page)
        assert svg is not None, profile
        assert re.findall(r"<polyline [^>]*><title>([^<]+)</title>", svg.group()) == names


def test_a_profile_with_too_few_nodes_has_no_fleet_verdict() -> None:
    """Two A100 nodes beside five H100s: too few (MIN_NODES) for a median of their own, so
    the one that decays is listed against its own baseline only, and the output says why."""
    view = trends(_fleet(nodes=5, reports=8, decay=0.02, a100_nodes=2,
                         a100_decaying="a100-1"))
    listed = {(d.node, d.against) for d in view.degrading if d.metric == "gemm_tflops[gpu]"}
    assert listed == {(DECAYING, "own"), (DECAYING, "fleet"), ("a100-1", "own")}
    gemm = next(m for m in view.metrics if m.key == "gemm_tflops[gpu]" and m.profile == A100)
    assert gemm.fleet_recent is None and gemm.fleet_line == [] and list(gemm.nodes) == [
        "a100-1"]
    assert any(note.startswith(f"profile {A100}: 2 nodes with a history (fewer than 3)")
               for note in view.notes)


def test_counter_rates_count_growth_not_resets() -> None:
    day = 86400.0
    points = [(0.0, 5.0), (day, 8.0), (2 * day, 1.0), (3 * day, 4.0), (3 * day, 9.0)]
    assert counter_rates(points) == [(day, 3.0), (2 * day, 0.0), (3 * day, 3.0)]


@pytest.mark.parametrize(("reference", "value", "direction", "expected"), [
    (700.0, 630.0, "higher", 10.0), (700.0, 770.0, "higher", -10.0),
    (80.0, 88.0, "lower", 10.0), (0.0, 3.0, "lower", 300.0),
])
def test_worse_follows_the_direction(reference: float, value: float, direction: str,
                                     expected: float) -> None:
    floor = 1.0 if reference == 0 else 0.0
    assert worse_pct(reference, value, direction, floor) == pytest.approx(expected)


def test_report_cli_reads_the_history_from_summaries(tmp_path: Path) -> None:
    """``nodegate report`` over dated reports with summaries beside them, as nodes keep them:
    the JSON's degrading list and the HTML's trends section."""
    for index in range(4):
        node = f"hgx{index}"
        for report in synthetic_history(node, reports=4, start=START,
                                        gemm_decay=0.05 if node == DECAYING else 0.0):
            data = report.to_dict()
            text = dumps(data)
            stamp = report.finished_at.strftime("%Y%m%dT%H%M%S.000Z")
            write_files(tmp_path / node / f"standard-{stamp}.json", text, text_for(data, text))
    html = tmp_path / "fleet.html"
    result = run_cli("report", str(tmp_path), "--json", "--html", str(html))
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["read_in_full"] == 0  # every report through its summary
    assert {(d["node"], d["metric"]) for d in data["trends"]["degrading"]} == {
        (DECAYING, "gemm_tflops[gpu]")}
    page = html.read_text()
    assert "<h2>Trends</h2>" in page and 'aria-label="gemm_tflops[gpu], xe9680-h100"' in page


def test_a_latest_copy_beside_its_dated_original_counts_once() -> None:
    report = synthetic_history("hgx0", reports=1, start=START)[0]
    summary = from_report(report.to_dict())
    view = build_view(Path("fleet"), [entry(summary, "hgx0/history/standard-1.json"),
                                      entry(summary, "hgx0/standard-latest.json")])
    assert view.n_reports == 1 and view.nodes[0].latest["path"] == "hgx0/history/standard-1.json"
    assert len(view.points["hgx0"]["gemm_tflops[gpu]"]) == 2  # one (time, value) pair
