"""The network group end to end under the simulator: sysfs tree -> probes -> map -> judge ->
``nodegate health`` -> report. Each rail fault fails the check an engineer would expect, on
the entity it was applied to, and nothing else."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodegate.sim.runtime import prepare
from tests.conftest import run_cli

H, W = "hardware", "warning"

NETWORK_CATALOG: dict[str, set[tuple[str, str, str, str]]] = {
    # a down port's rate is not a trained link's: both fail
    "rail-down@nic3": {("ib_port_state", "mlx5_3.port1", "FAIL", H),
                       ("ib_port_rate", "mlx5_3.port1", "FAIL", H)},
    "rail-rate@nic5:200": {("ib_port_rate", "mlx5_5.port1", "FAIL", H)},
    "nic-numa@nic2": {("ib_rail_numa", "mlx5_2", "FAIL", H)},
    "nic-switch@nic6": {("ib_topology", "mlx5_6", "FAIL", H), ("ib_topology", "gpu6", "FAIL", H)},
    "rail-missing@nic1": {("ib_rail_count", "node", "FAIL", H), ("ib_topology", "gpu1", "FAIL", H)},
    # a first run has no earlier report to take a rate from: the total is a warning; growth
    # between two reports fails (test_flap_between_reports_fails)
    "link-flap@nic4": {("ib_link_flaps", "mlx5_4.port1", "WARN", W)},
}


def _health(env: dict[str, str] | None, spec: str | None, report_dir: Path,
            profile: str = "xe9680-h100") -> tuple[int, dict]:  # type: ignore[type-arg]
    args = ("health", "--profile", profile, "--checks", "network", "--report-dir",
            str(report_dir), "--no-textfile", "--quiet")
    lock = {"NODEGATE_LOCK_FILE": str(report_dir.parent / "lock")}
    if spec is not None:
        result = run_cli("sim", "run", spec, "--", "nodegate", *args, env=lock)
    else:
        result = run_cli(*args, env={**lock, **(env or {})})
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads((report_dir / "quick-latest.json").read_text())


def _flagged(report: dict) -> set[tuple[str, str, str, str]]:  # type: ignore[type-arg]
    return {(r["check"], r["entity"], r["verdict"], r["severity"]) for r in report["results"]
            if r["verdict"] != "PASS"}


@pytest.mark.parametrize("profile", ["xe9680-h100", "xd670-h100"])
def test_healthy_board_passes(profile: str, tmp_path: Path) -> None:
    code, report = _health(None, "h100-hgx", tmp_path / "r", profile)
    assert code == 0 and _flagged(report) == set()
    checks = {r["check"] for r in report["results"]}
    assert len(checks) == 15  # every network check but the RoCE netdev (IB rails: no MTU)
    rail_map = json.loads((tmp_path / "r" / "rail-map.json").read_text())
    assert rail_map["schema"] == "nodegate.rail-map/1"
    assert [(r["rank"], r["gpu"], [n["device"] for n in r["nics"]]) for r in rail_map["ranks"]] \
        == [(i, f"gpu{i}", [f"mlx5_{i}"]) for i in range(8)]
    assert rail_map["ranks"][0]["cpus"] == "0-55,112-167"
    assert rail_map["ranks"][7]["numa_node"] == 1
    assert rail_map["nccl_ib_hca"] == "=" + ",".join(f"mlx5_{i}:1" for i in range(8))


@pytest.mark.parametrize("fault", sorted(NETWORK_CATALOG))
def test_rail_fault_is_caught(fault: str, tmp_path: Path) -> None:
    code, report = _health(None, f"h100-hgx+{fault}", tmp_path / "r")
    assert _flagged(report) == NETWORK_CATALOG[fault]
    failing = any(v in ("FAIL", "ERROR") for _, _, v, _ in NETWORK_CATALOG[fault])
    assert code == (1 if failing else 0)


def test_flap_between_reports_fails(tmp_path: Path) -> None:
    """One boot, two cron runs; the kernel bumps link_downed on mlx5_4 in between."""
    env = prepare("h100-hgx", tmp_path / "board")
    code, first = _health(env, None, tmp_path / "r")
    assert code == 0 and _flagged(first) == set()
    counter = Path(env["NODEGATE_SYSFS_ROOT"]) / "class/infiniband/mlx5_4/ports/1/counters" \
        / "link_downed"
    counter.write_text("1\n")
    code, second = _health(env, None, tmp_path / "r")
    assert code == 1
    assert _flagged(second) == {("ib_link_flaps", "mlx5_4.port1", "FAIL", H)}
    flap = next(r for r in second["results"]
                if (r["check"], r["entity"]) == ("ib_link_flaps", "mlx5_4.port1"))
    assert flap["evidence"]["growth"] == 1
    assert flap["evidence"]["previous_report"] == first["report_id"]


def test_lab_profile_judges_the_simulated_rails(tmp_path: Path) -> None:
    """The lab's platform declares the XE9680 rails its simulated tree has: all pass."""
    code, report = _health(None, "h100-hgx", tmp_path / "r", "sim-h100-hgx")
    assert code == 0
    states = [r for r in report["results"] if r["check"] == "ib_port_state"]
    assert len(states) == 8 and {r["verdict"] for r in report["results"]} == {"PASS"}
