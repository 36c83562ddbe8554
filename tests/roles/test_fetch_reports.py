"""deploy/fetch_reports.py: the node's dated reports and their summaries come to the operator,
only those not there yet, newest ``gate_history_keep``; the latest copies and JUnit stay."""

from __future__ import annotations

from pathlib import Path

from deploy.fetch_reports import fetch_reports, to_fetch
from tests.roles.harness import run
from tests.roles.scenarios import host_data

DIR = "/var/lib/nodegate/reports"
ON_NODE = [f"{DIR}/{name}" for name in (
    "quick-20261201T030000.000Z.json", "quick-20261201T030000.000Z.summary.json",
    "quick-20261201T030500.000Z.json", "quick-20261201T030500.000Z.summary.json",
    "standard-20261130T220000.000Z.json",  # written before summaries: the report alone
    "quick-latest.json", "quick-latest.summary.json", "quick-latest.xml",
)]


def test_only_missing_dated_reports_newest_first_kept(tmp_path: Path) -> None:
    local = tmp_path / "gpu-b01" / "history"
    local.mkdir(parents=True)
    (local / "quick-20261201T030000.000Z.json").write_text("{}")
    plan = [(src.rsplit("/", 1)[1], dest.name) for src, dest in to_fetch(ON_NODE, local, 3)]
    assert plan == [("quick-20261201T030000.000Z.summary.json",) * 2,
                    ("quick-20261201T030500.000Z.json",) * 2,
                    ("quick-20261201T030500.000Z.summary.json",) * 2,
                    ("standard-20261130T220000.000Z.json",) * 2]
    newest_two = {dest.name for _, dest in to_fetch(ON_NODE, local, 2)}
    assert "standard-20261130T220000.000Z.json" not in newest_two  # older than the keep


def test_the_deploy_downloads_the_plan(tmp_path: Path) -> None:
    data = host_data(gate_fetch_dir=str(tmp_path))
    result = run(fetch_reports, data=data, facts={"files.FindFiles": ON_NODE})
    assert result.error is None, result.error
    downloads = [c for c in result.commands if c.startswith("download ")]
    assert len(downloads) == 5 and all("/history/" in c for c in downloads)
    assert not any("latest" in c for c in downloads)
    done = run(fetch_reports, data=data, facts={"files.FindFiles": ON_NODE[5:]})
    assert not done.commands and "up to date" in done.noops[0]
