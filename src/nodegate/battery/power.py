"""The battery's power group: PSUs and inlet at any level, draw under load at acceptance.

The node reads its own BMC and the PDU outlets feeding it through the same readers and poller
config as the power poller service (``nodegate.power``). Which outlets feed this node is site
wiring, installed by the pdu_monitor role in ``/etc/nodegate/node.json``::

    {"node": "gpu-b01", "power_config": "/etc/nodegate/power-poller.yaml",
     "outlets": ["b01-pdu-a.outlet1", "b01-pdu-b.outlet1"], "circuits": 2,
     "feeds": [{"pdu": "b01-pdu-a", "amps": 60, "volts": 415, "phases": 3}, ...]}

Under load a ``PowerSampler`` thread polls BMC, PDUs and the NVML GPU power sum together and
keeps the sample with the highest node draw, which the judge then holds to the PSU budget,
the 80% circuit rule and the BMC-vs-GPU consistency check.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodegate.errors import ConfigError, NodegateError
from nodegate.fileio import read_text
from nodegate.judge.common import make
from nodegate.profiles import Profile
from nodegate.results import CheckResult, Severity, Verdict

NODE_FILE = Path("/etc/nodegate/node.json")
STATIC_CHECKS = ("psu_count", "psu_redundancy", "inlet_temp", "bmc_power_sources")
LOAD_CHECKS = ("psu_budget", "circuit_load", "bmc_gpu_power")


@dataclass(frozen=True)
class NodeWiring:
    source: str
    power_config: Path
    outlets: list[str]
    circuits: int
    #: the PDUs feeding the node with their ratings: {pdu, amps, volts, phases}
    feeds: list[dict[str, Any]] = field(default_factory=list)


def load_wiring(path: Path | None = None) -> NodeWiring | None:
    """This node's power wiring, or None when the node has none installed (nothing at the
    path). Something there that is not a readable wiring file (a FIFO, a device, a
    directory) is a ConfigError naming it, never "no wiring": power would go unjudged."""
    from nodegate.paths import config_dir, env_path

    path = path or env_path("NODEGATE_NODE_FILE") or config_dir() / NODE_FILE.name
    if not os.path.lexists(path):
        return None
    try:
        data = json.loads(read_text(path, kind="config"))
        return NodeWiring(source=str(path), power_config=Path(data["power_config"]),
                          outlets=[str(o) for o in data.get("outlets", [])],
                          circuits=int(data.get("circuits", 0)),
                          feeds=[dict(f) for f in data.get("feeds") or []])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"bad node wiring file: {exc}", file=str(path)) from None


def _skip_all(names: tuple[str, ...], reason: str) -> list[CheckResult]:
    return [make(name, "node", Verdict.SKIP, reason=reason) for name in names]


def verified_bmcs(wiring_source: str) -> set[str]:
    """The BMC addresses confirmed at bring-up (empty: never confirmed, or no record)."""
    from nodegate.power.verify import VERIFIED_FILE

    path = Path(wiring_source).with_name(VERIFIED_FILE)
    try:
        data = json.loads(read_text(path, kind="config"))
        return {str(a) for a in data.get("bmcs") or []}
    except (OSError, ValueError, AttributeError, NodegateError):
        return set()


def _never_answered(names: tuple[str, ...], reason: str,
                    **evidence: Any) -> list[CheckResult]:
    """A configured BMC that never answered on this node (its wiring was never confirmed):
    not an outage of something that worked, but a site file that may name the wrong device.
    ERROR, not the infrastructure WARN that would otherwise repeat forever."""
    return [make(name, "node", Verdict.ERROR, reason=reason, infrastructure=True,
                 hint="this BMC never answered here: check the site's bmc.url for this host, "
                      "then redeploy (pdu_monitor runs nodegate power verify)", **evidence)
            for name in names]


def _infrastructure_down(names: tuple[str, ...], reason: str,
                         **evidence: Any) -> list[CheckResult]:
    """A BMC or PDU that does not answer is infrastructure, not the node (docs/verdicts.md,
    rule 4): WARN and alert, so a healthy node is not drained for its management network."""
    return [make(name, "node", Verdict.WARN, severity=Severity.WARNING, reason=reason,
                 infrastructure=True, alert=True,
                 hint="the management network or device does not answer: power is not "
                      "judged until it does", **evidence) for name in names]


def read_devices(wiring: NodeWiring) -> list[Any]:
    from nodegate.power.poller import load_config, poll_once

    return list(asyncio.run(poll_once(load_config(wiring.power_config))))


def judge_static(devices: list[Any], profile: Profile,
                 verified: set[str] | None = None) -> list[CheckResult]:
    """The BMC's static checks. ``verified``: the BMC addresses confirmed at bring-up (None:
    not known, the infrastructure WARN); an unanswering BMC not among them is ERROR."""
    from nodegate.judge.power import (
        check_inlet_temp,
        check_power_sources_agree,
        check_psu_count,
        check_psu_redundancy,
    )

    bmcs = [d for d in devices if d.kind == "bmc"]
    if not bmcs:
        return _skip_all(STATIC_CHECKS, "no BMC in this node's power config")
    bmc = bmcs[0]
    if not bmc.up:
        if verified is not None and bmc.address not in verified:
            return _never_answered(STATIC_CHECKS, f"BMC {bmc.name} unreachable and never "
                                   f"confirmed at bring-up: {bmc.error}", bmc=bmc.address)
        return _infrastructure_down(STATIC_CHECKS, f"BMC {bmc.name} unreachable: {bmc.error}",
                                    bmc=bmc.address)
    data = profile.data
    psus = list(bmc.info.get("psus", []))
    inlet = bmc.value("inlet", "temperature")
    return [
        check_psu_count(psus, data),
        check_psu_redundancy(psus, dict(bmc.info.get("redundancy") or {}), data),
        check_inlet_temp(float(inlet) if isinstance(inlet, (int, float)) else None, data),
        check_power_sources_agree(list(bmc.info.get("power_sources") or []), data),
    ]


def gpu_power_sum_w() -> float | None:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no NVML: the consistency check reports it
        return None
    try:
        total = 0.0
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            total += pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
        return round(total, 1)
    except pynvml.NVMLError:
        return None
    finally:
        pynvml.nvmlShutdown()


@dataclass
class PowerSample:
    t: float
    node_w: float | None
    outlets_w: float | None
    gpu_sum_w: float | None
    min_needed: int | None


@dataclass
class PowerSampler:
    """Polls power every ``interval_s`` in a thread while a load phase runs."""

    wiring: NodeWiring
    interval_s: float = 5.0
    gpu_power: Callable[[], float | None] = field(default=gpu_power_sum_w)
    samples: list[PowerSample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> PowerSampler:
        self._thread = threading.Thread(target=self._run, name="power-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 30)

    def _run(self) -> None:
        start = time.monotonic()
        while not self._stop.is_set():
            try:
                self.samples.append(self._sample(time.monotonic() - start))
            except Exception as exc:  # a sampler must never kill the load phase
                self.errors.append(str(exc))
            self._stop.wait(self.interval_s)

    def _sample(self, t: float) -> PowerSample:
        from nodegate.judge.power import outlet_draw_w

        devices = read_devices(self.wiring)
        bmc = next((d for d in devices if d.kind == "bmc" and d.up), None)
        node_w = bmc.value("node", "power") if bmc else None
        min_needed = (bmc.info.get("redundancy") or {}).get("min_needed") if bmc else None
        pdus = [d for d in devices if d.kind == "pdu" and d.up]
        return PowerSample(
            t=round(t, 2), node_w=float(node_w) if isinstance(node_w, (int, float)) else None,
            outlets_w=outlet_draw_w(pdus, self.wiring.outlets), gpu_sum_w=self.gpu_power(),
            min_needed=min_needed if isinstance(min_needed, int) else None)

    def peak(self) -> PowerSample | None:
        with_power = [s for s in self.samples if s.node_w is not None or s.outlets_w is not None]
        if not with_power:
            return None
        return max(with_power, key=lambda s: max(s.node_w or 0.0, s.outlets_w or 0.0))


def judge_under_load(sampler: PowerSampler, profile: Profile) -> list[CheckResult]:
    from nodegate.judge.power import check_bmc_vs_gpu_power, check_circuit_load, check_psu_budget

    peak = sampler.peak()
    if peak is None:
        reason = "no power reading during the load phase"
        if sampler.errors:
            reason += f": {sampler.errors[-1]}"
        return _infrastructure_down(LOAD_CHECKS, reason)
    data = profile.data
    draw = peak.outlets_w if peak.outlets_w is not None else peak.node_w
    results = [
        check_psu_budget(peak.node_w, data, peak.min_needed),
        check_circuit_load(draw, sampler.wiring.circuits, data,
                           feeds=sampler.wiring.feeds),
        check_bmc_vs_gpu_power(peak.node_w, peak.gpu_sum_w, data),
    ]
    for result in results:
        result.evidence["peak_sample_t_s"] = peak.t
        result.evidence["samples"] = len(sampler.samples)
    return results


def run_static(profile: Profile) -> list[CheckResult]:
    try:
        wiring = load_wiring()
    except ConfigError as exc:  # unmeasured is never a pass, nor a SKIP
        return [make(name, "node", Verdict.ERROR, severity=Severity.CRITICAL,
                     reason=f"power wiring unreadable: {exc}") for name in STATIC_CHECKS]
    if wiring is None:
        return _skip_all(STATIC_CHECKS, "no power wiring on this node (/etc/nodegate/"
                                        "node.json, installed by the pdu_monitor role)")
    return judge_static(read_devices(wiring), profile, verified_bmcs(wiring.source))
