"""The poller service: config validation, one round to a textfile, /metrics, down devices."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from nodegate.errors import ConfigError
from nodegate.power.poller import load_config
from tests.power.helpers import (
    BMC_PASSWORD,
    COMMUNITY_SECRET,
    V3_AUTH,
    V3_PRIV,
    assert_no_secrets,
    free_port,
    run_cli,
)


def _write(path: Path, text: str, mode: int = 0o644) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def _config(tmp: Path, snmpsim: int, bmc_port: int, output: str, pw_file: Path) -> Path:
    dead = free_port()
    return _write(tmp / "poller.yaml", f"""
interval_s: 5
timeout_s: 0.5
retries: 1
output:
  {output}
pdus:
  - name: pdu-a
    url: snmp://127.0.0.1:{snmpsim}
    community: env:PDU_COMMUNITY
    model: raritan-pdu2
  - name: pdu-apc
    url: snmp://127.0.0.1:{snmpsim}?community=file:{tmp / 'apc.community'}
    model: apc-rpdu2
  - name: pdu-dead
    url: snmp://127.0.0.1:{dead}?community=env:PDU_COMMUNITY
    model: apc-rpdu2
bmcs:
  - name: node01-bmc
    url: http://root@127.0.0.1:{bmc_port}
    insecure: true
    password: file:{pw_file}
    max_sessions: 1
""")


@pytest.fixture
def secrets_dir(tmp_path: Path) -> Path:
    _write(tmp_path / "bmc.pw", BMC_PASSWORD + "\n", 0o600)
    _write(tmp_path / "apc.community", "apc8641\n", 0o600)
    return tmp_path


def test_poll_once_textfile_marks_down_device_and_keeps_going(
        snmpsim: int, bmc_server: tuple[int, Any], secrets_dir: Path) -> None:
    prom = secrets_dir / "out" / "nodegate_power.prom"
    cfg = _config(secrets_dir, snmpsim, bmc_server[0], f"textfile: {prom}",
                  secrets_dir / "bmc.pw")
    result = run_cli("power", "poll", "--config", str(cfg), "--once",
                     env={"PDU_COMMUNITY": COMMUNITY_SECRET})
    assert result.returncode == 0, result.stderr
    text = prom.read_text()
    assert 'nodegate_power_device_up{address="snmp://127.0.0.1:' in text
    assert 'device="pdu-dead"' in text
    up = {line.split('device="')[1].split('"')[0]: line.rsplit(" ", 1)[1]
          for line in text.splitlines() if line.startswith("nodegate_power_device_up{")}
    assert up == {"pdu-a": "1.0", "pdu-apc": "1.0", "pdu-dead": "0.0", "node01-bmc": "1.0"}
    assert 'nodegate_power_watts{device="pdu-apc",entity="device",label=""} 1210.0' in text
    assert 'nodegate_power_watts{device="node01-bmc",entity="node",label=""} 6800.0' in text
    assert 'nodegate_power_temperature_celsius{device="node01-bmc",entity="inlet"' in text
    assert "pdu-dead" in result.stderr and "down" in result.stderr
    assert_no_secrets(text, result.stdout, result.stderr, cfg.read_text())
    assert not list(prom.parent.glob("*.tmp*"))  # atomic write left nothing behind


def test_metrics_endpoint_and_sigterm(snmpsim: int, bmc_server: tuple[int, Any],
                                      secrets_dir: Path) -> None:
    port = free_port(socket.SOCK_STREAM)
    cfg = _config(secrets_dir, snmpsim, bmc_server[0], f"listen: 127.0.0.1:{port}",
                  secrets_dir / "bmc.pw")
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from nodegate.cli import main; sys.exit(main())",
         "power", "poll", "--config", str(cfg)],
        env={**os.environ, "PDU_COMMUNITY": COMMUNITY_SECRET},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    body = ""
    try:
        end = time.monotonic() + 30
        while time.monotonic() < end:
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                              timeout=2).read().decode()
                if 'device="node01-bmc"' in body:
                    break
            except OSError:
                pass
            time.sleep(0.3)
        assert 'nodegate_power_device_up{address="snmp://127.0.0.1:' in body
        assert 'nodegate_power_watts{device="pdu-a",entity="device",label=""} 9870.0' in body
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0, out
    assert_no_secrets(body, out, " ".join(str(a) for a in proc.args))  # type: ignore[union-attr]


@pytest.mark.parametrize(("snippet", "message"), [
    ("    password: " + BMC_PASSWORD, "not a literal"),
    ("    password: env:NO_SUCH_VARIABLE_XYZ", "is not set"),
    ("    password: file:{tmp}/open.pw", "too open"),
])
def test_bad_credentials_are_config_errors(tmp_path: Path, snippet: str, message: str) -> None:
    _write(tmp_path / "open.pw", "x-secret-1\n", 0o644)
    cfg = _write(tmp_path / "p.yaml", (
        "output:\n  textfile: /tmp/x.prom\nbmcs:\n  - name: b\n"
        "    url: https://root@127.0.0.1:1\n" + snippet.format(tmp=tmp_path) + "\n"))
    with pytest.raises(ConfigError, match=message) as info:
        load_config(cfg)
    assert BMC_PASSWORD not in str(info.value)


def test_literal_community_and_open_config_refused(tmp_path: Path) -> None:
    literal = _write(tmp_path / "c.yaml", "output:\n  textfile: /tmp/x.prom\npdus:\n"
                     "  - {name: p, url: 'snmp://public@127.0.0.1', model: apc-rpdu2}\n")
    with pytest.raises(ConfigError, match="literal SNMP community"):
        load_config(literal)
    loose = _write(tmp_path / "l.yaml", "output:\n  textfile: /tmp/x.prom\n", 0o666)
    with pytest.raises(ConfigError, match="group/others may write"):
        load_config(loose)
    result = run_cli("power", "poll", "--config", str(literal))
    assert result.returncode == 2 and "pdus[0].url" in result.stderr


def test_v3_in_config(snmpd_v3: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("A_KEY", V3_AUTH)
    monkeypatch.setenv("P_KEY", V3_PRIV)
    cfg = _write(tmp_path / "v3.yaml", (
        f"output:\n  textfile: {tmp_path / 'v3.prom'}\npdus:\n  - name: p\n"
        f"    url: 'snmpv3://nodegate@127.0.0.1:{snmpd_v3}?auth=sha256&auth_key=env:A_KEY"
        "&priv=aes128&priv_key=env:P_KEY'\n    model: apc-rpdu2\n"))
    import asyncio

    from nodegate.power.poller import poll_once

    (dev,) = asyncio.run(poll_once(load_config(cfg)))
    assert dev.up and dev.value("device", "power") == 870.0
    assert dev.address == f"snmpv3://nodegate@127.0.0.1:{snmpd_v3}"


def test_templates_render(tmp_path: Path) -> None:
    import jinja2

    root = Path(__file__).resolve().parents[2] / "templates" / "power"
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(root),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    unit = env.get_template("nodegate-power-poller.service.j2").render(
        pdu_monitor_config="/etc/nodegate/power-poller.yaml",
        pdu_monitor_env_file="/etc/nodegate/power-poller.env",
        pdu_monitor_user="nodegate", pdu_monitor_nodegate_bin="/opt/nodegate/bin/nodegate")
    assert "ExecStart=/opt/nodegate/bin/nodegate power poll --config" in unit
    assert "EnvironmentFile=-/etc/nodegate/power-poller.env" in unit
    conf = env.get_template("power-poller.yaml.j2").render(
        pdu_monitor_interval_s=30, pdu_monitor_timeout_s=2, pdu_monitor_retries=1,
        pdu_monitor_textfile="/var/lib/node_exporter/textfile_collector/nodegate_power.prom",
        pdu_monitor_listen=None,
        pdu_monitor_pdus=[{"name": "pdu-a", "url": "snmp://10.0.0.5:161",
                           "community": "env:PDU_COMMUNITY", "model": "apc-rpdu2"}],
        pdu_monitor_bmcs=[{"name": "node01", "url": "https://root@10.0.1.5",
                           "password": "file:/etc/nodegate/bmc.pw", "ca_bundle": None,
                           "insecure": False}])
    path = _write(tmp_path / "rendered.yaml", conf)
    monkey = {"PDU_COMMUNITY": "c0mmunity"}
    os.environ.update(monkey)
    try:
        _write(tmp_path / "bmc.pw", "pw-123\n", 0o600)
        rendered = path.read_text().replace("/etc/nodegate/bmc.pw", str(tmp_path / "bmc.pw"))
        _write(path, rendered)
        cfg = load_config(path)
    finally:
        for k in monkey:
            os.environ.pop(k)
    assert [n for n, *_ in cfg.pdus] == ["pdu-a"] and [n for n, _ in cfg.bmcs] == ["node01"]


@pytest.mark.parametrize(("line", "key"), [
    ("interval_s: ''", "interval_s"),
    ("interval_s: null", "interval_s"),
    ("timeout_s: .nan", "timeout_s"),
    ("retries: '\u0661'", "retries"),
    ("pdus: 5", "pdus"),
    ("bmcs: {a: 1}", "bmcs"),
])
def test_a_hostile_value_is_a_config_error_naming_its_key(tmp_path: Path, line: str,
                                                          key: str) -> None:
    """Found by tests/fuzz/test_node_configs.py: each was a ValueError or TypeError (an
    internal error, exit 3) before the loader converted values through nodegate.bounds."""
    cfg = _write(tmp_path / "c.yaml", f"output:\n  textfile: /tmp/x.prom\n{line}\n")
    with pytest.raises(ConfigError) as info:
        load_config(cfg)
    assert info.value.key == key and info.value.file == str(cfg)


def test_insecure_written_as_text_is_refused_never_read_as_consent(tmp_path: Path) -> None:
    """bool("no") is True: an opt-out of TLS must be a real boolean (with an http:// url the
    clear-text check refuses it first; here the flag itself is read)."""
    cfg = _write(tmp_path / "c.yaml", "output:\n  textfile: /tmp/x.prom\nbmcs:\n  - name: b\n"
                 "    url: https://root@127.0.0.1:1\n    password: env:NG_BMC\n"
                 "    insecure: 'no'\n")
    with pytest.raises(ConfigError, match="not true or false") as info:
        load_config(cfg)
    assert info.value.key == "bmcs[0].insecure"
