"""The lab BMC's ``#ComputerSystem.Reset``, the supervisor that restarts the host for it, the
faults a power cycle clears, and nodegate's Redfish power cycle against that BMC."""

from __future__ import annotations

import base64
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodegate.power.bmc import BmcError, parse_bmc_url, power_cycle
from nodegate.sim.runtime import power_cycled
from nodegate_lab.bmc_emulator import RESET_TYPES, BmcState, serve

PASSWORD = "reset-Secret-77ab"
SYSTEM = "/redfish/v1/Systems/System.Embedded.1"
TARGET = f"{SYSTEM}/Actions/ComputerSystem.Reset"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def bmc() -> Iterator[tuple[int, BmcState, list[str]]]:
    """The emulator in a thread with a recording reset handler: (port, state, calls)."""
    calls: list[str] = []
    state = BmcState(power_source=lambda: 0.0, reset_handler=calls.append)
    server = serve(("127.0.0.1", 0), state, "root", PASSWORD, max_sessions=4)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1]), state, calls
    finally:
        server.shutdown()
        server.server_close()


def _request(port: int, method: str, path: str, body: Any = None,
             auth: bool = True) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    headers = {"Content-Type": "application/json"}
    if auth:
        headers["Authorization"] = "Basic " + base64.b64encode(
            f"root:{PASSWORD}".encode()).decode()
    conn.request(method, path, body=None if body is None else json.dumps(body),
                 headers=headers)
    resp = conn.getresponse()
    raw = resp.read()
    conn.close()
    return resp.status, json.loads(raw) if raw else None


def test_the_system_offers_the_reset_action_as_dmtf_lays_it_out(bmc: Any) -> None:
    port, _state, _calls = bmc
    code, root = _request(port, "GET", "/redfish/v1")
    assert code == 200 and root["Systems"] == {"@odata.id": "/redfish/v1/Systems"}
    code, systems = _request(port, "GET", "/redfish/v1/Systems")
    assert code == 200 and systems["Members"] == [{"@odata.id": SYSTEM}]
    code, system = _request(port, "GET", SYSTEM)
    assert code == 200 and system["PowerState"] == "On"
    action = system["Actions"]["#ComputerSystem.Reset"]
    assert action["target"] == TARGET
    assert set(action["ResetType@Redfish.AllowableValues"]) >= {
        "ForceRestart", "PowerCycle", "GracefulRestart", "ForceOff", "On"}


@pytest.mark.parametrize("reset_type", ["ForceRestart", "PowerCycle", "GracefulRestart"])
def test_a_restart_is_accepted_and_handed_to_the_host(bmc: Any, reset_type: str) -> None:
    port, state, calls = bmc
    code, body = _request(port, "POST", TARGET, {"ResetType": reset_type})
    assert (code, body) == (204, None)
    assert calls == [reset_type] and state.resets == [reset_type]
    assert _request(port, "GET", SYSTEM)[1]["PowerState"] == "On"


def test_off_then_on_and_repeats_are_no_ops(bmc: Any) -> None:
    port, state, calls = bmc
    assert _request(port, "POST", TARGET, {"ResetType": "On"})[0] == 204
    assert calls == []  # already on
    assert _request(port, "POST", TARGET, {"ResetType": "ForceOff"})[0] == 204
    assert _request(port, "GET", SYSTEM)[1]["PowerState"] == "Off"
    assert _request(port, "POST", TARGET, {"ResetType": "ForceOff"})[0] == 204
    assert _request(port, "POST", TARGET, {"ResetType": "On"})[0] == 204
    assert calls == ["ForceOff", "On"] and state.power_state == "On"


@pytest.mark.parametrize(("body", "message_id"), [
    ({"ResetType": "Explode"}, "Base.1.8.ActionParameterNotSupported"),
    ({"ResetType": "forcerestart"}, "Base.1.8.ActionParameterNotSupported"),
    ({}, "Base.1.8.ActionParameterMissing"),
])
def test_a_bad_reset_type_is_a_400_with_a_redfish_error(bmc: Any, body: dict[str, str],
                                                        message_id: str) -> None:
    port, _state, calls = bmc
    code, error = _request(port, "POST", TARGET, body)
    assert code == 400
    assert error["error"]["code"] == message_id
    assert error["error"]["@Message.ExtendedInfo"][0]["MessageId"] == message_id
    assert calls == []


def test_a_reset_without_credentials_is_refused(bmc: Any) -> None:
    port, _state, calls = bmc
    code, error = _request(port, "POST", TARGET, {"ResetType": "PowerCycle"}, auth=False)
    assert code == 401 and error["error"]["code"] == "Base.1.8.NoValidSession"
    assert calls == []
    assert _request(port, "POST", f"{SYSTEM}/Actions/Other", {"ResetType": "On"})[0] == 405


def test_a_host_that_does_not_take_it_is_a_500(bmc: Any) -> None:
    port, state, _calls = bmc

    def gone(reset_type: str) -> None:
        raise FileNotFoundError("no supervisor.pid")

    state.reset_handler = gone
    code, error = _request(port, "POST", TARGET, {"ResetType": "PowerCycle"})
    assert code == 500 and error["error"]["code"] == "Base.1.8.InternalError"
    assert state.resets == []


def _target(port: int) -> Any:
    return parse_bmc_url(f"http://root@127.0.0.1:{port}", password="env:RESET_TEST_PW",
                         insecure=True, timeout_s=3.0)


def test_nodegate_power_cycles_through_the_reset_action(bmc: Any,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    port, state, calls = bmc
    monkeypatch.setenv("RESET_TEST_PW", PASSWORD)
    assert power_cycle(_target(port)) == "PowerCycle"
    assert calls == ["PowerCycle"]
    assert state.resets == ["PowerCycle"]
    sessions = _request(port, "GET", "/redfish/v1/SessionService/Sessions")[1]
    assert sessions["Members"] == []  # logged out


def test_without_power_cycle_it_is_force_off_then_on(bmc: Any,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    port, _state, calls = bmc
    monkeypatch.setenv("RESET_TEST_PW", PASSWORD)
    monkeypatch.setattr("nodegate_lab.bmc_emulator.RESET_TYPES",
                        ("On", "ForceOff", "ForceRestart"))
    assert power_cycle(_target(port), off_wait_s=0.01) == "ForceOff, On"
    assert calls == ["ForceOff", "On"]


def test_a_bmc_offering_no_full_power_removal_is_refused(bmc: Any,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    port, _state, calls = bmc
    monkeypatch.setenv("RESET_TEST_PW", PASSWORD)
    monkeypatch.setattr("nodegate_lab.bmc_emulator.RESET_TYPES", ("ForceRestart",))
    with pytest.raises(BmcError, match="neither PowerCycle nor ForceOff and On"):
        power_cycle(_target(port))
    assert calls == []


def test_a_refused_login_names_no_secret(bmc: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    port, _state, calls = bmc
    monkeypatch.setenv("RESET_TEST_PW", "wrong-" + PASSWORD)
    with pytest.raises(BmcError) as raised:
        power_cycle(_target(port))
    assert PASSWORD not in str(raised.value) and calls == []


# --- the faults a power cycle clears --------------------------------------------------------


def test_a_power_cycle_clears_a_gpu_off_the_bus_and_keeps_a_remap_failure() -> None:
    assert power_cycled("h100-hgx+xid79@gpu3") == "h100-hgx"
    assert power_cycled("h100-hgx+fallen-off-bus@gpu1+remap-failure@gpu2") == \
        "h100-hgx+remap-failure@gpu2"
    assert power_cycled("h100-hgx+ecc-dbe@gpu2+nvlink-down@gpu3.link5") == \
        "h100-hgx+ecc-dbe@gpu2+nvlink-down@gpu3.link5"


# --- the supervisor restarts its host for the BMC ---------------------------------------------


def _wait(predicate: Any, what: str, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _boots(host: Path) -> int:
    path = host / "boots"
    return int(path.read_text()) if path.is_file() else 0


@pytest.fixture()
def supervised(tmp_path: Path) -> Iterator[Path]:
    """A supervisor whose 'host' is a sleep (no board, no cgroup): its boots are countable."""
    host = tmp_path / "host"
    host.mkdir()
    (host / "supervisor.json").write_text(json.dumps(
        {"argv": [sys.executable, "-c", "import time; time.sleep(120)"], "board": None}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "lab" / "src"), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "nodegate_lab.supervisor", str(host)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait(lambda: _boots(host) == 1 and (host / "nspawn.pid").is_file(), "first boot")
        yield host
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _guest(host: Path) -> int:
    return int((host / "nspawn.pid").read_text())


def test_the_supervisor_restarts_its_host_on_each_restart_type(supervised: Path) -> None:
    from nodegate_lab.supervisor import request_reset

    host = supervised
    for boots, reset_type in enumerate(("PowerCycle", "ForceRestart", "GracefulRestart"), 2):
        before = _guest(host)
        request_reset(host, reset_type)

        def rebooted(count: int = boots, old: int = before) -> bool:
            return _boots(host) == count and (host / "nspawn.pid").is_file() \
                and _guest(host) != old

        _wait(rebooted, f"boot {boots} after {reset_type}")
        with pytest.raises(ProcessLookupError):
            os.kill(before, 0)  # the old guest is gone, not left running beside the new


def test_force_off_stays_off_until_on(supervised: Path) -> None:
    from nodegate_lab.supervisor import request_reset

    host = supervised
    request_reset(host, "ForceOff")
    _wait(lambda: not (host / "nspawn.pid").exists(), "powered off")
    time.sleep(0.5)
    assert _boots(host) == 1 and (host / "supervisor.pid").is_file()
    request_reset(host, "On")
    _wait(lambda: _boots(host) == 2 and (host / "nspawn.pid").is_file(), "back on")


def test_a_reset_type_the_supervisor_does_not_know_is_refused(tmp_path: Path) -> None:
    from nodegate_lab.supervisor import RESETS, request_reset

    assert set(RESETS) == set(RESET_TYPES)
    with pytest.raises(ValueError, match="unknown ResetType"):
        request_reset(tmp_path, "Nmi")
    with pytest.raises(OSError):
        request_reset(tmp_path, "PowerCycle")  # no supervisor runs for it
