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

import bisect
import re

import pynvml

_NVLINK_VERSION = re.compile(r"^NVML_NVLINK_VERSION_(\d+)_(\d+)$")
#: pynvml's names, sorted (as ``dir`` lists them): listed once for every table below.
_NAMES: list[str] = dir(pynvml)


def _named(prefix: str) -> list[str]:
    """pynvml's names that start with ``prefix``, in order: one slice of the sorted list
    (each table below read all ~1,500 names: ~1 ms of every cron check's start-up)."""
    start = bisect.bisect_left(_NAMES, prefix)
    end = start
    while end < len(_NAMES) and _NAMES[end].startswith(prefix):
        end += 1
    return _NAMES[start:end]


def _nvlink_versions() -> dict[int, tuple[int, int]]:
    """``nvmlNvlinkVersion_t`` value -> (major, minor), read from the constants' names."""
    table: dict[int, tuple[int, int]] = {}
    for name in _named("NVML_NVLINK_VERSION_"):
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
        for name in _named(prefix):
            if name[len(prefix):] in skip:
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

# --- units ------------------------------------------------------------------------------------
# nvml.h: power readings and limits are milliwatts, memory sizes bytes, the PCI id the device id
# in the high 16 bits over the vendor id (0x233010DE: device 0x2330, vendor 0x10DE).

BYTES_PER_MIB = 1024 * 1024


def watts(milliwatts: int | None) -> float | None:
    """nvmlDeviceGetPowerUsage / ...EnforcedPowerLimit / ...DefaultLimit (mW) -> W."""
    return None if milliwatts is None else milliwatts / 1000.0


def mib(size_bytes: int | None) -> int | None:
    """nvmlMemory_t / nvmlProcessInfo_t.usedGpuMemory (bytes) -> whole MiB."""
    return None if size_bytes is None else int(size_bytes) // BYTES_PER_MIB


def pci_device_id(pci_device_id_field: int) -> int:
    """``nvmlPciInfo_t.pciDeviceId`` (device << 16 | vendor) -> the device id alone."""
    return (int(pci_device_id_field) >> 16) & 0xFFFF


# --- field values -----------------------------------------------------------------------------

#: NVML field id of the HBM temperature, in degrees C.
FI_DEV_MEMORY_TEMP: int = pynvml.NVML_FI_DEV_MEMORY_TEMP
#: NVML field id of one NVLink's speed in MB/s (``scopeId`` = the link), or None where this
#: nvidia-ml-py does not define it. nvml.h: 26562 a link on H100 (NVLink 4), 53125 on B200.
FI_DEV_NVLINK_GET_SPEED: int | None = getattr(pynvml, "NVML_FI_DEV_NVLINK_GET_SPEED", None)

#: ``nvmlValueType_t`` -> the ``nvmlValue_t`` union member holding the value.
VALUE_MEMBERS: dict[int, str] = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
}


def field_value(value: object) -> float | None:
    """One ``nvmlFieldValue_t`` as a number: None when its ``nvmlReturn`` is not success or its
    ``valueType`` is one this table does not know (never a guess at the union member)."""
    if getattr(value, "nvmlReturn", pynvml.NVML_SUCCESS) != pynvml.NVML_SUCCESS:
        return None
    member = VALUE_MEMBERS.get(int(getattr(value, "valueType", -1)))
    if member is None:
        return None
    return float(getattr(value.value, member))  # type: ignore[attr-defined]


# --- GPU recovery action -----------------------------------------------------------------------
# Read from nvidia-ml-py's pynvml.py (13.615.71, as installed: lines 453-460 and 805; the copy
# vendored in ray-project/ray python/ray/_private/thirdparty/pynvml/pynvml.py agrees for 0-4):
# the field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (230), read with nvmlDeviceGetFieldValues as
# an unsigned int, holds an nvmlDeviceGpuRecoveryAction_t: NONE 0, GPU_RESET 1, NODE_REBOOT 2,
# DRAIN_P2P 3, DRAIN_AND_RESET 4. Newer bindings disagree past 4 (ray's copy has 5
# GPU_RESET_BUS; 13.615 has 5 RECOVER_IMEX_DOMAIN, 6 BUS_RESET, 7 SYSTEM_REBOOT), so every
# name is read from the installed pynvml, never copied here. An nvidia-ml-py too old to define
# the field (the project allows 12.535) leaves it None: the probe then cannot ask, and says so.

_RECOVERY = "NVML_GPU_RECOVERY_ACTION_"
#: The field id, or None where this nvidia-ml-py does not define it.
FI_DEV_GET_GPU_RECOVERY_ACTION: int | None = getattr(
    pynvml, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", None)
#: ``NVML_GPU_RECOVERY_ACTION_NONE``: the only value that asks nothing of the operator.
RECOVERY_ACTION_NONE: int | None = getattr(pynvml, f"{_RECOVERY}NONE", None)


def _recovery_actions() -> dict[int, str]:
    """``nvmlDeviceGpuRecoveryAction_t`` value -> lower-case name (``1`` -> ``gpu_reset``)."""
    names: dict[int, str] = {}
    for name in _NAMES:
        if name.startswith(_RECOVERY) and isinstance(getattr(pynvml, name), int):
            names.setdefault(int(getattr(pynvml, name)), name[len(_RECOVERY):].lower())
    return dict(sorted(names.items()))


#: Recovery action value -> name, from pynvml's constants (which mirror nvml.h).
RECOVERY_ACTIONS: dict[int, str] = _recovery_actions()
#: Name -> value, for scenario files that set an action.
RECOVERY_ACTION_CODES: dict[str, int] = {name: code for code, name in RECOVERY_ACTIONS.items()}


def recovery_action_name(value: int) -> str:
    """``gpu_reset`` for 1; a value this nvidia-ml-py does not know keeps its number."""
    return RECOVERY_ACTIONS.get(value, f"unknown action {value}")


# --- clock event reasons under load ------------------------------------------------------------

#: The fatal clock event bits by name (``hw_slowdown``, ``hw_thermal_slowdown``,
#: ``hw_power_brake_slowdown``), as the load judge reports them.
CLOCK_EVENT_FATAL_BITS: dict[int, str] = {
    bit: name for bit, name in CLOCK_EVENT_BITS.items() if bit & CLOCK_EVENTS_FATAL}


# --- fabric health mask -----------------------------------------------------------------------
# nvmlGpuFabricInfo_v2+.healthMask packs fields at NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_<F>, each
# WIDTH_<F> wide. The yes/no fields read NOT_SUPPORTED 0, TRUE 1, FALSE 2; for the four below
# TRUE is the bad state. INCORRECT_CONFIGURATION is an enum: NOT_SUPPORTED 0, NONE 1, a named
# misconfiguration otherwise.

_HM = "NVML_GPU_FABRIC_HEALTH_MASK_"


def _health_field(header_name: str) -> tuple[int, int, int]:
    """(shift, width mask, TRUE value) of one yes/no field, from pynvml's constants."""
    return (int(getattr(pynvml, f"{_HM}SHIFT_{header_name}")),
            int(getattr(pynvml, f"{_HM}WIDTH_{header_name}")),
            int(getattr(pynvml, f"{_HM}{header_name}_TRUE")))


#: Our name -> (shift, width mask, TRUE value) of the fabric health fields whose TRUE is bad.
FABRIC_HEALTH_BAD_WHEN_TRUE: dict[str, tuple[int, int, int]] = {
    "degraded_bandwidth": _health_field("DEGRADED_BW"),
    "route_recovery": _health_field("ROUTE_RECOVERY"),
    "route_unhealthy": _health_field("ROUTE_UNHEALTHY"),
    "access_timeout_recovery": _health_field("ACCESS_TIMEOUT_RECOVERY"),
}
FABRIC_INCORRECT_CONFIG_SHIFT: int = getattr(pynvml, f"{_HM}SHIFT_INCORRECT_CONFIGURATION")
FABRIC_INCORRECT_CONFIG_WIDTH: int = getattr(pynvml, f"{_HM}WIDTH_INCORRECT_CONFIGURATION")
#: INCORRECT_CONFIGURATION values that are not a problem: not reported, or "none".
FABRIC_CONFIG_OK: frozenset[int] = frozenset({
    pynvml.NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_NOT_SUPPORTED,
    pynvml.NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_NONE,
})


def _config_names() -> dict[int, str]:
    prefix = f"{_HM}INCORRECT_CONFIGURATION_"
    names: dict[int, str] = {}
    for name in _named(prefix):
        names.setdefault(int(getattr(pynvml, name)), name[len(prefix):].lower())
    return names


#: INCORRECT_CONFIGURATION value -> name (``incorrect_sysguid``, ``insufficient_nvlinks``...).
FABRIC_CONFIG_NAMES: dict[int, str] = _config_names()


def fabric_health_problems(mask: int) -> list[str]:
    """The bad fields of a fabric health mask, by name; empty for a healthy (or unreported)
    mask. An unknown misconfiguration value is named by its number."""
    problems = [name for name, (shift, width, true) in FABRIC_HEALTH_BAD_WHEN_TRUE.items()
                if (mask >> shift) & width == true]
    config = (mask >> FABRIC_INCORRECT_CONFIG_SHIFT) & FABRIC_INCORRECT_CONFIG_WIDTH
    if config not in FABRIC_CONFIG_OK:
        problems.append("incorrect_configuration="
                        + FABRIC_CONFIG_NAMES.get(config, str(config)))
    return problems


# --- return codes -----------------------------------------------------------------------------

def _error_names() -> dict[int, str]:
    """``nvmlReturn_t`` value -> its nvml.h name (``10`` -> ``NVML_ERROR_TIMEOUT``)."""
    names: dict[int, str] = {}
    for name in _named("NVML_ERROR_"):
        if isinstance(getattr(pynvml, name), int):
            names.setdefault(int(getattr(pynvml, name)), name)
    return names


#: ``nvmlReturn_t`` -> name, from pynvml's constants (which mirror nvml.h).
ERROR_NAMES: dict[int, str] = _error_names()
#: The name of every ``nvmlReturn_t`` error, for scenario files that inject one.
ERROR_CODES: dict[str, int] = {name: code for code, name in ERROR_NAMES.items()}


def error_name(code: object) -> str:
    """``NVML_ERROR_TIMEOUT`` for 10; a code nvidia-ml-py does not know keeps its number."""
    if isinstance(code, int) and code in ERROR_NAMES:
        return ERROR_NAMES[code]
    return f"NVML error {code}"


def describe_error(exc: BaseException) -> str:
    """An NVML exception as evidence: the nvml.h name and the driver's own text
    (``NVML_ERROR_TIMEOUT (Timeout)``)."""
    name = error_name(getattr(exc, "value", None))
    text = str(exc).strip()
    return name if not text or text == name else f"{name} ({text})"
