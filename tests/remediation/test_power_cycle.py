"""The POWER_CYCLE rung through the node's BMC: the BMC the power poller is wired to, its
password by reference, Redfish ``ComputerSystem.Reset`` against the lab's emulator; the intent
on disk before the POST, the secret nowhere."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodegate.commands.remediate import bmc_power_cycle
from nodegate.remediation.engine import step
from nodegate.remediation.state import Phase, StateStore
from nodegate_lab.bmc_emulator import BmcState, serve
from tests.remediation.helpers import FakeScheduler, Recorder, board, context, failed, make_report

PASSWORD = "cycle-Secret-3c9e"


@pytest.fixture()
def bmc() -> Iterator[tuple[int, list[str]]]:
    calls: list[str] = []
    state = BmcState(power_source=lambda: 0.0, reset_handler=calls.append)
    server = serve(("127.0.0.1", 0), state, "root", PASSWORD, max_sessions=2)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1]), calls
    finally:
        server.shutdown()
        server.server_close()


def _wiring(tmp_path: Path, port: int, password: str = "env:CYCLE_TEST_PW") -> Path:
    """node.json and the poller config as the pdu_monitor role installs them (0600)."""
    config = tmp_path / "power-poller.yaml"
    config.write_text(f"interval_s: 30\noutput:\n  textfile: {tmp_path / 'power.prom'}\n"
                      "pdus: []\nbmcs:\n  - name: n1-bmc\n"
                      f"    url: \"http://root@127.0.0.1:{port}\"\n    password: {password}\n"
                      "    insecure: true\n")
    config.chmod(0o600)
    node = tmp_path / "node.json"
    node.write_text(json.dumps({"node": "n1", "power_config": str(config), "outlets": [],
                                "circuits": 0}))
    return node


def test_the_wired_bmc_is_power_cycled(bmc: tuple[int, list[str]], tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    port, calls = bmc
    monkeypatch.setenv("CYCLE_TEST_PW", PASSWORD)
    cycle, why_not = bmc_power_cycle(_wiring(tmp_path, port))
    assert cycle is not None and why_not == ""
    cycle()
    assert calls == ["PowerCycle"]
    out = capsys.readouterr()
    assert "ComputerSystem.Reset PowerCycle accepted" in out.out
    assert PASSWORD not in out.out + out.err


def test_no_wiring_or_no_credential_is_no_power_cycle_and_says_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cycle, why_not = bmc_power_cycle(tmp_path / "absent.json")
    assert cycle is None and "no power wiring" in why_not
    monkeypatch.delenv("CYCLE_TEST_PW", raising=False)
    cycle, why_not = bmc_power_cycle(_wiring(tmp_path, 9))
    assert cycle is None and "CYCLE_TEST_PW" in why_not


def test_the_intent_is_on_disk_before_the_post_and_the_outcome_waits_for_the_boot(
        bmc: tuple[int, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    port, calls = bmc
    monkeypatch.setenv("CYCLE_TEST_PW", PASSWORD)
    cycle, _ = bmc_power_cycle(_wiring(tmp_path, port))
    assert cycle is not None
    store = StateStore(tmp_path / "state")
    seen: list[str] = []

    def recorded_then_cycle() -> None:
        seen.append(json.loads(store.path.read_text())["action"]["action"])
        cycle()

    ctx = context(store, FakeScheduler(), Recorder(board()),
                  [make_report(failed("gpu_reachable", "gpu6", "lost"))], tmp_path)
    ctx.runners.power_cycle = recorded_then_cycle
    outcome = step(ctx)
    assert outcome.phase is Phase.REMEDIATING and outcome.step == "acted", outcome
    assert seen == ["power_cycle"] and calls == ["PowerCycle"]
    state = store.load(ctx.node)
    assert state.action is not None and state.action.outcome is None  # the boot settles it
    # the next run in the same boot never posts again
    outcome = step(ctx)
    assert calls == ["PowerCycle"], outcome


def test_without_a_bmc_the_message_says_why(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    ctx = context(store, FakeScheduler(), Recorder(board()),
                  [make_report(failed("gpu_reachable", "gpu6", "lost"))], tmp_path)
    ctx.runners.power_cycle = None
    ctx.runners.no_power_cycle = "no power wiring (node.json) names a BMC here"
    outcome = step(ctx)
    assert outcome.step == "blocked" and int(outcome.code) == 1
    assert "no power wiring (node.json) names a BMC here" in outcome.message


def test_the_rma_manifest_names_the_bmc_as_it_names_itself(
        bmc: tuple[int, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nodegate.commands.remediate import bmc_identity_of

    monkeypatch.setenv("CYCLE_TEST_PW", PASSWORD)
    port, _ = bmc
    found = bmc_identity_of(_wiring(tmp_path, port))
    assert found["address"].endswith(f":{port}") and "error" not in found, found
    assert found["manager"]["ManagerType"] == "BMC" and found["manager"]["Model"]
    assert found["Vendor"] and found["RedfishVersion"]
    assert PASSWORD not in json.dumps(found)
    assert bmc_identity_of(tmp_path / "absent.json") == {
        "error": "no power wiring (node.json, the pdu_monitor role) names a BMC here"}
    down = bmc_identity_of(_wiring(tmp_path, 9))
    assert set(down) == {"address", "error"} and down["address"].endswith(":9"), down
