"""The pytest front end reads earlier reports where it writes them, as `nodegate validate`
does: recurring Xids and counter growth must not judge against another folder's history."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from nodegate.battery import run as battery_run
from nodegate.profiles import installed
from nodegate.testing import plugin


def test_the_battery_reads_earlier_reports_from_the_report_dir(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []

    def recorded(*_args: Any, **kwargs: Any) -> str:
        calls.append(kwargs)
        return "ran"

    monkeypatch.setattr(battery_run, "run_battery", recorded)
    monkeypatch.setattr(installed, "select_profile", lambda name: SimpleNamespace(name=name))
    options = {"--nodegate-profile": "sim-h100-hgx", "--nodegate-level": "quick",
               "--nodegate-xid-window": "24h", "--nodegate-duration-scale": 1.0,
               "--nodegate-workers": None, "--nodegate-report-dir": tmp_path,
               "--nodegate-checks": "gpu"}
    config = SimpleNamespace(getoption=lambda name, default=None: options.get(name, default),
                             stash={})
    monkeypatch.setattr(plugin, "_state", lambda _config: {})
    monkeypatch.setattr(plugin, "_groups", lambda _config: ("gpu",))
    fixture = plugin.nodegate_battery.__wrapped__  # type: ignore[attr-defined]
    assert fixture(SimpleNamespace(config=config)) == "ran"
    assert calls[0]["report_dir"] == tmp_path
