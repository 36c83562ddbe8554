"""Telemetry under load: a thread reading NVML for every GPU while the load phases run.

It records per GPU: core and memory temperature, power, SM clock, the clock event
reasons bitmask and the current PCIe generation, each as ``[t, value]`` pairs (seconds
since the run started), plus the static figures the judge needs (slowdown temperature,
enforced power limit). It also marks each simulated GPU as loaded/idle
(``nodegate.sim.runtime``) so a simulated board heats up under our load exactly like a real
one; both are no-ops on real hardware.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nodegate.probes.nvml_codes import FI_DEV_MEMORY_TEMP, field_value, watts

SERIES = ("temp_c", "mem_temp_c", "power_w", "sm_clock_mhz", "clock_event_reasons", "pcie_gen")


def mark_load(indices: list[int], pct: int) -> None:
    """Tell a simulated board these GPUs are busy (pct > 0) or idle (0); no-op otherwise."""
    try:
        from nodegate.sim import runtime
    except ImportError:  # the simulator is not part of every install
        return
    for index in indices:
        with contextlib.suppress(Exception):
            if pct > 0:
                runtime.set_load(index, pct)
            else:
                runtime.clear_load(index)


@dataclass
class GpuStatic:
    slowdown_c: float | None = None
    shutdown_c: float | None = None
    power_limit_w: float | None = None
    sm_max_mhz: float | None = None


@dataclass
class Telemetry:
    """What a sampler collected; ``available`` False with ``reason`` when NVML could not run."""

    available: bool
    reason: str = ""
    hz: float = 0.0
    series: dict[str, dict[str, list[list[float]]]] = field(default_factory=dict)
    static: dict[str, GpuStatic] = field(default_factory=dict)
    windows: list[tuple[str, float, float]] = field(default_factory=list)  # phase, t0, t1
    # (t0, t1) from marking the GPUs busy to marking them idle: the sampler's own view of the
    # load, which holds at least one sample per phase however short the phase
    loaded: list[tuple[float, float]] = field(default_factory=list)

    def samples(self, entity: str, name: str, phases: tuple[str, ...] | None = None
                ) -> list[float]:
        """Values of one series, only those inside the named phases' windows when given."""
        points = self.series.get(entity, {}).get(name, [])
        if phases is None:
            return [v for _, v in points]
        spans = [(a, b) for p, a, b in self.windows if p in phases]
        return [v for t, v in points if any(a <= t <= b for a, b in spans)]

    def samples_loaded(self, entity: str, name: str) -> list[float]:
        """Values of one series sampled while the GPUs were marked busy."""
        points = self.series.get(entity, {}).get(name, [])
        return [v for t, v in points if any(a <= t <= b for a, b in self.loaded)]


class Sampler:
    """Reads NVML at ``hz`` in a daemon thread between ``start`` and ``stop``."""

    def __init__(self, gpu_indices: list[int], hz: float, t0: float | None = None) -> None:
        self.indices = gpu_indices
        self.hz = max(1.0, hz)
        self.t0 = t0 if t0 is not None else time.time()  # wall clock: workers stamp it too
        self.telemetry = Telemetry(available=False, hz=self.hz)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml: Any = None
        self._handles: dict[int, Any] = {}
        self._busy_since: float | None = None

    def start(self) -> Telemetry:
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception as exc:  # no library, no driver, no GPU: the checks SKIP
            self.telemetry.reason = f"NVML unavailable: {exc}"
            return self.telemetry
        self._nvml = pynvml
        try:
            count = pynvml.nvmlDeviceGetCount()
            for index in self.indices:
                if index < count:
                    self._handles[index] = pynvml.nvmlDeviceGetHandleByIndex(index)
        except Exception as exc:
            self.telemetry.reason = f"NVML could not enumerate GPUs: {exc}"
            return self.telemetry
        if not self._handles:
            self.telemetry.reason = "NVML sees none of the GPUs under load"
            return self.telemetry
        self.telemetry.available = True
        for index, handle in self._handles.items():
            self.telemetry.static[f"gpu{index}"] = self._static(handle)
            self.telemetry.series[f"gpu{index}"] = {name: [] for name in SERIES}
        self._thread = threading.Thread(target=self._loop, name="nodegate-telemetry",
                                        daemon=True)
        self._thread.start()
        return self.telemetry

    def now(self) -> float:
        return time.time() - self.t0

    def begin_phase(self, indices: list[int], pct: int = 100) -> None:
        mark_load(indices, pct)
        self._busy_since = self.now()

    def add_window(self, name: str, start_wall: float, end_wall: float) -> None:
        """The span every GPU was busy in a phase (stamped by the workers themselves)."""
        if end_wall >= start_wall:
            self.telemetry.windows.append((name, start_wall - self.t0, end_wall - self.t0))

    def end_phase(self, indices: list[int]) -> None:
        if self.telemetry.available:
            self.sample()  # still busy: the last point of a phase is its hottest in a short run
        if self._busy_since is not None:
            self.telemetry.loaded.append((self._busy_since, self.now()))
            self._busy_since = None
        mark_load(indices, 0)

    def stop(self) -> Telemetry:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
        return self.telemetry

    def _static(self, handle: Any) -> GpuStatic:
        nv = self._nvml
        out = GpuStatic()
        with contextlib.suppress(Exception):
            out.slowdown_c = float(nv.nvmlDeviceGetTemperatureThreshold(
                handle, nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN))
        with contextlib.suppress(Exception):
            out.shutdown_c = float(nv.nvmlDeviceGetTemperatureThreshold(
                handle, nv.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN))
        with contextlib.suppress(Exception):
            out.power_limit_w = watts(nv.nvmlDeviceGetEnforcedPowerLimit(handle))
        with contextlib.suppress(Exception):
            out.sm_max_mhz = float(nv.nvmlDeviceGetMaxClockInfo(handle, nv.NVML_CLOCK_SM))
        return out

    def _read(self, handle: Any) -> dict[str, float]:
        nv = self._nvml
        values: dict[str, float] = {}
        readers: dict[str, Callable[[], Any]] = {
            "temp_c": lambda: nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU),
            "power_w": lambda: watts(nv.nvmlDeviceGetPowerUsage(handle)),
            "sm_clock_mhz": lambda: nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM),
            "clock_event_reasons": lambda: nv.nvmlDeviceGetCurrentClocksEventReasons(handle),
            "mem_temp_c": lambda: _memory_temp(nv, handle),
            "pcie_gen": lambda: nv.nvmlDeviceGetCurrPcieLinkGeneration(handle),
        }
        for name, read in readers.items():
            with contextlib.suppress(Exception):
                value = read()
                if value is not None:
                    values[name] = float(value)
        return values

    def sample(self) -> None:
        t = round(self.now(), 3)
        for index, handle in self._handles.items():
            series = self.telemetry.series[f"gpu{index}"]
            for name, value in self._read(handle).items():
                series[name].append([t, value])

    def _loop(self) -> None:
        period = 1.0 / self.hz
        while not self._stop.is_set():
            begun = time.monotonic()
            self.sample()
            self._stop.wait(max(0.0, period - (time.monotonic() - begun)))


def _memory_temp(nv: Any, handle: Any) -> float | None:
    values = nv.nvmlDeviceGetFieldValues(handle, [FI_DEV_MEMORY_TEMP])  # type: ignore[no-untyped-call,unused-ignore]
    return field_value(values[0])
