"""The floor for ``nodegate health --checks gpu,log``: a plain pynvml script, no nodegate.

It makes the NVML calls nodegate's board read makes for those groups (the same functions
with the same arguments, every GPU, NVLink error counters included) and reads the kernel log
the log checks read, then prints one line. ``bench/health_speed.py`` times it beside the real
command and checks, before timing, that both call the same NVML functions as often.

    nodegate sim run h100-hgx -- python bench/plain_nvml_read.py
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

#: NVLink link numbers probed per GPU (nodegate's ``probes.nvml.MAX_LINKS_PROBED``).
LINKS = 18


def read_all(nvml: Any) -> int:
    """Every field, each read on its own (one failing read loses that field only);
    returns how many reads answered."""
    answered = 0

    def read(fn: Callable[..., Any], *args: Any) -> Any:
        nonlocal answered
        try:
            value = fn(*args)
        except nvml.NVMLError:
            return None
        answered += 1
        return value

    nvml.nvmlInit()
    try:
        read(nvml.nvmlSystemGetDriverVersion)
        read(nvml.nvmlSystemGetNVMLVersion)
        read(nvml.nvmlSystemGetCudaDriverVersion)
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = read(nvml.nvmlDeviceGetHandleByIndex, index)
            if handle is not None:
                _read_gpu(nvml, read, handle)
    finally:
        nvml.nvmlShutdown()
    return answered


def _read_gpu(nvml: Any, read: Callable[..., Any], h: Any) -> None:
    for fn in (nvml.nvmlDeviceGetName, nvml.nvmlDeviceGetUUID, nvml.nvmlDeviceGetSerial,
               nvml.nvmlDeviceGetPciInfo, nvml.nvmlDeviceGetVbiosVersion,
               nvml.nvmlDeviceGetBoardPartNumber, nvml.nvmlDeviceGetInforomImageVersion):
        read(fn, h)
    read(nvml.nvmlDeviceGetInforomVersion, h, nvml.NVML_INFOROM_ECC)
    read(nvml.nvmlDeviceValidateInforom, h)
    read(nvml.nvmlDeviceGetMemoryInfo, h)
    read(nvml.nvmlDeviceGetTemperature, h, nvml.NVML_TEMPERATURE_GPU)
    for threshold in (nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN,
                      nvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN):
        read(nvml.nvmlDeviceGetTemperatureThreshold, h, threshold)
    for fn in (nvml.nvmlDeviceGetPowerUsage, nvml.nvmlDeviceGetEnforcedPowerLimit,
               nvml.nvmlDeviceGetPowerManagementDefaultLimit):
        read(fn, h)
    read(nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_SM)
    read(nvml.nvmlDeviceGetMaxClockInfo, h, nvml.NVML_CLOCK_SM)
    read(getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
         or nvml.nvmlDeviceGetCurrentClocksThrottleReasons, h)
    for fn in (nvml.nvmlDeviceGetCurrPcieLinkGeneration, nvml.nvmlDeviceGetMaxPcieLinkGeneration,
               nvml.nvmlDeviceGetGpuMaxPcieLinkGeneration, nvml.nvmlDeviceGetCurrPcieLinkWidth,
               nvml.nvmlDeviceGetMaxPcieLinkWidth, nvml.nvmlDeviceGetPcieReplayCounter,
               nvml.nvmlDeviceGetEccMode):
        read(fn, h)
    for kind in (nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED):
        for counter in (nvml.NVML_VOLATILE_ECC, nvml.NVML_AGGREGATE_ECC):
            read(nvml.nvmlDeviceGetTotalEccErrors, h, kind, counter)
    read(nvml.nvmlDeviceGetRemappedRows, h)
    for cause in (nvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
                  nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR):
        read(nvml.nvmlDeviceGetRetiredPages, h, cause)
    for fn in (nvml.nvmlDeviceGetRetiredPagesPendingStatus, nvml.nvmlDeviceGetPersistenceMode,
               nvml.nvmlDeviceGetMigMode, nvml.nvmlDeviceGetComputeMode,
               nvml.nvmlDeviceGetUtilizationRates):
        read(fn, h)
    fabric = nvml.c_nvmlGpuFabricInfo_v2_t()
    read(nvml.nvmlDeviceGetGpuFabricInfoV, h, nvml.byref(fabric))
    for proc in read(nvml.nvmlDeviceGetComputeRunningProcesses, h) or []:
        read(nvml.nvmlSystemGetProcessName, proc.pid)
    _read_recovery_action(nvml, read, h)
    _read_nvlinks(nvml, read, h)


def _read_recovery_action(nvml: Any, read: Callable[..., Any], h: Any) -> None:
    """The driver's recovery action: one field value (pynvml's name for field 230)."""
    recovery = getattr(nvml, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", None)
    if recovery is not None:
        read(nvml.nvmlDeviceGetFieldValues, h, [recovery])


def _read_nvlinks(nvml: Any, read: Callable[..., Any], h: Any) -> None:
    active = []
    for link in range(LINKS):
        state = read(nvml.nvmlDeviceGetNvLinkState, h, link)
        if state is None:
            continue
        if state == nvml.NVML_FEATURE_ENABLED:
            active.append(link)
        read(nvml.nvmlDeviceGetNvLinkVersion, h, link)
        read(nvml.nvmlDeviceGetNvLinkRemotePciInfo, h, link)
        for counter in (nvml.NVML_NVLINK_ERROR_DL_CRC_FLIT, nvml.NVML_NVLINK_ERROR_DL_CRC_DATA,
                        nvml.NVML_NVLINK_ERROR_DL_REPLAY, nvml.NVML_NVLINK_ERROR_DL_RECOVERY):
            read(nvml.nvmlDeviceGetNvLinkErrorCounter, h, link, counter)
    if active:  # every active link's speed in one call, one field per link
        read(nvml.nvmlDeviceGetFieldValues, h,
             [(nvml.NVML_FI_DEV_NVLINK_GET_SPEED, link) for link in active])


def read_kernel_log() -> int:
    """The kernel log's lines (the simulator's file, as the log checks read it)."""
    path = os.environ.get("NODEGATE_KERNEL_LOG")
    if not path:
        return 0
    with open(path, encoding="utf-8", errors="replace") as handle:
        return sum(1 for _ in handle)


def main() -> int:
    import pynvml

    try:
        reads = read_all(pynvml)
    except pynvml.NVMLError as exc:
        print(f"plain read: NVML: {exc}", file=sys.stderr)
        return 1
    print(f"{reads} NVML reads answered, {read_kernel_log()} kernel log lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
