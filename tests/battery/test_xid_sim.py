"""Xid judging end to end: simulator kernel log -> ``nodegate health`` -> JSON report.

Every ``nodegate sim run`` writes a fresh boot id, so two runs are two boots of the node.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conftest import run_cli


def _health(spec: str, tmp_path: Path, profile: str = "xe9680-h100") -> dict[str, Any]:
    result = run_cli("sim", "run", spec, "--", "nodegate", "health", "--profile", profile,
                     "--checks", "gpu,log", "--report-dir", str(tmp_path / "reports"),
                     "--no-textfile", "--quiet",
                     env={"NODEGATE_LOCK_FILE": str(tmp_path / "lock")})
    assert result.returncode in (0, 1), result.stderr
    return dict(json.loads((tmp_path / "reports" / "quick-latest.json").read_text()))


def _xid(report: dict[str, Any], entity: str) -> dict[str, Any]:
    return next(r for r in report["results"]
                if r["check"] == "xid_events" and r["entity"] == entity)


def test_xid_154_carries_its_recovery_action_into_the_report(tmp_path: Path) -> None:
    result = _xid(_health("h100-hgx+xid@gpu2:154", tmp_path), "gpu2")
    assert (result["verdict"], result["severity"]) == ("FAIL", "hardware")
    event = result["evidence"]["events"][0]
    assert event["recovery_action"] == "0x1 (GPU Reset Required)"
    assert (event["immediate"], event["action"]) == ("XID_154", "reset_gpu")


def test_hardware_xid_after_a_reboot_is_recurrent(tmp_path: Path) -> None:
    first = _health("h100-hgx+xid@gpu3:64", tmp_path)
    second = _health("h100-hgx+xid@gpu3:64", tmp_path)
    assert first["boot_id"] != second["boot_id"]
    assert "recurrent" not in _xid(first, "gpu3")["evidence"]["events"][0]
    event = _xid(second, "gpu3")["evidence"]["events"][0]
    assert event["recurrent"] is True
    assert event["boots"] == [first["boot_id"], second["boot_id"]]


def test_profile_override_ignores_xid_13(tmp_path: Path) -> None:
    from nodegate.profiles import resolve_profile

    assert _xid(_health("h100-hgx+xid@gpu1:13", tmp_path / "a"), "gpu1")["verdict"] == "WARN"
    data = resolve_profile("xe9680-h100").data
    data["xid"] = {"overrides": {"13": "ignore"}}
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(data))
    result = _xid(_health("h100-hgx+xid@gpu1:13", tmp_path / "b", str(path)), "gpu1")
    assert result["verdict"] == "PASS"
    assert result["evidence"]["events"][0]["override"] == "ignore"
