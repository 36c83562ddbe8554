"""The text view leaves out a metric with the same value on every node, as the HTML page
does, and says how many it left out (the demo's three nodes printed 27 all-zero rows)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from nodegate.fleet.aggregate import aggregate
from nodegate.fleet.render import render_text, to_data
from nodegate.report import fleet_summary
from nodegate_lab.synthetic_fleet import synthetic_report

START = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)


def test_flat_metrics_are_left_out_and_counted(tmp_path: Path) -> None:
    for index in range(4):
        report = synthetic_report(f"hgx{index}", level="quick", started_at=START, seed=index,
                                  faults=["hot-gpu@gpu1"] if index == 2 else ())
        fleet_summary.write_report(report, tmp_path / f"hgx{index}.json")
    view = aggregate(tmp_path, cache=False)
    flat = [m for m in view.metrics if m.flat and not m.outliers]
    moving = [m for m in view.metrics if not m.flat or m.outliers]
    assert flat and moving  # the quick level has both: zero counters, measured temperatures
    text = render_text(view)
    rows = {line.split()[0] for line in text.splitlines() if line and line[0].isalpha()}
    assert not {m.key for m in flat} & rows
    assert {m.key for m in moving} <= rows
    assert f"({len(flat)} of {len(view.metrics)} metrics left out: the same value on every " \
           f"node" in text
    # the JSON keeps every metric
    assert len(json.loads(json.dumps(to_data(view)))["metrics"]) == len(view.metrics)
