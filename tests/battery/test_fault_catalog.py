"""The whole simulator fault catalog through the real stack: sim library -> nvidia-ml-py ->
probes -> judge -> ``nodegate health`` -> JSON report.

Each fault must be caught by the check an engineer would expect, on the entity it was
applied to, with the right verdict and severity, and nothing else may fail or warn.
"""

from __future__ import annotations

import ctypes.util
import json
from pathlib import Path

import pytest

from tests.conftest import run_cli

H, C, W, INFO = "hardware", "critical", "warning", "info"

# fault -> {(check, entity, verdict, severity)}
CATALOG: dict[str, set[tuple[str, str, str, str]]] = {
    "gpu-missing@gpu2": {("gpu_count", "node", "FAIL", H)},
    "xid79@gpu6": {("gpu_reachable", "gpu6", "FAIL", H), ("xid_events", "gpu6", "FAIL", H)},
    # the driver's lost-GPU message without an Xid line is judged like Xid 79
    "fallen-off-bus@gpu5": {("gpu_reachable", "gpu5", "FAIL", H),
                            ("xid_events", "gpu5", "FAIL", H)},
    "xid@gpu1:13": {("xid_events", "gpu1", "WARN", W)},
    # NVIDIA's catalogue: 94 (contained ECC error) is RESTART_APP, so WARN, not FAIL
    "xid@gpu1:94": {("xid_events", "gpu1", "WARN", W)},
    "xid@gpu2:154": {("xid_events", "gpu2", "FAIL", H)},  # recovery action: GPU reset
    "xid@gpu3:109": {("xid_events", "gpu3", "FAIL", H)},  # RESET_GPU
    # NVML's recovery action answers, and the driver logs Xid 154 naming the same action
    "recovery-reset@gpu2": {("gpu_recovery_action", "gpu2", "FAIL", H),
                            ("xid_events", "gpu2", "FAIL", H)},
    "recovery-reboot@gpu7": {("gpu_recovery_action", "gpu7", "FAIL", H),
                             ("xid_events", "gpu7", "FAIL", H)},
    "xid@gpu4:145": {("xid_events", "gpu4", "FAIL", H)},  # NVLink5 workflow
    "nvlink-down@gpu3.link5": {("nvlink_state", "gpu3.link5", "FAIL", H)},
    # up at the right version but at half its speed: only the per-link speed check sees it
    "nvlink-slow@gpu2.link11": {("nvlink_speed", "gpu2.link11", "FAIL", H)},
    "nvlink-errors@gpu4.link7": {("nvlink_recovery_errors", "gpu4.link7", "FAIL", H),
                                 ("nvlink_crc_errors", "gpu4.link7", "WARN", W),
                                 ("nvlink_replay_errors", "gpu4.link7", "WARN", W)},
    "fabric-not-running": {("fabric_state", f"gpu{i}", "FAIL", C) for i in range(8)},
    "fabric-degraded@gpu3": {("fabric_state", "gpu3", "FAIL", C)},
    # FM without NVLSM / ib_umad: every GPU stays In Progress (NVLSM named on nvlsm profiles)
    "nvlsm-missing": {("fabric_state", f"gpu{i}", "FAIL", C) for i in range(8)},
    "ecc-dbe@gpu5": {("ecc_dbe_volatile", "gpu5", "FAIL", H), ("xid_events", "gpu5", "FAIL", H),
                     ("ecc_dbe_aggregate", "gpu5", "WARN", W)},
    # Xid 92 and 63 are IGNORE in NVIDIA's catalogue: the memory checks judge the counters
    "ecc-sbe-storm@gpu2": {("ecc_sbe_volatile", "gpu2", "FAIL", H),
                           ("ecc_sbe_aggregate", "gpu2", "WARN", W)},
    "ecc-off@gpu1": {("ecc_mode", "gpu1", "FAIL", C)},
    "remap-pending@gpu0": {("remap_pending", "gpu0", "FAIL", C)},
    "remap-failure@gpu1": {("remap_failure", "gpu1", "FAIL", H), ("xid_events", "gpu1", "FAIL", H)},
    "pcie-downtrain@gpu2": {("pcie_link", "gpu2", "FAIL", H)},
    "pcie-slow-under-load@gpu4": set(),  # max reads right: seen only under load (standard)
    "pcie-replays@gpu5": {("pcie_replays", "gpu5", "WARN", W)},
    "thermal-slowdown@gpu6": {("clock_events", "gpu6", "FAIL", H),
                              ("idle_temperature", "gpu6", "FAIL", H)},
    "hot-idle@gpu2": {("idle_temperature", "gpu2", "FAIL", H)},
    "power-brake@gpu1": {("clock_events", "gpu1", "FAIL", H)},
    "power-limit-low@gpu4": {("power_limit", "gpu4", "FAIL", C)},
    "persistence-off": {("persistence_mode", f"gpu{i}", "FAIL", C) for i in range(8)},
    "mig-on@gpu3": {("mig_mode", "gpu3", "FAIL", C)},
    "exclusive-process@gpu2": {("compute_mode", "gpu2", "FAIL", C)},
    # xe9680-h100 pins no VBIOS: a split cannot say which side is right, the node fails
    "vbios-mismatch@gpu7": {("vbios_uniform", "node", "FAIL", C)},
    "driver-mismatch": {("driver_version", "node", "FAIL", C)},
    "foreign-process@gpu0": {("foreign_processes", "gpu0", "WARN", INFO)},
    "inforom-corrupt@gpu5": {("inforom_uniform", "gpu5", "FAIL", C)},
    # only visible under load: the quick level must stay green (load checks catch them)
    "cooling-failure@gpu4": set(),
    "clocks-stuck-low@gpu1": set(),
    # NVML down is a result: the node answers nothing about its GPUs
    "nvml-missing": {("gpu_reachable", "node", "ERROR", C)},
    "nvml-hang@gpu3": {("gpu_reachable", "node", "ERROR", C)},
}
#: A short deadline where the fault makes NVML hang (the default is tens of seconds).
NVML_TIMEOUT = {"nvml-hang@gpu3": "2"}

#: Faults that only exist before Ampere (NVML answers NOT_SUPPORTED on later boards), tried on a
#: real Turing capture instead of the H100 board: fault -> its flagged results there
PRE_AMPERE = {"retired-pages@gpu0": {("retired_pages", "gpu0", "FAIL", C)}}
T4_CAPTURE = Path(__file__).parents[1] / "sim" / "data" / "corpus" / "telegraf-tesla-t4.xml"
#: A check that does not apply to the board: the only SKIP a healthy Ampere+ board may show
NOT_ON_AMPERE = "no page retirement on this GPU (Ampere and later remap rows instead"

HEALTHY = [("h100-hgx", "xe9680-h100"), ("h100-hgx", "xd670-h100"),
           ("h100-hgx", "sim-h100-hgx"), ("h200-hgx", "xd670-h200"),
           ("a100-hgx", "hgx-a100-80gb"), ("h200-single", "h200-single"),
           ("b200-hgx", "xe9680l-b200")]


def _health(spec: str, profile: str, tmp_path: Path,
            *extra: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    result = run_cli("sim", "run", spec, "--", "nodegate", "health", "--profile", profile,
                     "--checks", "gpu,log", "--report-dir", str(tmp_path), "--no-textfile",
                     "--quiet", *extra, env={"NODEGATE_LOCK_FILE": str(tmp_path / "lock")})
    assert result.returncode in (0, 1), result.stderr
    report = json.loads((tmp_path / "quick-latest.json").read_text())
    return result.returncode, report


def _flagged(report: dict) -> set[tuple[str, str, str, str]]:  # type: ignore[type-arg]
    return {(r["check"], r["entity"], r["verdict"], r["severity"]) for r in report["results"]
            if r["verdict"] in ("FAIL", "WARN", "ERROR")}


def test_catalog_covers_every_simulator_fault() -> None:
    from nodegate.sim.faults import CATALOG as SIM_FAULTS
    from tests.network.test_network_sim import NETWORK_CATALOG

    tried = {spec.split("@")[0] for spec in (*CATALOG, *PRE_AMPERE, *NETWORK_CATALOG)}
    assert set(SIM_FAULTS) == tried | {"xid"}


@pytest.mark.parametrize("fault", sorted(CATALOG))
def test_fault_is_caught_by_the_expected_check(fault: str, tmp_path: Path) -> None:
    if fault == "nvml-missing" and ctypes.util.find_library("nvidia-ml"):
        pytest.skip("this machine has a real libnvidia-ml: the simulator cannot take it away")
    timeout = NVML_TIMEOUT.get(fault)
    code, report = _health(f"h100-hgx+{fault}", "xe9680-h100", tmp_path,
                           *(("--nvml-timeout", timeout) if timeout else ()))
    assert _flagged(report) == CATALOG[fault]
    failing = any(v in ("FAIL", "ERROR") for _, _, v, _ in CATALOG[fault])
    assert code == (1 if failing else 0)


@pytest.mark.parametrize(("scenario", "profile"), HEALTHY)
def test_healthy_scenario_passes_its_profile(scenario: str, profile: str, tmp_path: Path) -> None:
    code, report = _health(scenario, profile, tmp_path)
    assert code == 0
    # no WARN, and no SKIP but the one check that does not exist on these boards
    others = [r for r in report["results"] if r["verdict"] != "PASS"]
    assert {(r["check"], r["verdict"]) for r in others} <= {("retired_pages", "SKIP")}
    assert all(r["evidence"]["reason"].startswith(NOT_ON_AMPERE) for r in others)


@pytest.mark.parametrize("fault", sorted(PRE_AMPERE))
def test_pre_ampere_fault_is_caught_on_a_turing_board(fault: str, tmp_path: Path) -> None:
    from nodegate.sim.capture import import_capture

    board = tmp_path / "t4.yaml"
    import_capture(T4_CAPTURE, board, name="t4")
    # no profile is written for a T4: judge it as the one-card H200 and look only at the
    # checks the fault is about (the model and memory checks fail, rightly, on a T4)
    _, report = _health(f"{board}+{fault}", "h200-single", tmp_path)
    checks = {check for check, *_ in PRE_AMPERE[fault]}
    assert {f for f in _flagged(report) if f[0] in checks} == PRE_AMPERE[fault]
    healthy_dir = tmp_path / "healthy"
    healthy_dir.mkdir()
    _, healthy = _health(str(board), "h200-single", healthy_dir)
    assert not {f for f in _flagged(healthy) if f[0] in checks}
    assert {(r["check"], r["verdict"]) for r in healthy["results"] if r["check"] in checks} == {
        ("retired_pages", "PASS")}


def test_composed_faults(tmp_path: Path) -> None:
    _, report = _health("h100-hgx+nvlink-down@gpu3.link5+xid79@gpu6", "xe9680-h100", tmp_path)
    assert _flagged(report) == CATALOG["nvlink-down@gpu3.link5"] | CATALOG["xid79@gpu6"]


def test_nvlsm_missing_names_nvlsm_where_the_profile_needs_it(tmp_path: Path) -> None:
    """On an NVLink 5 board whose profile declares ``driver.nvlsm`` every GPU's fabric FAIL
    names NVLSM as the likely cause; on an H100 profile (no NVLSM there) none does."""
    blackwell, hopper = tmp_path / "b200", tmp_path / "h100"
    blackwell.mkdir()
    hopper.mkdir()
    code, report = _health("b200-hgx+nvlsm-missing", "xe9680l-b200", blackwell)
    assert code == 1
    assert _flagged(report) == CATALOG["nvlsm-missing"]
    fabric = [r for r in report["results"] if r["check"] == "fabric_state"]
    assert len(fabric) == 8
    assert all("NVLSM" in r["evidence"]["message"] and "ib_umad" in r["evidence"]["message"]
               and r["measured"].startswith("in_progress") for r in fabric)
    _, report = _health("h100-hgx+nvlsm-missing", "xe9680-h100", hopper)
    assert not any("message" in r["evidence"] for r in report["results"]
                   if r["check"] == "fabric_state")
