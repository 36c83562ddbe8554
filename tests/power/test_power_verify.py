"""The power wiring verified at bring-up: a wrong BMC address fails the host, and a
BMC that never answered on a node is ERROR in the power checks, not a WARN forever.

The BMC is the project's Redfish emulator (tests/power/conftest.py's ``bmc_server``), its
ComputerSystem naming the host it powers as a real BMC reports the OS's host name."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from nodegate.battery.power import STATIC_CHECKS, judge_static, verified_bmcs
from nodegate.power.bmc import BmcError, bmc_systems, parse_bmc_url
from nodegate.power.readings import DeviceReading
from nodegate.power.verify import exit_code, judge_bmc, judge_pdu, record_verified
from nodegate.profiles import resolve_profile
from nodegate.results import Verdict
from tests.power.helpers import BMC_PASSWORD, free_port


@pytest.fixture(autouse=True)
def _password_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BMC_PW", BMC_PASSWORD)


def _target(port: int) -> Any:
    return parse_bmc_url(f"http://root@127.0.0.1:{port}", password="env:BMC_PW",
                         insecure=True, timeout_s=0.5, retries=0)


def test_the_bmc_of_this_host_is_confirmed(bmc_server: tuple[int, Any]) -> None:
    port, state = bmc_server
    state.host_name = "node1.lab.example"
    systems = bmc_systems(_target(port))
    assert systems[0]["HostName"] == "node1.lab.example"
    finding = judge_bmc("node1-bmc", systems, ["node1"])
    assert (finding.state, finding.message) == ("ok", "node1-bmc: manages node1 (HostName)")


def test_another_hosts_bmc_is_a_wrong_address(bmc_server: tuple[int, Any]) -> None:
    port, state = bmc_server
    state.host_name = "node1"
    finding = judge_bmc("node2-bmc", bmc_systems(_target(port)), ["node2", "gpu-b02"])
    assert finding.state == "wrong"
    assert "manages HostName node1, not node2" in finding.message
    assert exit_code([finding]) == 1


def test_a_bmc_that_does_not_answer_is_down() -> None:
    with pytest.raises(BmcError, match="no Redfish answer"):
        bmc_systems(_target(free_port(socket.SOCK_STREAM)))


def test_serial_and_nameless_systems() -> None:
    systems = [{"Id": "1", "SerialNumber": "CN7475"}]
    assert judge_bmc("b", systems, ["n1"], serial="cn7475").state == "ok"
    assert judge_bmc("b", systems, ["n1"], serial="XX").state == "wrong"
    unknown = judge_bmc("b", [{"Id": "1"}], ["n1"])
    assert unknown.state == "unknown" and exit_code([unknown]) == 0


def test_a_pdu_must_answer_and_have_the_sites_outlets() -> None:
    assert judge_pdu("pdu", False, "timeout", set(), [1]).state == "down"
    assert judge_pdu("pdu", True, None, {"outlet1", "outlet2", "total"}, [2]).state == "ok"
    lacking = judge_pdu("pdu", True, None, {"outlet1", "outlet2"}, [7])
    assert lacking.state == "wrong" and "has no outlet 7" in lacking.message
    assert exit_code([lacking, judge_pdu("p2", False, None, set(), [])]) == 3


def test_a_bmc_never_confirmed_is_error_and_a_confirmed_one_warns(tmp_path: Path) -> None:
    node_file = tmp_path / "node.json"
    down = DeviceReading("bmc", "bmc", "redfish", "https://10.0.1.5", up=False,
                         error="no Redfish answer")
    profile = resolve_profile("xe9680-h100")
    never = judge_static([down], profile, verified_bmcs(str(node_file)))
    assert {r.check for r in never} == set(STATIC_CHECKS)
    assert {r.verdict for r in never} == {Verdict.ERROR}
    assert "never confirmed at bring-up" in never[0].evidence["reason"]
    record_verified(node_file, ["https://10.0.1.5"])
    assert json.loads((tmp_path / "power-verified.json").read_text())["bmcs"] == \
        ["https://10.0.1.5"]
    outage = judge_static([down], profile, verified_bmcs(str(node_file)))
    assert {r.verdict for r in outage} == {Verdict.WARN}  # it worked: an outage, rule 4
