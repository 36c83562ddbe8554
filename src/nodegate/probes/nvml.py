"""Read the whole GPU board through NVML (nvidia-ml-py) into one typed snapshot.

Every field is read independently: a call that is not supported stays ``None`` (its label in
``GpuState.unsupported``), any other NVML error stays ``None`` with its nvml.h name in
``GpuState.read_errors`` (the judge makes it ERROR, never a value), and a lost GPU
(NVML_ERROR_GPU_IS_LOST) marks that GPU lost, so one bad card never hides the state of the
other seven. ``pynvml`` is imported lazily: importing nodegate must not need the driver.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import field
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, TypeVar

from nodegate import records
from nodegate.errors import CannotRunError
from nodegate.probes.nvml_codes import (
    FI_DEV_GET_GPU_RECOVERY_ACTION,
    FI_DEV_NVLINK_GET_SPEED,
    describe_error,
    error_name,
    mib,
    nvlink_generation,
    pci_device_id,
    watts,
)

if TYPE_CHECKING:
    from nodegate.probes.deadline import Pending

T = TypeVar("T")

#: Links probed per GPU: NVML_NVLINK_MAX_LINKS on Hopper is 18; Blackwell has 18 too.
MAX_LINKS_PROBED = 18


@records.record
class NvLinkState:
    """One NVLink of a GPU as NVML reports it: state, version, remote end, error counters."""

    link: int
    active: bool
    #: nvmlNvlinkVersion_t as NVML returned it (NVML_NVLINK_VERSION_4_0 is 6), for evidence.
    version_enum: int | None = None
    #: The NVLink generation (4 on H100), converted by ``nvml_codes.nvlink_generation``.
    generation: int | None = None
    remote_bus_id: str | None = None
    speed_mbps: int | None = None  # NVML_FI_DEV_NVLINK_GET_SPEED for this link, MB/s
    crc_flit: int | None = None
    crc_data: int | None = None
    replay: int | None = None
    recovery: int | None = None

    @property
    def crc_errors(self) -> int | None:
        if self.crc_flit is None and self.crc_data is None:
            return None
        return (self.crc_flit or 0) + (self.crc_data or 0)


@records.record
class Process:
    """A compute process NVML lists on a GPU (someone else's work makes it busy)."""

    pid: int
    name: str
    used_memory_mib: int | None


@records.record
class GpuState:
    """Everything the quick checks read about one GPU, and which reads failed and how."""

    index: int
    lost: bool = False
    lost_error: str | None = None
    name: str | None = None
    uuid: str | None = None
    serial: str | None = None
    bus_id: str | None = None
    pci_device_id: int | None = None  # the PCI device id alone (0x2330), vendor stripped
    pci_subsystem_id: int | None = None  # the board SKU: subsystem device id alone (0x147F)
    vbios: str | None = None
    board_part_number: str | None = None
    inforom_image: str | None = None
    inforom_ecc: str | None = None  # the ECC object's version; unreadable on a corrupt InfoROM
    inforom_valid: bool | None = None
    memory_total_mib: int | None = None
    temperature_c: int | None = None
    slowdown_temp_c: int | None = None
    shutdown_temp_c: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    power_default_limit_w: float | None = None
    sm_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    clock_event_reasons: int | None = None
    pcie_gen: int | None = None  # current: trains down when idle, judged only under load
    pcie_gen_max: int | None = None  # the link's max (the GPU's and the slot's, the lower)
    pcie_gen_gpu_max: int | None = None  # the GPU's own max, whatever the slot
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    pcie_replays: int | None = None
    ecc_enabled: bool | None = None
    ecc_pending: bool | None = None
    dbe_volatile: int | None = None
    dbe_aggregate: int | None = None
    sbe_volatile: int | None = None
    sbe_aggregate: int | None = None
    remap_correctable: int | None = None
    remap_uncorrectable: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    retired_pages_sbe: int | None = None
    retired_pages_dbe: int | None = None
    retired_pages_pending: bool | None = None
    persistence: bool | None = None
    mig_enabled: bool | None = None
    compute_mode: int | None = None
    fabric_state: int | None = None
    fabric_status: int | None = None
    fabric_health_mask: int | None = None
    recovery_action: int | None = None  # nvmlDeviceGpuRecoveryAction_t (NONE 0: nothing asked)
    utilization_pct: int | None = None
    nvlinks: list[NvLinkState] = field(default_factory=list)
    processes: list[Process] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)
    #: Fields whose NVML call failed with anything but NOT_SUPPORTED (label -> the nvml.h
    #: error name and the driver's text, ``NVML_ERROR_TIMEOUT (Timeout)``): the GPU should
    #: have answered and did not, so the judge makes their checks ERROR.
    read_errors: dict[str, str] = field(default_factory=dict)

    @property
    def entity(self) -> str:
        return f"gpu{self.index}"

    def identity(self) -> dict[str, str]:
        """Which physical card this is (report field names), only what NVML gave: a field
        the board does not support is absent, never an empty or invented value."""
        found = {"serial": self.serial, "uuid": self.uuid, "pci_bus_id": self.bus_id,
                 "vbios": self.vbios, "board_part_number": self.board_part_number}
        return {key: value.strip() for key, value in found.items()
                if value is not None and value.strip()}


@records.record
class BoardSnapshot:
    """One read of the whole board: the driver's versions and every GPU's state."""

    driver_version: str | None
    nvml_version: str | None
    cuda_driver_version: int | None
    device_count: int
    gpus: list[GpuState]

    def identities(self) -> dict[str, dict[str, str]]:
        """Entity -> identity for every GPU that has one, for the report's ``gpus`` map."""
        return {gpu.entity: ident for gpu in self.gpus if (ident := gpu.identity())}

    def gpu_by_bus(self, bus_id: str) -> GpuState | None:
        want = normalize_bus_id(bus_id)
        for gpu in self.gpus:
            if gpu.bus_id and normalize_bus_id(gpu.bus_id) == want:
                return gpu
        return None


def normalize_bus_id(bus_id: str) -> str:
    """``00000000:18:00.0``, ``0000:18:00`` and ``18:00.0`` all become ``0000:18:00``."""
    text = bus_id.strip().lower().removeprefix("pci:")
    parts = text.split(":")
    if len(parts) == 2:
        parts = ["0", *parts]
    domain, bus, rest = parts[0], parts[1], parts[2]
    device = rest.split(".")[0]
    return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class _Reader:
    """Calls NVML functions for one GPU, recording lost/unsupported instead of raising."""

    def __init__(self, nvml: Any, gpu: GpuState) -> None:
        self.nvml = nvml
        self.gpu = gpu

    def read(self, label: str, fn: Callable[..., T], *args: Any) -> T | None:
        if self.gpu.lost:
            return None
        try:
            return fn(*args)
        except self.nvml.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code == self.nvml.NVML_ERROR_GPU_IS_LOST:
                self.gpu.lost = True
                self.gpu.lost_error = str(exc)
            elif code in (self.nvml.NVML_ERROR_NOT_SUPPORTED,
                          self.nvml.NVML_ERROR_FUNCTION_NOT_FOUND):
                self.gpu.unsupported.append(label)
            else:
                self.gpu.read_errors[label] = describe_error(exc)
            return None


def _import_pynvml() -> Any:
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - nvidia-ml-py is a dependency
        raise CannotRunError(f"nvidia-ml-py is not installed: {exc}") from None
    return pynvml


class NvmlInitError(CannotRunError):
    """nvmlInit failed: library missing, driver not loaded. Where the battery runs, the node
    answers nothing about its GPUs, which is a result (``gpu_reachable[node]`` ERROR);
    elsewhere (a load worker) it stays a CannotRunError."""


class NvmlUnavailable(Exception):
    """The board could not be read at all; ``reason`` says why, ``stage`` how far it got."""

    def __init__(self, reason: str, *, kind: str, stage: str | None = None) -> None:
        super().__init__(reason)
        self.reason, self.kind, self.stage = reason, kind, stage

    def __reduce__(self) -> tuple[Any, ...]:  # it crosses the probe child's pipe
        return (_unavailable, (self.reason, self.kind, self.stage))


def _unavailable(reason: str, kind: str, stage: str | None) -> NvmlUnavailable:
    return NvmlUnavailable(reason, kind=kind, stage=stage)


#: Default deadline for one whole board read (NVML answers in milliseconds on a healthy
#: board; a wedged driver never answers). ``--nvml-timeout`` changes it.
DEFAULT_DEADLINE_S = 30.0


def init_nvml() -> Any:
    """nvmlInit, or NvmlInitError (a CannotRunError, exit 3 unless the caller judges it)."""
    nvml = _import_pynvml()
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise NvmlInitError(
            f"cannot initialise NVML ({exc}); is the NVIDIA driver installed and loaded?"
        ) from None
    return nvml


def read_board(*, with_nvlink_counters: bool = True,
               progress: Callable[[str], None] | None = None) -> BoardSnapshot:
    nvml = init_nvml()
    try:
        return _read_board(nvml, with_nvlink_counters=with_nvlink_counters, progress=progress)
    finally:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()


def read_board_within(deadline_s: float, *, with_nvlink_counters: bool = True) -> BoardSnapshot:
    """``read_board`` in a child process that is abandoned after ``deadline_s``.

    Raises NvmlUnavailable when NVML cannot initialise, the read does not finish in time
    (a wedged GPU or driver), or the child dies; the caller turns that into a result.
    """
    return start_board_read(deadline_s, with_nvlink_counters=with_nvlink_counters).result()


class PendingBoard:
    """A board read running in its child (``start_board_read``): ``result()`` is
    ``read_board_within``'s answer, ``close()`` abandons it."""

    def __init__(self, pending: Pending[BoardSnapshot], deadline_s: float) -> None:
        self._pending, self._deadline_s = pending, deadline_s

    def result(self) -> BoardSnapshot:
        from nodegate.probes.deadline import ChildDied, DeadlineExceeded

        try:
            return self._pending.result()
        except NvmlInitError as exc:
            raise NvmlUnavailable(str(exc), kind="init", stage="nvmlInit") from None
        except DeadlineExceeded as exc:
            note = "" if exc.reaped else "; the probe process is stuck in the kernel"
            where = f" (while reading {exc.last})" if exc.last else ""
            raise NvmlUnavailable(f"NVML gave no answer within {self._deadline_s:g}s{where}"
                                  f"{note}", kind="timeout", stage=exc.last) from None
        except ChildDied as exc:
            raise NvmlUnavailable(str(exc), kind="died") from None

    def close(self) -> None:
        self._pending.close()


def start_board_read(deadline_s: float, *, with_nvlink_counters: bool = True) -> PendingBoard:
    """``read_board_within`` started: the child reads while the caller does other work,
    then ``result()`` (or ``close()``); the deadline counts from this call."""
    from nodegate.probes.deadline import start_with_deadline

    nvml = _import_pynvml()  # a missing nvidia-ml-py stays an environment problem (exit 3)

    def probe(progress: Callable[[str], None]) -> BoardSnapshot:
        stage = ["nvmlInit"]

        def step(label: str) -> None:
            stage[0] = label
            progress(label)

        step("nvmlInit")
        try:
            return read_board(with_nvlink_counters=with_nvlink_counters, progress=step)
        except nvml.NVMLError as exc:  # a board-wide call (the device count) failed
            raise NvmlUnavailable(f"NVML error while reading {stage[0]}: {exc}",
                                  kind="error", stage=stage[0]) from None

    return PendingBoard(start_with_deadline(probe, deadline_s), deadline_s)


def _system(nvml: Any, fn_name: str) -> Any:
    try:
        return getattr(nvml, fn_name)()
    except nvml.NVMLError:
        return None


def _read_board(nvml: Any, *, with_nvlink_counters: bool,
                progress: Callable[[str], None] | None = None) -> BoardSnapshot:
    if progress is not None:
        progress("system")
    driver = _system(nvml, "nvmlSystemGetDriverVersion")
    nvml_version = _system(nvml, "nvmlSystemGetNVMLVersion")
    cuda = _system(nvml, "nvmlSystemGetCudaDriverVersion")
    count = int(nvml.nvmlDeviceGetCount())
    gpus = []
    for index in range(count):
        if progress is not None:
            progress(f"gpu{index}")
        gpu = GpuState(index=index)
        reader = _Reader(nvml, gpu)
        handle = reader.read("handle", nvml.nvmlDeviceGetHandleByIndex, index)
        if handle is not None:
            _read_gpu(nvml, reader, handle, with_nvlink_counters=with_nvlink_counters)
        gpus.append(gpu)
    return BoardSnapshot(
        driver_version=_text(driver) if driver is not None else None,
        nvml_version=_text(nvml_version) if nvml_version is not None else None,
        cuda_driver_version=int(cuda) if cuda is not None else None,
        device_count=count,
        gpus=gpus,
    )


def _read_gpu(nvml: Any, r: _Reader, h: Any, *, with_nvlink_counters: bool) -> None:
    """Every field of one GPU, in a fixed call order (a lost GPU stops the reads after it)."""
    _read_identity(nvml, r, h)
    _read_inforom(nvml, r, h)
    _read_thermal_power(nvml, r, h)
    _read_pcie(nvml, r, h)
    _read_memory_errors(nvml, r, h)
    _read_modes(nvml, r, h)
    _read_fabric(nvml, r, h)
    _read_recovery_action(nvml, r, h)
    _read_processes(nvml, r, h)
    _read_nvlinks(nvml, r, h, with_counters=with_nvlink_counters)


def _read_text(r: _Reader, label: str, fn: Callable[..., Any], *args: Any) -> str | None:
    value = r.read(label, fn, *args)
    return _text(value) if value is not None else None


def _read_identity(nvml: Any, r: _Reader, h: Any) -> None:
    """What names the physical card: name, UUID, serial, PCI address, VBIOS, part number."""
    g = r.gpu
    g.name = _read_text(r, "name", nvml.nvmlDeviceGetName, h)
    g.uuid = _read_text(r, "uuid", nvml.nvmlDeviceGetUUID, h)
    g.serial = _read_text(r, "serial", nvml.nvmlDeviceGetSerial, h)
    pci = r.read("pci", nvml.nvmlDeviceGetPciInfo, h)
    if pci is not None:
        g.bus_id = _text(pci.busId)
        g.pci_device_id = pci_device_id(pci.pciDeviceId)
        subsystem = getattr(pci, "pciSubSystemId", None)  # same layout: id << 16 | vendor
        g.pci_subsystem_id = pci_device_id(subsystem) if subsystem is not None else None
    g.vbios = _read_text(r, "vbios", nvml.nvmlDeviceGetVbiosVersion, h)
    g.board_part_number = _read_text(r, "board_part_number",
                                     nvml.nvmlDeviceGetBoardPartNumber, h)


def _read_inforom(nvml: Any, r: _Reader, h: Any) -> None:
    """InfoROM versions and whether its checksum validates (a corrupted one is a result, not
    a read error)."""
    g = r.gpu
    g.inforom_image = _read_text(r, "inforom", nvml.nvmlDeviceGetInforomImageVersion, h)
    g.inforom_ecc = _read_text(r, "inforom_ecc", nvml.nvmlDeviceGetInforomVersion, h,
                               nvml.NVML_INFOROM_ECC)
    try:
        nvml.nvmlDeviceValidateInforom(h)
        g.inforom_valid = True
    except nvml.NVMLError as exc:
        code = getattr(exc, "value", None)
        if code == nvml.NVML_ERROR_CORRUPTED_INFOROM:
            g.inforom_valid = False
        elif code == nvml.NVML_ERROR_GPU_IS_LOST:
            g.lost, g.lost_error = True, str(exc)
        elif code in (nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_FUNCTION_NOT_FOUND):
            g.unsupported.append("inforom_validate")
        else:  # the checksum was not verified: unmeasured, not valid
            g.read_errors["inforom_validate"] = describe_error(exc)


def _read_thermal_power(nvml: Any, r: _Reader, h: Any) -> None:
    """Memory size, temperatures and their thresholds, power and its limits, SM clocks."""
    g = r.gpu
    memory = r.read("memory", nvml.nvmlDeviceGetMemoryInfo, h)
    if memory is not None:
        g.memory_total_mib = mib(memory.total)
    g.temperature_c = r.read("temperature", nvml.nvmlDeviceGetTemperature, h,
                             nvml.NVML_TEMPERATURE_GPU)
    g.slowdown_temp_c = r.read("slowdown_temp", nvml.nvmlDeviceGetTemperatureThreshold, h,
                               nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)
    g.shutdown_temp_c = r.read("shutdown_temp", nvml.nvmlDeviceGetTemperatureThreshold, h,
                               nvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN)
    power = r.read("power", nvml.nvmlDeviceGetPowerUsage, h)
    g.power_w = watts(power)
    g.power_limit_w = watts(r.read("power_limit", nvml.nvmlDeviceGetEnforcedPowerLimit, h))
    g.power_default_limit_w = watts(
        r.read("power_default_limit", nvml.nvmlDeviceGetPowerManagementDefaultLimit, h))
    g.sm_clock_mhz = r.read("sm_clock", nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_SM)
    g.sm_clock_max_mhz = r.read("sm_clock_max", nvml.nvmlDeviceGetMaxClockInfo, h,
                                nvml.NVML_CLOCK_SM)
    reasons_fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        nvml.nvmlDeviceGetCurrentClocksThrottleReasons
    g.clock_event_reasons = r.read("clock_event_reasons", reasons_fn, h)


def _read_pcie(nvml: Any, r: _Reader, h: Any) -> None:
    """PCIe link generation and width (current, slot maximum, GPU maximum) and replays."""
    g = r.gpu
    g.pcie_gen = r.read("pcie_gen", nvml.nvmlDeviceGetCurrPcieLinkGeneration, h)
    g.pcie_gen_max = r.read("pcie_gen_max", nvml.nvmlDeviceGetMaxPcieLinkGeneration, h)
    g.pcie_gen_gpu_max = r.read("pcie_gen_gpu_max", nvml.nvmlDeviceGetGpuMaxPcieLinkGeneration,
                                h)
    g.pcie_width = r.read("pcie_width", nvml.nvmlDeviceGetCurrPcieLinkWidth, h)
    g.pcie_width_max = r.read("pcie_width_max", nvml.nvmlDeviceGetMaxPcieLinkWidth, h)
    g.pcie_replays = r.read("pcie_replays", nvml.nvmlDeviceGetPcieReplayCounter, h)


def _read_memory_errors(nvml: Any, r: _Reader, h: Any) -> None:
    """ECC mode and counters, row remapping, and retired pages."""
    g = r.gpu
    ecc = r.read("ecc_mode", nvml.nvmlDeviceGetEccMode, h)
    if ecc is not None:
        g.ecc_enabled = bool(ecc[0])
        g.ecc_pending = bool(ecc[1])
    unc, cor = nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
    vol, agg = nvml.NVML_VOLATILE_ECC, nvml.NVML_AGGREGATE_ECC
    g.dbe_volatile = r.read("dbe_volatile", nvml.nvmlDeviceGetTotalEccErrors, h, unc, vol)
    g.dbe_aggregate = r.read("dbe_aggregate", nvml.nvmlDeviceGetTotalEccErrors, h, unc, agg)
    g.sbe_volatile = r.read("sbe_volatile", nvml.nvmlDeviceGetTotalEccErrors, h, cor, vol)
    g.sbe_aggregate = r.read("sbe_aggregate", nvml.nvmlDeviceGetTotalEccErrors, h, cor, agg)
    remap = r.read("remapped_rows", nvml.nvmlDeviceGetRemappedRows, h)
    if remap is not None:
        g.remap_correctable, g.remap_uncorrectable = int(remap[0]), int(remap[1])
        g.remap_pending, g.remap_failure = bool(remap[2]), bool(remap[3])
    sbe_pages = r.read("retired_pages_sbe", nvml.nvmlDeviceGetRetiredPages, h,
                       nvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
    dbe_pages = r.read("retired_pages_dbe", nvml.nvmlDeviceGetRetiredPages, h,
                       nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
    g.retired_pages_sbe = len(sbe_pages) if sbe_pages is not None else None
    g.retired_pages_dbe = len(dbe_pages) if dbe_pages is not None else None
    pending = r.read("retired_pages_pending", nvml.nvmlDeviceGetRetiredPagesPendingStatus, h)
    g.retired_pages_pending = bool(pending) if pending is not None else None


def _read_modes(nvml: Any, r: _Reader, h: Any) -> None:
    """Persistence, MIG and compute modes, and utilization."""
    g = r.gpu
    persistence = r.read("persistence", nvml.nvmlDeviceGetPersistenceMode, h)
    g.persistence = bool(persistence) if persistence is not None else None
    mig = r.read("mig_mode", nvml.nvmlDeviceGetMigMode, h)
    g.mig_enabled = bool(mig[0]) if mig is not None else None
    g.compute_mode = r.read("compute_mode", nvml.nvmlDeviceGetComputeMode, h)
    utilization = r.read("utilization", nvml.nvmlDeviceGetUtilizationRates, h)
    g.utilization_pct = int(utilization.gpu) if utilization is not None else None


def _read_fabric(nvml: Any, r: _Reader, h: Any) -> None:
    """Fabric state via the versioned call (with the health mask) when the driver has it."""
    if hasattr(nvml, "c_nvmlGpuFabricInfo_v2_t"):
        info = nvml.c_nvmlGpuFabricInfo_v2_t()
        try:
            nvml.nvmlDeviceGetGpuFabricInfoV(h, nvml.byref(info))
        except nvml.NVMLError as exc:
            if getattr(exc, "value", None) != nvml.NVML_ERROR_FUNCTION_NOT_FOUND:
                r.read("fabric", _raise, exc)
                return
        else:
            r.gpu.fabric_state, r.gpu.fabric_status = int(info.state), int(info.status)
            r.gpu.fabric_health_mask = int(info.healthMask)
            return
    legacy = nvml.c_nvmlGpuFabricInfo_t()
    if r.read("fabric", nvml.nvmlDeviceGetGpuFabricInfo, h, nvml.byref(legacy)) is not None:
        r.gpu.fabric_state = int(legacy.state)
        r.gpu.fabric_status = int(legacy.status)


def _read_recovery_action(nvml: Any, r: _Reader, h: Any) -> None:
    """The driver's own verdict on what the GPU needs (``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION``,
    from R570 drivers). The field answers in its own ``nvmlReturn``: NOT_SUPPORTED (an older
    driver or board) is recorded as unsupported, any other error as a read error, never 0."""
    if FI_DEV_GET_GPU_RECOVERY_ACTION is None:  # this nvidia-ml-py cannot name the field
        r.gpu.unsupported.append("recovery_action")
        return
    values = r.read("recovery_action", nvml.nvmlDeviceGetFieldValues, h,
                    [FI_DEV_GET_GPU_RECOVERY_ACTION])
    if not values:
        return
    value = values[0]
    if _field_answered(nvml, r.gpu, "recovery_action", int(value.nvmlReturn)):
        r.gpu.recovery_action = int(value.value.uiVal)


def _field_answered(nvml: Any, gpu: GpuState, label: str, code: int | None) -> bool:
    """One field value's own ``nvmlReturn``: True on success; otherwise the GPU lost, the
    field unsupported (NOT_SUPPORTED) or a read error, recorded under ``label``."""
    if code == nvml.NVML_SUCCESS:
        return True
    if code == nvml.NVML_ERROR_GPU_IS_LOST:
        gpu.lost, gpu.lost_error = True, error_name(code)
    elif code in (nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_FUNCTION_NOT_FOUND):
        gpu.unsupported.append(label)
    else:
        gpu.read_errors[label] = error_name(code)
    return False


def _raise(exc: BaseException) -> None:
    raise exc


def _read_processes(nvml: Any, r: _Reader, h: Any) -> None:
    procs = r.read("processes", nvml.nvmlDeviceGetComputeRunningProcesses, h)
    for proc in procs or []:
        pid = int(proc.pid)
        try:
            name = _text(nvml.nvmlSystemGetProcessName(pid))
        except nvml.NVMLError:
            name = "?"
        used = getattr(proc, "usedGpuMemory", None)
        used_mib = mib(used) if isinstance(used, int) else None  # None: not available
        r.gpu.processes.append(Process(pid=pid, name=name, used_memory_mib=used_mib))


def _no_such_link(nvml: Any) -> tuple[int, ...]:
    """What ``nvmlDeviceGetNvLinkState`` answers past the GPU's last link (nvml.h): the link
    does not exist. Any other error is a link that did not answer."""
    return (nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_INVALID_ARGUMENT,
            nvml.NVML_ERROR_FUNCTION_NOT_FOUND)


def _read_nvlinks(nvml: Any, r: _Reader, h: Any, *, with_counters: bool) -> None:
    for link in range(MAX_LINKS_PROBED):
        if r.gpu.lost:
            return
        try:
            state = nvml.nvmlDeviceGetNvLinkState(h, link)
        except nvml.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code == nvml.NVML_ERROR_GPU_IS_LOST:
                r.gpu.lost, r.gpu.lost_error = True, str(exc)
                return
            if code not in _no_such_link(nvml):
                # the link may exist and did not answer: unmeasured, never "absent"
                r.gpu.read_errors[f"nvlink{link}.state"] = describe_error(exc)
            continue  # link not present on this board (NOT_SUPPORTED / INVALID_ARGUMENT)
        entry = NvLinkState(link=link, active=bool(state))
        entry.version_enum = r.read(f"nvlink{link}.version", nvml.nvmlDeviceGetNvLinkVersion,
                                    h, link)
        entry.generation = nvlink_generation(entry.version_enum)
        remote = r.read(f"nvlink{link}.remote", nvml.nvmlDeviceGetNvLinkRemotePciInfo, h, link)
        if remote is not None:
            entry.remote_bus_id = _text(remote.busId)
        if with_counters:
            counter = nvml.nvmlDeviceGetNvLinkErrorCounter
            entry.crc_flit = r.read(f"nvlink{link}.crc_flit", counter, h, link,
                                    nvml.NVML_NVLINK_ERROR_DL_CRC_FLIT)
            entry.crc_data = r.read(f"nvlink{link}.crc_data", counter, h, link,
                                    nvml.NVML_NVLINK_ERROR_DL_CRC_DATA)
            entry.replay = r.read(f"nvlink{link}.replay", counter, h, link,
                                  nvml.NVML_NVLINK_ERROR_DL_REPLAY)
            entry.recovery = r.read(f"nvlink{link}.recovery", counter, h, link,
                                    nvml.NVML_NVLINK_ERROR_DL_RECOVERY)
        r.gpu.nvlinks.append(entry)
    _read_link_speeds(nvml, r, h)


def _read_link_speeds(nvml: Any, r: _Reader, h: Any) -> None:
    """Every active link's speed in one ``nvmlDeviceGetFieldValues`` call (one field per link,
    ``scopeId`` = the link); each value answers in its own ``nvmlReturn``."""
    links = [entry for entry in r.gpu.nvlinks if entry.active]
    if r.gpu.lost or not links:
        return
    if FI_DEV_NVLINK_GET_SPEED is None:  # this nvidia-ml-py cannot name the field
        r.gpu.unsupported += [f"nvlink{entry.link}.speed" for entry in links]
        return
    try:
        values = list(nvml.nvmlDeviceGetFieldValues(
            h, [(FI_DEV_NVLINK_GET_SPEED, entry.link) for entry in links]))
    except nvml.NVMLError as exc:  # the whole call failed: every link's speed with it
        code = getattr(exc, "value", None)
        values = [SimpleNamespace(nvmlReturn=code, value=None)] * len(links)
    for entry, value in zip(links, values, strict=True):
        if _field_answered(nvml, r.gpu, f"nvlink{entry.link}.speed", value.nvmlReturn):
            entry.speed_mbps = int(value.value.uiVal)
        if r.gpu.lost:
            return
