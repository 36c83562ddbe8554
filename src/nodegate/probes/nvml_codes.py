"""NVML's encodings turned into nodegate's typed values, in one place.

Every number here comes from nvidia-ml-py's own constants (which mirror nvml.h), never from a
copy in our code: a new or renumbered NVML value then changes this table instead of silently
disagreeing with it. Importing pynvml needs no driver, only the Python package.

- ``nvmlDeviceGetNvLinkVersion`` returns ``nvmlNvlinkVersion_t`` (``NVML_NVLINK_VERSION_3_0``
  is 4, ``_4_0`` is 6): an enum, not the NVLink generation the profiles name.
- ``nvmlDeviceGetCurrentClocksEventReasons`` returns a bit mask of
  ``nvmlClocksEventReason*`` (formerly ``nvmlClocksThrottleReason*``).
"""

from __future__ import annotations

import re

import pynvml

_NVLINK_VERSION = re.compile(r"^NVML_NVLINK_VERSION_(\d+)_(\d+)$")


def _nvlink_versions() -> dict[int, tuple[int, int]]:
    """``nvmlNvlinkVersion_t`` value -> (major, minor), read from the constants' names."""
    table: dict[int, tuple[int, int]] = {}
    for name in dir(pynvml):
        match = _NVLINK_VERSION.match(name)
        if match:
            table[int(getattr(pynvml, name))] = (int(match.group(1)), int(match.group(2)))
    return table


#: ``nvmlNvlinkVersion_t`` -> (major, minor); INVALID (0) and values this nvidia-ml-py does
#: not know are absent, so they read as "unknown" (judged ERROR), never as a generation.
NVLINK_VERSIONS: dict[int, tuple[int, int]] = _nvlink_versions()


def nvlink_generation(version_enum: int | None) -> int | None:
    """The NVLink generation (3 for A100, 4 for H100/H200) of an ``nvmlNvlinkVersion_t``.

    NVLink 2.2 and 3.1 are minor revisions of generations 2 and 3. None when the enum is
    unreadable or unknown.
    """
    if version_enum is None:
        return None
    found = NVLINK_VERSIONS.get(int(version_enum))
    return found[0] if found else None


def _camel_to_snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _clock_event_bits() -> dict[int, str]:
    """``nvmlClocksEventReason*`` bit -> snake-case name (``0x40`` -> ``hw_thermal_slowdown``).

    The newer ``Event`` names win; the older ``Throttle`` names add bits only they carry.
    None, All and the deprecated alias UserDefinedClocks are not bits of their own.
    """
    skip = {"None", "All", "UserDefinedClocks"}
    bits: dict[int, str] = {}
    for prefix in ("nvmlClocksEventReason", "nvmlClocksThrottleReason"):
        for name in dir(pynvml):
            if not name.startswith(prefix) or name[len(prefix):] in skip:
                continue
            value = int(getattr(pynvml, name))
            if value and value & (value - 1) == 0:  # one bit set
                bits.setdefault(value, _camel_to_snake(name[len(prefix):]))
    return dict(sorted(bits.items()))


#: Clock event reason bit -> name, as ``nvmlDeviceGetCurrentClocksEventReasons`` reports them.
CLOCK_EVENT_BITS: dict[int, str] = _clock_event_bits()

#: The reasons that mean the board itself is in trouble (hardware slowdown, thermal, brake).
CLOCK_EVENTS_FATAL: int = (pynvml.nvmlClocksThrottleReasonHwSlowdown
                           | pynvml.nvmlClocksThrottleReasonHwThermalSlowdown
                           | pynvml.nvmlClocksThrottleReasonHwPowerBrakeSlowdown)

#: ``nvmlComputeMode_t`` -> the profile's name for it (EXCLUSIVE_THREAD is gone from drivers).
COMPUTE_MODES: dict[int, str] = {
    pynvml.NVML_COMPUTEMODE_DEFAULT: "default",
    pynvml.NVML_COMPUTEMODE_PROHIBITED: "prohibited",
    pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS: "exclusive_process",
}

#: ``nvmlGpuFabricState_t`` -> name.
FABRIC_STATE_NAMES: dict[int, str] = {
    pynvml.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED: "not_supported",
    pynvml.NVML_GPU_FABRIC_STATE_NOT_STARTED: "not_started",
    pynvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS: "in_progress",
    pynvml.NVML_GPU_FABRIC_STATE_COMPLETED: "completed",
}
FABRIC_STATE_COMPLETED: int = pynvml.NVML_GPU_FABRIC_STATE_COMPLETED
