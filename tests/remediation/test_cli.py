"""``nodegate remediate`` as an operator runs it: exit codes and what it says."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import run_cli
from tests.remediation.helpers import make_report, xid_result


def _reports(tmp_path: Path) -> Path:
    folder = tmp_path / "reports"
    folder.mkdir()
    make_report(xid_result("gpu3", 48, "reset_gpu")).write(folder / "quick-latest.json")
    return folder


def test_off_unless_enabled_touches_nothing(tmp_path: Path) -> None:
    state = tmp_path / "state"
    proc = run_cli("remediate", "--report-dir", str(_reports(tmp_path)), "--state-dir",
                   str(state), "--profile", "sim-h100-hgx", "--node", "gpu-node-01",
                   "--textfile-dir", str(tmp_path / "prom"))
    assert proc.returncode == 0, proc.stderr
    assert "remediation is off" in proc.stdout
    assert not (state / "remediation.json").exists()
    prom = (tmp_path / "prom" / "nodegate_remediation.prom").read_text()
    assert 'phase="in_service"} 1' in prom


def test_an_unreadable_state_file_is_exit_2_naming_it(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "remediation.json").write_text("{garbage")
    proc = run_cli("remediate", "--report-dir", str(_reports(tmp_path)), "--state-dir",
                   str(state), "--profile", "sim-h100-hgx", "--node", "gpu-node-01")
    assert proc.returncode == 2
    assert str(state / "remediation.json") in proc.stderr
    assert (state / "remediation.json").read_text() == "{garbage"


def test_no_report_is_exit_2(tmp_path: Path) -> None:
    empty = tmp_path / "reports"
    empty.mkdir()
    proc = run_cli("remediate", "--report-dir", str(empty), "--state-dir",
                   str(tmp_path / "state"), "--profile", "sim-h100-hgx")
    assert proc.returncode == 2 and "no readable report" in proc.stderr
