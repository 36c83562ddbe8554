"""PDU readers against real SNMP agents: snmpsim (real APC recording + shaped records), snmpd v3."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import time

import pytest

from nodegate.errors import ConfigError
from nodegate.power.pdu import read_pdu
from nodegate.power.readings import DeviceReading
from nodegate.power.snmp import parse_snmp_url
from tests.power.helpers import (
    COMMUNITY_SECRET,
    V3_AUTH,
    V3_PRIV,
    apc_raw,
    assert_no_secrets,
    run_cli,
)


def _table(stdout: str) -> dict[tuple[str, str], tuple[float, str]]:
    rows = {}
    for line in stdout.splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 6:
            rows[(parts[2], parts[3])] = (float(parts[4]), parts[5])
    return rows


def _snmpget(port: int, community: str, oids: list[str]) -> dict[str, int]:
    out = subprocess.run(["snmpget", "-v2c", "-c", community, "-On", "-Oqv", "-t", "2",
                          f"127.0.0.1:{port}", *oids], capture_output=True, text=True,
                         check=True, timeout=20).stdout
    return dict(zip(oids, (int(v) for v in out.split()), strict=True))


def test_apc_must_show_cli_equals_snmpget_scaled_by_hand(snmpsim: int) -> None:
    """`nodegate power read` on the real AP8641 recording = snmpget, scaled per PowerNet-MIB."""
    result = run_cli("power", "read", "--pdu", f"snmp://apc8641@127.0.0.1:{snmpsim}",
                     "--model", "apc-rpdu2")
    assert result.returncode == 0, result.stderr
    rows = _table(result.stdout)
    oids = {"power": "1.3.6.1.4.1.318.1.1.26.4.3.1.5.1",  # hundredths of kW
            "current": "1.3.6.1.4.1.318.1.1.26.6.3.1.5.1",  # tenths of A
            "voltage": "1.3.6.1.4.1.318.1.1.26.6.3.1.6.1"}  # V
    if shutil.which("snmpget"):
        raw = _snmpget(snmpsim, "apc8641", list(oids.values()))
    else:  # net-snmp missing: the recording itself is the reference
        raw = {oid: apc_raw(oid) for oid in oids.values()}
    assert rows[("device", "power")] == (raw[oids["power"]] / 100 * 1000, "W")
    assert rows[("phase1", "current")] == (raw[oids["current"]] / 10, "A")
    assert rows[("phase1", "voltage")] == (float(raw[oids["voltage"]]), "V")
    # and the figures themselves, from the recording: 1.21 kW, 6.5 A, 201 V
    assert rows[("device", "power")] == (1210.0, "W")
    assert rows[("phase1", "current")] == (6.5, "A")
    assert rows[("phase1", "voltage")] == (201.0, "V")
    assert rows[("device", "energy")] == (1951.6, "kWh")
    assert rows[("bank1", "current")] == (3.8, "A")
    assert rows[("outlet1", "power")] == (163.0, "W")


@pytest.mark.parametrize(("community", "model", "expected"), [
    ("raritan-px3", "raritan-pdu2", {("inlet1", "current"): (15.23, "A"),
                                      ("inlet1", "power_factor"): (0.97, "ratio"),
                                      ("inlet1", "energy"): (123456.789, "kWh"),
                                      ("phase2", "current"): (5.02, "A"),
                                      ("outlet1", "power"): (560.0, "W"),
                                      ("device", "power"): (9870.0, "W")}),
    ("servertech-pro2", "servertech-sentry4", {("cord1", "power"): (8650.0, "W"),
                                                ("cord1", "energy"): (4567.8, "kWh"),
                                                ("line2", "current"): (13.1, "A"),
                                                ("phase1", "voltage"): (230.1, "V"),
                                                ("outlet1", "energy"): (123.456, "kWh"),
                                                ("device", "power"): (8650.0, "W")}),
    ("geist-rpdu", "vertiv-geist", {("phase3", "voltage"): (208.5, "V"),
                                     ("phase1", "current"): (12.1, "A"),
                                     ("outlet2", "power"): (2110.0, "W"),
                                     ("device", "energy"): (98765.432, "kWh"),
                                     ("device", "power"): (7420.0, "W")}),
])
def test_other_mibs_scaled_by_their_units(snmpsim: int, community: str, model: str,
                                          expected: dict[tuple[str, str], tuple[float, str]]
                                          ) -> None:
    target = parse_snmp_url(f"snmp://{community}@127.0.0.1:{snmpsim}",
                            allow_literal_community=True)
    dev = asyncio.run(read_pdu("pdu", target, model))
    assert dev.up, dev.error
    got = {(r.entity, r.quantity): (r.value, r.unit) for r in dev.readings}
    for key, value in expected.items():
        assert got[key] == value, key


def test_not_available_values_are_dropped_not_reported(snmpsim: int) -> None:
    target = parse_snmp_url(f"snmp://servertech-pro2@127.0.0.1:{snmpsim}",
                            allow_literal_community=True)
    dev = asyncio.run(read_pdu("pdu", target, "servertech-sentry4"))
    assert dev.find("outlet3", "power") is None  # -1 in the MIB
    assert dev.find("outlet3", "voltage") is not None


def test_snmpv3_authpriv_against_debian_snmpd(snmpd_v3: int) -> None:
    env = {"PDU_AUTH": V3_AUTH, "PDU_PRIV": V3_PRIV}
    url = (f"snmpv3://nodegate@127.0.0.1:{snmpd_v3}?auth=sha256&auth_key=env:PDU_AUTH"
           "&priv=aes128&priv_key=env:PDU_PRIV")
    result = run_cli("power", "read", "--pdu", url, "--model", "apc-rpdu2", "--json", env=env)
    assert result.returncode == 0, result.stderr
    assert '"value": 870.0' in result.stdout and '"value": 4.0' in result.stdout
    assert_no_secrets(result.stdout, result.stderr)
    wrong = run_cli("power", "read", "--pdu", url, "--model", "apc-rpdu2", "--timeout", "0.5",
                    "--retries", "0", env={**env, "PDU_PRIV": "not-the-key-123"})
    assert wrong.returncode == 3
    assert "DOWN" in wrong.stdout
    assert_no_secrets(wrong.stdout, wrong.stderr)


def test_dead_device_times_out_bounded_and_others_still_read(snmpsim: int) -> None:
    from tests.power.helpers import free_port

    dead = free_port()
    live = parse_snmp_url(f"snmp://apc8641@127.0.0.1:{snmpsim}?timeout=0.5&retries=1",
                          allow_literal_community=True)
    gone = parse_snmp_url(f"snmp://apc8641@127.0.0.1:{dead}?timeout=0.5&retries=1",
                          allow_literal_community=True)

    async def both() -> list[DeviceReading]:
        return list(await asyncio.gather(read_pdu("gone", gone, "apc-rpdu2"),
                                         read_pdu("live", live, "apc-rpdu2")))

    start = time.monotonic()
    down, up = asyncio.run(both())
    assert time.monotonic() - start < 5
    assert up.up and up.value("device", "power") == 1210.0
    assert not down.up
    assert re.search(r"no SNMP response from snmp://127\.0\.0\.1:\d+ within 1 s \(2 tries\)",
                     down.error or "")


def test_community_by_reference_never_printed(snmpsim: int) -> None:
    result = run_cli("power", "read", "--pdu",
                     f"snmp://127.0.0.1:{snmpsim}?community=env:PDU_COMMUNITY",
                     "--model", "raritan-pdu2", env={"PDU_COMMUNITY": COMMUNITY_SECRET})
    assert result.returncode == 0, result.stderr
    assert "9870.0" in result.stdout
    assert_no_secrets(result.stdout, result.stderr)


@pytest.mark.parametrize("url", [
    "snmp://public@10.0.0.1",  # literal community where references are required
    "snmpv3://u@10.0.0.1?auth_key=env:A",  # no priv key: authNoPriv is not allowed
    "snmpv3://u@10.0.0.1?auth_key=hunter2&priv_key=env:P",  # literal key
    "snmp://a:b@10.0.0.1",
    "http://10.0.0.1",
    "snmp://10.0.0.1?community=env:X&timeout=99",
])
def test_bad_urls_are_config_errors(url: str) -> None:
    with pytest.raises(ConfigError):
        parse_snmp_url(url)


def test_unknown_model_is_exit_2() -> None:
    result = run_cli("power", "read", "--pdu", "snmp://c@127.0.0.1:1", "--model", "nope")
    assert result.returncode == 2
    assert "unknown PDU model" in result.stderr
