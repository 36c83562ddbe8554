"""A small fleet directory: six nodes, history on each, planted faults and one bad file; each
report written as a node writes it, with its fleet summary beside it."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from nodegate.report.fleet_summary import write_report
from nodegate_lab.synthetic_fleet import synthetic_report

NOW = dt.datetime.now(dt.timezone.utc)
FAULTS = {"hgx1": ("nvlink-down@gpu3.link5",), "hgx2": ("slow-gpu@gpu2",)}


@pytest.fixture
def fleet_dir(tmp_path: Path) -> Path:
    root = tmp_path / "reports"
    for index in range(6):
        node = f"hgx{index}"
        standard = synthetic_report(node, faults=FAULTS.get(node, ()), seed=index, samples=20,
                                    started_at=NOW - dt.timedelta(hours=3))
        write_report(standard, root / f"rack{index % 2}" / node / "standard-20240514T0300Z.json")
        quick = synthetic_report(node, level="quick", seed=100 + index,
                                 started_at=NOW - dt.timedelta(minutes=5))
        write_report(quick, root / f"rack{index % 2}" / node / "quick-latest.json")
    (root / "truncated.json").write_text('{"schema": "nodegate.report/1", "node": ')
    return root
