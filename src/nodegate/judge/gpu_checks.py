"""The GPU checks (NVML), declared once (``nodegate.judge.declare``).

Every one is emitted by ``nodegate.judge.gpu:judge_board`` (per GPU through ``judge_gpu``,
per link through ``_nvlinks``); the counters among them are judged again by growth since the
previous report (``nodegate.judge.counters``), which reads their ``*_per_hour_max`` key.
"""

from __future__ import annotations

from nodegate.judge.declare import Check, check
from nodegate.profiles.threshold_keys import Feature, Key
from nodegate.vocabulary import Group, Level, Subject

JUDGE = "nodegate.judge.gpu:judge_board"
S = Subject


def _gpu(name: str, subject: Subject, meaning: str, *keys: Key,
         requires: tuple[Feature, ...] = ()) -> Check:
    return check(name, meaning, JUDGE, *keys, subject=subject, group=Group.GPU,
                 level=Level.QUICK, requires=requires)


ECC, REMAP = (Feature.ECC,), (Feature.ROW_REMAPPING,)
NVLINK = (Feature.NVLINK,)

CHECKS: tuple[Check, ...] = (
    _gpu("gpu_count", S.IDENTITY, "as many GPUs on the bus as the profile says"),
    _gpu("gpu_reachable", S.IDENTITY, "NVML can talk to the GPU (not lost)"),
    _gpu("gpu_model", S.IDENTITY, "GPU name as the profile says"),
    _gpu("gpu_pci_device_id", S.IDENTITY, "PCI device id as the profile says"),
    _gpu("gpu_memory", S.IDENTITY, "total memory as the profile's gpu.memory_mib",
         Key.GPU_MEMORY_DEVIATION_PCT_MAX),
    _gpu("driver_version", S.IDENTITY, "driver version equals the pin"),
    _gpu("vbios_uniform", S.IDENTITY,
         "VBIOS as pinned, else identical across GPUs of one model"),
    _gpu("inforom_uniform", S.IDENTITY,
         "InfoROM valid; as pinned, else identical across one model"),
    _gpu("persistence_mode", S.MODES, "persistence mode as the profile says"),
    _gpu("mig_mode", S.MODES, "MIG mode as the profile says", requires=(Feature.MIG,)),
    _gpu("compute_mode", S.MODES, "compute mode as the profile says"),
    _gpu("ecc_mode", S.MODES, "ECC enabled as the profile says", requires=ECC),
    _gpu("ecc_dbe_volatile", S.MEMORY, "double-bit ECC errors since reset",
         Key.ECC_DBE_VOLATILE_MAX, requires=ECC),
    _gpu("ecc_dbe_aggregate", S.MEMORY, "lifetime double-bit ECC errors",
         Key.ECC_DBE_AGGREGATE_MAX, requires=ECC),
    _gpu("ecc_sbe_volatile", S.MEMORY, "single-bit ECC errors since reset",
         Key.ECC_SBE_VOLATILE_MAX, Key.ECC_SBE_PER_HOUR_MAX, requires=ECC),
    _gpu("ecc_sbe_aggregate", S.MEMORY, "lifetime single-bit ECC errors",
         Key.ECC_SBE_AGGREGATE_MAX, requires=ECC),
    _gpu("remap_pending", S.MEMORY, "row remap pending a reset", Key.REMAP_PENDING_MAX,
         requires=REMAP),
    _gpu("remap_failure", S.MEMORY, "row remap failed", Key.REMAP_FAILURE_MAX, requires=REMAP),
    _gpu("remap_uncorrectable", S.MEMORY, "rows remapped for uncorrectable errors",
         Key.REMAP_UNCORRECTABLE_MAX, requires=REMAP),
    _gpu("retired_pages", S.MEMORY, "retired memory pages", Key.RETIRED_PAGES_MAX,
         requires=(Feature.PAGE_RETIREMENT,)),
    _gpu("pcie_link", S.PCIE, "PCIe link max gen and current width as the profile"),
    _gpu("pcie_replays", S.PCIE, "PCIe replay counter", Key.PCIE_REPLAY_MAX,
         Key.PCIE_REPLAYS_PER_HOUR_MAX),
    _gpu("clock_events", S.THERMAL_POWER, "no HW slowdown, HW thermal or power brake"),
    _gpu("power_limit", S.MODES, "enforced power limit as the profile says"),
    _gpu("idle_temperature", S.THERMAL_POWER, "idle GPU temperature", Key.GPU_TEMP_IDLE_MAX_C),
    _gpu("foreign_processes", S.THERMAL_POWER, "processes holding the GPU (reported)"),
    _gpu("fabric_state", S.NVLINK, "NVSwitch fabric registration completed",
         requires=(Feature.GPU_FABRIC, Feature.NVSWITCH)),
    _gpu("nvlink_state", S.NVLINK, "every NVLink active at the expected version",
         requires=NVLINK),
    _gpu("nvlink_speed", S.NVLINK, "every active NVLink at least the GPU layer's per-link "
         "speed (nvlink.link_gbps)", requires=NVLINK),
    _gpu("nvlink_crc_errors", S.NVLINK, "NVLink CRC error counters", Key.NVLINK_CRC_ERRORS_MAX,
         Key.NVLINK_CRC_ERRORS_PER_HOUR_MAX, requires=NVLINK),
    _gpu("nvlink_replay_errors", S.NVLINK, "NVLink replay error counters",
         Key.NVLINK_REPLAY_ERRORS_MAX, Key.NVLINK_REPLAY_ERRORS_PER_HOUR_MAX, requires=NVLINK),
    _gpu("nvlink_recovery_errors", S.NVLINK, "NVLink recovery error counters",
         Key.NVLINK_RECOVERY_ERRORS_MAX, Key.NVLINK_RECOVERY_ERRORS_PER_HOUR_MAX,
         requires=NVLINK),
    # last: a check newer than the rest, so the registry's earlier order stays as it was
    _gpu("gpu_recovery_action", S.IDENTITY,
         "NVML's GPU recovery action is NONE (the driver asks no reset, drain or reboot)",
         requires=(Feature.RECOVERY_ACTION,)),
)
