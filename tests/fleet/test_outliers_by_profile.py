"""Outliers per profile: a fleet of two kinds of node, H100 nodes and A100 nodes whose GEMM
TFLOPS is steadily ~60 % of an H100's. One fleet-wide median made every A100 node an
outlier and, being pulled down by them, hid an H100 node running at 80 %; each profile's own
median lists only that node. A profile with fewer than MIN_NODES nodes has its spread but
no outliers, and the text, JSON and HTML say so (as the trends do: test_trends.py)."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

import pytest

from nodegate.fleet.aggregate import MIN_NODES, FleetView, build_view
from nodegate.fleet.html import render_html
from nodegate.fleet.read import entry
from nodegate.fleet.render import render_text, to_data
from nodegate.report.fleet_summary import from_report, write_report
from nodegate.report.model import NodeReport
from nodegate_lab.synthetic_fleet import synthetic_report
from tests.conftest import run_cli

START = dt.datetime(2026, 11, 1, 3, 0, tzinfo=dt.timezone.utc)
GEMM = "gemm_tflops[gpu]"
H100 = "xe9680-h100"
A100 = "hgx-a100-80gb"
A100_GEMM = 0.6  # an A100's share of an H100's GEMM rate (test_trends.py)
SLOW = "hgx3"  # an H100 node at 80 % of its kind's GEMM rate
FEW_NOTE = (f"profile {A100}: 2 nodes (fewer than {MIN_NODES}): no profile median, no "
            "outliers sought among them")


def _reports(a100_nodes: int, *, a100_slow: str | None = None) -> list[NodeReport]:
    """Five H100 nodes ``hgx<i>`` (``SLOW`` at 80 %) and ``a100_nodes`` A100 nodes
    ``a100-<i>`` steady at ``A100_GEMM`` (but ``a100_slow``, at 2/3 of that)."""
    out = [synthetic_report(f"hgx{i}", started_at=START, samples=10,
                            gemm_scale=0.8 if f"hgx{i}" == SLOW else 1.0)
           for i in range(5)]
    out += [synthetic_report(f"a100-{i}", started_at=START, samples=10, profile=A100,
                             gemm_scale=A100_GEMM * (2 / 3 if f"a100-{i}" == a100_slow
                                                     else 1.0))
            for i in range(a100_nodes)]
    return out


def _view(reports: list[NodeReport]) -> FleetView:
    """The view the reader builds from each report's summary (no disk)."""
    return build_view(Path("fleet"), [entry(from_report(r.to_dict()), f"{r.node}/s.json")
                                      for r in reports])


def _outliers(view: FleetView) -> set[tuple[str, str, str]]:
    return {(o.node, m.key, o.profile) for m in view.metrics for o in m.outliers}


@pytest.fixture(scope="module")
def mixed() -> FleetView:
    return _view(_reports(a100_nodes=4))


def test_each_profile_is_compared_with_its_own_median(mixed: FleetView) -> None:
    assert _outliers(mixed) == {(SLOW, GEMM, H100)}
    gemm = {m.profile: m for m in mixed.metrics if m.key == GEMM}
    assert set(gemm) == {H100, A100}
    h100, a100 = gemm[H100], gemm[A100]
    assert h100.stats["n"] == 5 and h100.stats["median"] > 700  # the H100s', not the mix
    assert {node for node, _, _ in h100.values} == {f"hgx{i}" for i in range(5)}
    assert a100.stats["n"] == 4 and 400 < a100.stats["median"] < 460 and a100.outliers == []
    (outlier,) = h100.outliers
    assert -25 < outlier.deviation_pct < -15 and outlier.profile == H100
    assert mixed.notes == []
    # one view per metric and profile, those with outliers first
    assert mixed.metrics[0] is h100
    assert len({(m.key, m.profile) for m in mixed.metrics}) == len(mixed.metrics)
    assert {m.profile for m in mixed.metrics} == {H100, A100}


def test_text_json_and_html_name_the_profile(mixed: FleetView) -> None:
    text = render_text(mixed)
    outliers = text[text.index("\nOutliers:\n"):].splitlines()[2:]
    assert len(outliers) == 1
    assert re.fullmatch(rf"  {SLOW} gemm_tflops\[gpu\d\] [\d.]+ TFLOPS \(-\d+\.\d% vs the "
                        rf"{H100} median [\d.]+\)", outliers[0]), outliers
    assert re.search(rf"^gemm_tflops\[gpu\]\s+{A100}\s+TFLOPS\s+4\s.*\s0$", text, re.M)
    assert "(profile " not in text
    data = json.loads(json.dumps(to_data(mixed)))
    assert data["notes"] == []
    entries = [(m["metric"], m["profile"]) for m in data["metrics"]]
    assert (GEMM, H100) in entries and (GEMM, A100) in entries
    assert [(o["node"], o["profile"], m["profile"]) for m in data["metrics"]
            for o in m["outliers"]] == [(SLOW, H100, H100)]
    page = render_html(mixed, plots=0)
    for profile, nodes, outlier_nodes in ((H100, 5, 1), (A100, 4, 0)):
        label = f"gemm_tflops[gpu], {profile}"
        svg = re.search(rf'<svg[^>]*aria-label="{re.escape(label)} across nodes".*?</svg>',
                        page)
        assert svg is not None, profile
        assert f"{label} (TFLOPS), {nodes} nodes, {outlier_nodes} outlier nodes" in svg.group()
    table = page[page.index("<h3>Outliers</h3>"):]
    table = table[:table.index("</table>")]
    assert re.findall(r"<tr><td>([^<]+)</td><td>([^<]+)</td><td>([^<]+)</td>", table) == [
        (SLOW, H100, GEMM)]


def test_a_profile_with_too_few_nodes_gets_stats_but_no_outliers() -> None:
    """Two A100 nodes, one at 2/3 of the other's GEMM rate: too few for a median of their
    own, so neither is an outlier (nor judged against the H100s), and the output says why."""
    view = _view(_reports(a100_nodes=2, a100_slow="a100-1"))
    assert _outliers(view) == {(SLOW, GEMM, H100)}
    gemm = next(m for m in view.metrics if m.key == GEMM and m.profile == A100)
    assert gemm.stats["n"] == 2 and gemm.stats["min"] < 0.75 * gemm.stats["max"]
    assert gemm.outliers == []
    assert view.notes == [FEW_NOTE]
    assert f"  ({FEW_NOTE})" in render_text(view).splitlines()
    assert json.loads(json.dumps(to_data(view)))["notes"] == [FEW_NOTE]
    page = render_html(view, plots=0)
    assert f'<p class="muted">{FEW_NOTE}</p>' in page
    svg = re.search(rf'<svg[^>]*aria-label="gemm_tflops\[gpu\], {A100} across nodes".*?</svg>',
                    page)
    assert svg is not None and "margin" not in svg.group()  # no margin drawn: none sought


def test_report_cli_over_a_mixed_fleet(tmp_path: Path) -> None:
    """``nodegate report`` over the files as nodes write them (summaries beside them)."""
    for report in _reports(a100_nodes=2, a100_slow="a100-1"):
        write_report(report, tmp_path / report.node / "standard-latest.json")
    result = run_cli("report", str(tmp_path), "--json")
    assert result.returncode == 0, result.stderr  # WARNs only
    data = json.loads(result.stdout)
    assert data["read_in_full"] == 0 and data["notes"] == [FEW_NOTE]
    assert [(o["node"], m["metric"], o["profile"]) for m in data["metrics"]
            for o in m["outliers"]] == [(SLOW, GEMM, H100)]
    assert {m["profile"] for m in data["metrics"] if m["metric"] == GEMM} == {H100, A100}
    text = run_cli("report", str(tmp_path)).stdout
    assert f"  ({FEW_NOTE})" in text.splitlines()
    assert f"vs the {H100} median" in text
