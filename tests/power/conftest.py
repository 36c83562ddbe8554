"""Real servers for the power tests, each on a free 127.0.0.1 port, stopped afterwards.

* snmpsim serving the APC AP8641 recording shipped in snmpsim-data, plus the project's
  hand-shaped Raritan / ServerTech / Geist records (tests/power/data, see docs/power.md);
* Debian's snmpd for SNMP v3 authPriv;
* the project's Redfish BMC emulator (in-process thread) and sushy-tools' fake-driver emulator.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.power.helpers import (
    BMC_PASSWORD,
    COMMUNITY_SECRET,
    HERE,
    V3_AUTH,
    V3_PRIV,
    V3_USER,
    free_port,
)


def apc_recording() -> Path:
    import snmpsim_data

    path = Path(snmpsim_data.__file__).parent / "data" / "UPS" / "apc-8641.snmprec"
    assert path.is_file(), "snmpsim-data no longer ships UPS/apc-8641.snmprec"
    return path


def _wait_udp_agent(port: int, community: str, deadline_s: float, proc: subprocess.Popen[bytes],
                    log: Path) -> None:
    import asyncio

    from nodegate.power.snmp import SnmpSession, SnmpTarget

    async def probe() -> bool:
        target = SnmpTarget("127.0.0.1", port, community=community, timeout_s=0.5, retries=0)
        try:
            async with SnmpSession(target) as s:
                await s.get(["1.3.6.1.2.1.1.1.0"])
            return True
        except Exception:
            return False

    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            pytest.fail(f"SNMP agent exited: {log.read_text()[-2000:]}")
        if asyncio.run(probe()):
            return
        time.sleep(0.3)
    pytest.fail(f"SNMP agent not answering on 127.0.0.1:{port}: {log.read_text()[-2000:]}")


@pytest.fixture(scope="session")
def snmpsim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """snmpsim on 127.0.0.1; community = recording name (apc8641, raritan-px3, ...)."""
    root = tmp_path_factory.mktemp("snmpsim")
    data = root / "data"
    data.mkdir()
    shutil.copy(apc_recording(), data / "apc8641.snmprec")
    for rec in (HERE / "data").glob("*.snmprec"):
        shutil.copy(rec, data / rec.name)
    shutil.copy(HERE / "data" / "raritan-px3.snmprec", data / f"{COMMUNITY_SECRET}.snmprec")
    port = free_port()
    log = root / "snmpsim.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(HERE / "snmpsim_main.py"), f"--data-dir={data}",
             f"--cache-dir={root / 'cache'}", f"--agent-udpv4-endpoint=127.0.0.1:{port}"],
            stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_udp_agent(port, "apc8641", 30, proc, log)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="session")
def snmpd_v3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """Debian's snmpd with one authPriv user (SHA-256/AES-128) serving APC-shaped overrides."""
    snmpd = shutil.which("snmpd") or ("/usr/sbin/snmpd" if Path("/usr/sbin/snmpd").exists()
                                      else None)
    if snmpd is None:
        pytest.skip("snmpd not installed (apt-get install snmpd)")
    root = tmp_path_factory.mktemp("snmpd")
    port = free_port()
    conf = root / "snmpd.conf"
    conf.write_text(
        f"agentAddress udp:127.0.0.1:{port}\n"
        f'createUser {V3_USER} SHA-256 "{V3_AUTH}" AES "{V3_PRIV}"\n'
        f"rouser {V3_USER} priv\n"
        "override 1.3.6.1.4.1.318.1.1.26.4.3.1.5.1 integer 87\n"
        "override 1.3.6.1.4.1.318.1.1.26.6.3.1.5.1 integer 40\n"
        "override 1.3.6.1.4.1.318.1.1.26.6.3.1.6.1 integer 230\n"
    )
    conf.chmod(0o600)
    log = root / "snmpd.log"
    env = {**os.environ, "SNMP_PERSISTENT_DIR": str(root / "persist"), "MIBS": ""}
    proc = subprocess.Popen([snmpd, "-f", "-Lf", str(log), "-C", "-c", str(conf),
                             "-p", str(root / "pid")], env=env)
    try:
        end = time.monotonic() + 15
        while time.monotonic() < end and not (log.exists() and "NET-SNMP" in log.read_text()):
            if proc.poll() is not None:
                pytest.skip(f"snmpd could not start: {log.read_text() if log.exists() else ''}")
            time.sleep(0.2)
        time.sleep(0.3)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def bmc_server() -> Iterator[tuple[int, object]]:
    """The project's Redfish emulator in a thread: (port, BmcState). GPU power is injected."""
    from nodegate_lab.bmc_emulator import BmcState, serve

    state = BmcState(power_source=lambda: 5600.0)
    server = serve(("127.0.0.1", 0), state, "root", BMC_PASSWORD, max_sessions=1)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1]), state
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="session")
def sushy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    exe = Path(sys.executable).parent / "sushy-emulator"
    if not exe.exists():
        pytest.skip("sushy-tools not installed")
    root = tmp_path_factory.mktemp("sushy")
    port = free_port(socket.SOCK_STREAM)
    log = root / "sushy.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([str(exe), "--fake", "-i", "127.0.0.1", "-p", str(port)],
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        end = time.monotonic() + 20
        while time.monotonic() < end:
            if proc.poll() is not None:
                pytest.skip(f"sushy-emulator exited: {log.read_text()[-1000:]}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)
