"""The battery's power group against the Redfish emulator and snmpsim's real APC recording."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from nodegate.battery.power import (
    PowerSampler,
    judge_static,
    judge_under_load,
    load_wiring,
    read_devices,
)
from nodegate.profiles import resolve_profile
from nodegate.results import Verdict
from tests.power.helpers import BMC_PASSWORD


@pytest.fixture
def wiring(tmp_path: Path, bmc_server: tuple[int, Any], snmpsim: int,
           monkeypatch: pytest.MonkeyPatch) -> Path:
    port, _ = bmc_server
    secret = tmp_path / "bmc.pw"
    secret.write_text(BMC_PASSWORD)
    secret.chmod(0o600)
    config = tmp_path / "power-poller.yaml"
    config.write_text(
        "interval_s: 10\ntimeout_s: 2\nretries: 0\n"
        f"output: {{textfile: {tmp_path}/power.prom}}\n"
        f"pdus:\n  - {{name: pdu-a, url: 'snmp://127.0.0.1:{snmpsim}?community=env:TEST_COMM',"
        " model: apc-rpdu2}\n"
        f"bmcs:\n  - {{name: bmc, url: 'http://root@127.0.0.1:{port}',"
        f" password: 'file:{secret}', insecure: true}}\n")
    node = tmp_path / "node.json"
    node.write_text(json.dumps({"node": "n1", "power_config": str(config),
                                "outlets": ["pdu-a.outlet1", "pdu-a.outlet2"], "circuits": 1}))
    monkeypatch.setenv("TEST_COMM", "apc8641")
    monkeypatch.setenv("NODEGATE_NODE_FILE", str(node))
    return node


def _verdicts(results: list[Any]) -> dict[str, Verdict]:
    return {r.check: r.verdict for r in results}


def test_static_checks_pass_then_catch_psu_and_inlet(wiring: Path,
                                                     bmc_server: tuple[int, Any]) -> None:
    profile = resolve_profile("xe9680-h100")
    node = load_wiring()
    assert node is not None
    assert _verdicts(judge_static(read_devices(node), profile)) == {
        "psu_count": Verdict.PASS, "psu_redundancy": Verdict.PASS, "inlet_temp": Verdict.PASS,
        "bmc_power_sources": Verdict.PASS}
    _, state = bmc_server
    state.failed_psus = {2, 3, 4}  # type: ignore[attr-defined]
    state.inlet_temp_c = 41.0  # type: ignore[attr-defined]
    assert _verdicts(judge_static(read_devices(node), profile)) == {
        "psu_count": Verdict.FAIL, "psu_redundancy": Verdict.FAIL, "inlet_temp": Verdict.FAIL,
        "bmc_power_sources": Verdict.PASS}


def test_under_load_sampler_judges_the_peak(wiring: Path, bmc_server: tuple[int, Any]) -> None:
    profile = resolve_profile("xe9680-h100",
                              host_overrides={"power": {"circuit_amps": 32, "circuit_volts": 230}})
    node = load_wiring()
    assert node is not None
    sampler = PowerSampler(node, interval_s=0.2, gpu_power=lambda: 5600.0).start()
    deadline = time.monotonic() + 30
    while len(sampler.samples) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    sampler.stop()
    results = {r.check: r for r in judge_under_load(sampler, profile)}
    assert len(sampler.samples) >= 2
    assert results["psu_budget"].verdict == Verdict.PASS  # 6800 W of 3 x 2800 W
    assert results["psu_budget"].evidence["node_power_w"] == 6800.0
    assert results["bmc_gpu_power"].verdict == Verdict.PASS
    assert results["circuit_load"].verdict in (Verdict.PASS, Verdict.FAIL)
    assert results["circuit_load"].evidence["circuit_rating_w"] == 32 * 230


def test_bmc_reading_below_gpu_sum_fails(wiring: Path, bmc_server: tuple[int, Any]) -> None:
    _, state = bmc_server
    state.power_source = lambda: 0.0  # type: ignore[attr-defined]
    profile = resolve_profile("xe9680-h100")
    node = load_wiring()
    assert node is not None
    sampler = PowerSampler(node, interval_s=0.2, gpu_power=lambda: 5600.0).start()
    time.sleep(0.8)
    sampler.stop()
    results = {r.check: r for r in judge_under_load(sampler, profile)}
    assert results["bmc_gpu_power"].verdict == Verdict.FAIL


def test_no_wiring_skips_with_reason(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from nodegate.battery.power import run_static

    monkeypatch.setenv("NODEGATE_NODE_FILE", str(tmp_path / "absent.json"))
    results = run_static(resolve_profile("xe9680-h100"))
    assert {r.verdict for r in results} == {Verdict.SKIP}
    assert "node.json" in results[0].evidence["reason"]


def test_a_bmc_that_does_not_answer_warns_as_infrastructure() -> None:
    """docs/verdicts.md rule 4: the management network being down says nothing about the
    node, so it WARNs (with an alert) instead of draining a healthy node as ERROR would."""
    from nodegate.power.readings import DeviceReading

    down = DeviceReading("bmc", "bmc", "redfish", "https://10.0.1.5", up=False,
                         error="connection refused")
    results = judge_static([down], resolve_profile("xe9680-h100"))
    assert results and {r.verdict for r in results} == {Verdict.WARN}
    assert all(r.evidence["infrastructure"] and "connection refused" in r.evidence["reason"]
               for r in results)


def test_no_power_reading_under_load_warns_as_infrastructure(wiring: Path) -> None:
    from nodegate.battery.power import LOAD_CHECKS, judge_under_load

    sampler = PowerSampler(load_wiring(wiring), interval_s=0.2, gpu_power=lambda: 5600.0)
    results = judge_under_load(sampler, resolve_profile("xe9680-h100"))  # never started
    assert {r.check for r in results} == set(LOAD_CHECKS)
    assert {r.verdict for r in results} == {Verdict.WARN}
    assert all(r.evidence["infrastructure"] for r in results)
