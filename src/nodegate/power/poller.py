"""``nodegate power poll``: read every configured PDU and BMC at an interval, export Prometheus.

A device that is down is exported as ``nodegate_power_device_up 0`` with no readings and the
loop goes on; only a bad config stops the service (exit 2, before the first poll).
Config format: docs/power.md. Credentials appear in the config only as references.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodegate.bounds import digits, parse_number
from nodegate.errors import ConfigError
from nodegate.fileio import atomic_write_text
from nodegate.power.bmc import BmcTarget, parse_bmc_url, read_bmc
from nodegate.power.bmc import check_refs as check_bmc_refs
from nodegate.power.credentials import redact
from nodegate.power.pdu import check_model, read_pdu
from nodegate.power.readings import DeviceReading
from nodegate.power.snmp import SnmpTarget, parse_snmp_url
from nodegate.power.snmp import check_refs as check_snmp_refs
from nodegate.secret_refs import reject_literal_secrets

LOG = logging.getLogger("nodegate.power.poller")

#: quantity -> (metric name, help). Units are in the names, Prometheus style.
METRICS: dict[str, tuple[str, str]] = {
    "power": ("nodegate_power_watts", "Active power, W"),
    "peak_power": ("nodegate_power_peak_watts", "Peak active power since reset, W"),
    "apparent_power": ("nodegate_power_apparent_voltamperes", "Apparent power, VA"),
    "power_factor": ("nodegate_power_factor_ratio", "Power factor"),
    "current": ("nodegate_power_current_amperes", "RMS current, A"),
    "voltage": ("nodegate_power_voltage_volts", "RMS voltage, V"),
    "energy": ("nodegate_power_energy_kilowatthours", "Energy since reset, kWh"),
    "frequency": ("nodegate_power_frequency_hertz", "Line frequency, Hz"),
    "temperature": ("nodegate_power_temperature_celsius", "Temperature, C"),
    "capacity": ("nodegate_power_psu_capacity_watts", "PSU rated capacity, W"),
    "input_power": ("nodegate_power_psu_input_watts", "PSU input power, W"),
}
KNOWN_KEYS = {"interval_s", "timeout_s", "retries", "output", "pdus", "bmcs"}


@dataclass
class PollerConfig:
    interval_s: float
    pdus: list[tuple[str, SnmpTarget, str]] = field(default_factory=list)
    bmcs: list[tuple[str, BmcTarget]] = field(default_factory=list)
    textfile: Path | None = None
    listen: tuple[str, int] | None = None


def load_config(path: Path) -> PollerConfig:
    """Parse and validate the poller YAML; every mistake is a ConfigError naming file and key."""
    f = str(path)
    data = _read_mapping(path)
    interval = _number(data.get("interval_s", 30), float, 1, 3600, key="interval_s", f=f)
    timeout = _number(data.get("timeout_s", 2), float, 0, 30, key="timeout_s", f=f,
                      low_open=True)
    retries = int(_number(data.get("retries", 1), int, 0, 5, key="retries", f=f))
    if not 1 <= interval <= 3600:
        raise ConfigError("interval_s must be within 1..3600", file=f, key="interval_s")
    if timeout * (retries + 1) >= interval:
        raise ConfigError("timeout_s x (retries + 1) must be below interval_s", file=f,
                          key="timeout_s")
    cfg = PollerConfig(interval_s=interval)
    cfg.textfile, cfg.listen = _output(data.get("output") or {}, f)
    names: set[str] = set()
    for i, item in enumerate(data.get("pdus") or []):
        name, target, model = _pdu(item, f"pdus[{i}]", f, timeout, retries)
        cfg.pdus.append((_unique(name, names, f, f"pdus[{i}]"), target, model))
    for i, item in enumerate(data.get("bmcs") or []):
        name, target_b = _bmc(item, f"bmcs[{i}]", f, timeout, retries)
        cfg.bmcs.append((_unique(name, names, f, f"bmcs[{i}]"), target_b))
    if not cfg.pdus and not cfg.bmcs:
        raise ConfigError("no pdus and no bmcs to poll", file=f)
    return cfg


def _number(value: Any, kind: type[float] | type[int], low: float, high: float, *,
            key: str, f: str, low_open: bool = False) -> float:
    """A YAML number (or number text) through the one bounded converter (nodegate.bounds):
    ASCII digits, finite, within the range (the CLI's for --timeout and --retries)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ConfigError(f"must be {'an integer' if kind is int else 'a number'}", file=f,
                          key=key)
    return parse_number(str(value), kind, low=low, high=high, low_open=low_open, key=key,
                        file=f)


def _read_mapping(path: Path) -> dict[str, Any]:
    """The config's top-level mapping, refused when others may write the file, when it holds a
    literal secret (checked before anything reads it: no literal reaches a log) or an unknown
    key."""
    from nodegate.yamlio import load_yaml

    f = str(path)
    try:
        info = path.stat()
    except OSError as exc:
        raise ConfigError(f"cannot read poller config: {exc.strerror}", file=f) from exc
    if stat.S_IMODE(info.st_mode) & 0o022:
        raise ConfigError(f"mode {stat.S_IMODE(info.st_mode):04o}: group/others may write it; "
                          "chmod 644 (or 600)", file=f)
    data = load_yaml(path, kind="poller") or {}
    if not isinstance(data, dict):
        raise ConfigError("top level must be a mapping", file=f)
    reject_literal_secrets(data, file=f)
    unknown = set(data) - KNOWN_KEYS
    if unknown:
        raise ConfigError(f"unknown key(s) {', '.join(sorted(unknown))}", file=f)
    return data


def _output(out: Any, f: str) -> tuple[Path | None, tuple[str, int] | None]:
    """``output``: a node_exporter textfile path, a HOST:PORT to serve on, or both."""
    if not isinstance(out, dict) or not (out.get("textfile") or out.get("listen")):
        raise ConfigError("output needs textfile: PATH or listen: HOST:PORT", file=f,
                          key="output")
    textfile: Path | None = None
    listen: tuple[str, int] | None = None
    if out.get("textfile"):
        textfile = Path(str(out["textfile"]))
        if not textfile.name.endswith(".prom"):
            raise ConfigError("textfile must end in .prom (node_exporter reads only those)",
                              file=f, key="output.textfile")
    if out.get("listen"):
        host, _, port = str(out["listen"]).rpartition(":")
        number = digits(port, max_chars=5)
        if not host or number is None or not 0 < number < 65536:
            raise ConfigError("listen must be HOST:PORT", file=f, key="output.listen")
        listen = (host, number)
    return textfile, listen


def _pdu(item: Any, key: str, f: str, timeout: float,
         retries: int) -> tuple[str, SnmpTarget, str]:
    """One ``pdus`` entry: (name, SNMP target with the poll's limits, model)."""
    if not isinstance(item, dict) or not {"name", "url", "model"} <= set(item):
        raise ConfigError("each PDU needs name, url, model", file=f, key=key)
    extra = set(item) - {"name", "url", "model", "community"}
    if extra:
        raise ConfigError(f"unknown key(s) {', '.join(sorted(extra))}", file=f, key=key)
    url = str(item["url"])
    if "community" in item:  # community by reference as its own key
        sep = "&" if "?" in url else "?"
        url = f"{url}{sep}community={item['community']}"
    target = parse_snmp_url(url, key=f"{key}.url", file=f).with_limits(timeout, retries)
    check_snmp_refs(target, key=f"{key}.url")
    check_model(str(item["model"]), key=f"{key}.model", file=f)
    return str(item["name"]), target, str(item["model"])


def _bmc(item: Any, key: str, f: str, timeout: float, retries: int) -> tuple[str, BmcTarget]:
    """One ``bmcs`` entry: (name, Redfish target); the password must be a reference."""
    if not isinstance(item, dict) or not {"name", "url", "password"} <= set(item):
        raise ConfigError("each BMC needs name, url, password (a reference)", file=f, key=key)
    extra = set(item) - {"name", "url", "password", "ca_bundle", "insecure", "max_sessions"}
    if extra:
        raise ConfigError(f"unknown key(s) {', '.join(sorted(extra))}", file=f, key=key)
    if not isinstance(item.get("insecure", False), bool):
        raise ConfigError("insecure must be true or false (unquoted)", file=f,
                          key=f"{key}.insecure")
    ca = item.get("ca_bundle")
    if ca is not None and not Path(str(ca)).is_file():
        raise ConfigError(f"CA bundle {ca} does not exist", file=f, key=f"{key}.ca_bundle")
    target = parse_bmc_url(
        str(item["url"]), password=str(item["password"]), ca_bundle=ca,
        insecure=bool(item.get("insecure", False)), timeout_s=max(timeout, 2.0),
        retries=retries,
        max_sessions=int(_number(item.get("max_sessions", 2), int, 1, 64,
                                 key=f"{key}.max_sessions", f=f)),
        key=key, file=f)
    check_bmc_refs(target, key=f"{key}.password")
    return str(item["name"]), target


def _unique(name: str, seen: set[str], file: str, key: str) -> str:
    if name in seen:
        raise ConfigError(f"duplicate device name {name!r}", file=file, key=key)
    seen.add(name)
    return name


async def poll_once(cfg: PollerConfig) -> list[DeviceReading]:
    """One round over every device, concurrently; BMC reads run in threads (sync library)."""
    tasks: list[Any] = [read_pdu(name, target, model) for name, target, model in cfg.pdus]
    tasks += [asyncio.to_thread(read_bmc, name, target) for name, target in cfg.bmcs]
    return list(await asyncio.gather(*tasks))


class Snapshot:
    """The latest round, rendered as metric families on demand (for /metrics and textfile)."""

    def __init__(self) -> None:
        self.devices: list[DeviceReading] = []
        self.timestamp = 0.0

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        base = ["device", "kind", "model", "address"]
        up = GaugeMetricFamily("nodegate_power_device_up", "1 if the last poll read the device",
                               labels=base)
        took = GaugeMetricFamily("nodegate_power_poll_duration_seconds",
                                 "Time the last read of the device took", labels=base)
        fams: dict[str, Any] = {}
        health = GaugeMetricFamily("nodegate_power_health_ok",
                                   "1 if the BMC reports Health OK (PSUs, redundancy)",
                                   labels=["device", "entity", "label"])
        fan = GaugeMetricFamily("nodegate_power_fan_speed", "Fan speed in the unit label",
                                labels=["device", "entity", "label", "unit"])
        for dev in self.devices:
            labels = [dev.name, dev.kind, dev.model, dev.address]
            up.add_metric(labels, 1.0 if dev.up else 0.0)
            took.add_metric(labels, round(dev.elapsed_s, 3))
            for r in dev.readings:
                if r.quantity in ("health", "redundancy_health"):
                    if r.value == "Absent":  # an empty bay has no health; psu_count judges it
                        continue
                    ok = 1.0 if r.value == "OK" else 0.0
                    health.add_metric([dev.name, r.entity, r.label], ok)
                elif r.quantity == "speed" and isinstance(r.value, float):
                    fan.add_metric([dev.name, r.entity, r.label, r.unit], r.value)
                elif r.quantity in METRICS and isinstance(r.value, (int, float)):
                    name, help_text = METRICS[r.quantity]
                    fam = fams.get(name)
                    if fam is None:
                        fam = fams[name] = GaugeMetricFamily(
                            name, help_text, labels=["device", "entity", "label"])
                    fam.add_metric([dev.name, r.entity, r.label], float(r.value))
        last = GaugeMetricFamily("nodegate_power_last_poll_timestamp_seconds",
                                 "Unix time the last poll round finished")
        last.add_metric([], self.timestamp)
        yield from (up, took, *fams.values(), health, fan, last)


def write_textfile(path: Path, snapshot: Snapshot) -> None:
    """Atomic: prometheus_client writes a temp file beside it and renames it over the old one."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(snapshot)
    atomic_write_text(path, generate_latest(registry).decode("utf-8"), mode=0o644)


async def run(cfg: PollerConfig, *, once: bool = False) -> int:
    """The service loop. SIGTERM/SIGINT end it after the current round."""
    snapshot = Snapshot()
    server: Any = None
    if cfg.listen:
        from prometheus_client import CollectorRegistry, start_http_server

        registry = CollectorRegistry(auto_describe=False)
        registry.register(snapshot)
        server, _thread = start_http_server(cfg.listen[1], addr=cfg.listen[0], registry=registry)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread
            loop.add_signal_handler(sig, stop.set)
    try:
        while True:
            start = time.monotonic()
            snapshot.devices = await poll_once(cfg)
            snapshot.timestamp = time.time()
            down = [d for d in snapshot.devices if not d.up]
            for d in down:
                LOG.warning("%s (%s) down: %s", d.name, d.address, redact(d.error or ""))
            if cfg.textfile:
                write_textfile(cfg.textfile, snapshot)
            LOG.info("polled %d devices (%d down) in %.2f s", len(snapshot.devices), len(down),
                     time.monotonic() - start)
            if once:
                return 0
            try:
                left = max(0.0, cfg.interval_s - (time.monotonic() - start))
                await asyncio.wait_for(stop.wait(), timeout=left)
                return 0
            except asyncio.TimeoutError:
                continue
    finally:
        if server is not None:
            server.shutdown()
