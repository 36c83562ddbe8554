"""BMC reader against the project's Redfish emulator (both schema generations, TLS, session
cap) and against sushy-tools' fake-driver emulator as a third-party Redfish server."""

from __future__ import annotations

import datetime
import ipaddress
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from nodegate.errors import ConfigError
from nodegate.power.bmc import parse_bmc_url, read_bmc
from tests.power.helpers import BMC_PASSWORD, assert_no_secrets, free_port, run_cli


@pytest.fixture(autouse=True)
def _password_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BMC_PW", BMC_PASSWORD)


def _target(port: int, scheme: str = "http", **kw: Any) -> Any:
    kw.setdefault("insecure", scheme == "http")  # the test BMC speaks plain http
    return parse_bmc_url(f"{scheme}://root@127.0.0.1:{port}", password="env:BMC_PW", **kw)


@pytest.mark.parametrize("schema", ["both", "legacy", "modern"])
def test_node_power_follows_gpu_sum_in_every_schema(bmc_server: tuple[int, Any],
                                                    schema: str) -> None:
    port, state = bmc_server
    state.schema = schema
    dev = read_bmc("bmc", _target(port))
    assert dev.up, dev.error
    assert dev.value("node", "power") == 1200.0 + 5600.0
    src = dev.find("node", "power")
    assert src is not None
    assert ("EnvironmentMetrics" in src.source) == (schema != "legacy")
    assert dev.value("inlet", "temperature") == 24.0
    assert [r.unit for r in dev.readings if r.quantity == "speed"] == ["RPM"] * 4
    assert len(dev.info["psus"]) == 6 and dev.info["redundancy"]["min_needed"] == 3
    assert dev.model == "idrac9" and dev.info["auth"] == "session"
    state.power_source = lambda: 1000.0
    assert read_bmc("bmc", _target(port)).value("node", "power") == 2200.0
    assert not state.__dict__.get("sessions")  # logged out


def test_failed_psu_and_hpe_layout(bmc_server: tuple[int, Any]) -> None:
    port, state = bmc_server
    state.vendor, state.failed_psus = "hpe", {2, 4, 5}
    dev = read_bmc("bmc", _target(port))
    assert dev.model == "ilo6"
    assert [p["health"] for p in dev.info["psus"]].count("Critical") == 3
    assert dev.info["redundancy"]["health"] == "Warning"


@pytest.mark.parametrize("schema", ["legacy", "modern"])
def test_redundancy_state_is_read_and_judged(bmc_server: tuple[int, Any], schema: str) -> None:
    """Six healthy PSUs, but the BMC says its redundancy group is UnavailableOffline."""
    from nodegate.judge.power import check_psu_redundancy

    port, state = bmc_server
    state.schema, state.redundancy_state = schema, "UnavailableOffline"
    dev = read_bmc("bmc", _target(port))
    assert dev.value("psu", "redundancy_state") == "UnavailableOffline"
    profile = {"power": {"psu_count": 6, "psu_redundant": True}}
    result = check_psu_redundancy(dev.info["psus"], dev.info["redundancy"], profile)
    assert result.measured == 6 and result.verdict.value == "FAIL"


def test_wrong_password_is_down_with_clear_error(bmc_server: tuple[int, Any],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    port, _ = bmc_server
    monkeypatch.setenv("BMC_PW", "wrong-password-xyz")
    dev = read_bmc("bmc", _target(port))
    assert not dev.up and "login refused" in (dev.error or "")


def test_session_cap_serialises_reads(bmc_server: tuple[int, Any]) -> None:
    """The emulator allows one session; four concurrent reads capped at one all succeed."""
    port, _ = bmc_server
    target = _target(port, max_sessions=1, timeout_s=10)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: read_bmc("bmc", target), range(4)))
    assert all(d.up for d in results), [d.error for d in results]


def test_unreachable_bmc_is_bounded() -> None:
    start = time.monotonic()
    dev = read_bmc("bmc", _target(free_port(), timeout_s=1, retries=0))
    assert not dev.up and "no Redfish answer" in (dev.error or "")
    assert time.monotonic() - start < 5


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bmc.lab")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp / "bmc.pem", tmp / "bmc.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def test_tls_verified_by_default_and_ca_bundle_accepted(tmp_path: Path) -> None:
    from nodegate_lab.bmc_emulator import BmcState, serve

    cert, key = _self_signed(tmp_path)
    server = serve(("127.0.0.1", 0), BmcState(power_source=lambda: 0.0), "root", BMC_PASSWORD,
                   tls_cert=str(cert), tls_key=str(key))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = int(server.server_address[1])
    try:
        refused = read_bmc("bmc", _target(port, "https", timeout_s=2, retries=0))
        assert not refused.up and "TLS verification failed" in (refused.error or "")
        ok = read_bmc("bmc", _target(port, "https", ca_bundle=str(cert)))
        assert ok.up, ok.error
        assert ok.value("node", "power") == 1200.0
    finally:
        server.shutdown()
        server.server_close()


def test_sushy_tools_thermal_read_power_absent(sushy: int) -> None:
    """sushy-tools (fake driver) has Chassis Thermal but no Power and no sessions: the reader
    falls back to basic auth, reads what is there and reports no node power (not a crash)."""
    dev = read_bmc("sushy", _target(sushy))
    assert dev.up, dev.error
    assert dev.info["auth"] == "basic"
    assert dev.find("node", "power") is None
    assert any(r.quantity in ("temperature", "speed") for r in dev.readings)


def test_cli_bmc_table_and_no_secret_anywhere(bmc_server: tuple[int, Any]) -> None:
    port, _ = bmc_server
    result = run_cli("power", "read", "--bmc", f"http://root@127.0.0.1:{port}", "--insecure",
                     "--bmc-password", "env:BMC_PW", env={"BMC_PW": BMC_PASSWORD})
    assert result.returncode == 0, result.stderr
    assert "node" in result.stdout and "6800.0  W" in result.stdout
    assert_no_secrets(result.stdout, result.stderr)


def test_password_in_url_or_literal_is_refused() -> None:
    with pytest.raises(ConfigError):
        parse_bmc_url(f"https://root:{BMC_PASSWORD}@10.0.0.1", password="env:X")
    with pytest.raises(ConfigError):
        parse_bmc_url("https://root@10.0.0.1", password=BMC_PASSWORD)


def test_emulator_cli_reads_password_from_env_only(tmp_path: Path) -> None:
    import subprocess
    import sys
    import urllib.request

    port = free_port(__import__("socket").SOCK_STREAM)
    proc = subprocess.Popen(
        [sys.executable, "-m", "nodegate_lab.bmc_emulator", "--listen", f"127.0.0.1:{port}",
         "--password-env", "EMU_PW", "--base-power-w", "900"],
        env={**os.environ, "EMU_PW": BMC_PASSWORD, "LD_LIBRARY_PATH": str(tmp_path)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for _ in range(50):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/redfish/v1", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        dev = read_bmc("bmc", _target(port))
        assert dev.up, dev.error
        assert dev.value("node", "power") == 900.0  # no NVML here: base power only
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    assert_no_secrets(out, " ".join(proc.args))  # type: ignore[arg-type]
