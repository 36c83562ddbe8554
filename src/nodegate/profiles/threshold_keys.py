"""The catalogue of threshold names a profile may set, with their bound and unit.

One place: the schema is generated from it, the judge looks names up in it, and
``nodegate profiles show`` prints it. A name outside this table is a profile error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, NamedTuple

from nodegate.vocabulary import Word

Bound = Literal["min", "max"]


class Key(Word):
    """A threshold name a profile may set: judges look thresholds up by these, never by a
    string built at run time, so mypy sees every name."""

    GPU_TEMP_IDLE_MAX_C = "gpu_temp_idle_max_c"
    GPU_MEMORY_DEVIATION_PCT_MAX = "gpu_memory_deviation_pct_max"
    ECC_DBE_VOLATILE_MAX = "ecc_dbe_volatile_max"
    ECC_DBE_AGGREGATE_MAX = "ecc_dbe_aggregate_max"
    ECC_SBE_VOLATILE_MAX = "ecc_sbe_volatile_max"
    ECC_SBE_AGGREGATE_MAX = "ecc_sbe_aggregate_max"
    REMAP_PENDING_MAX = "remap_pending_max"
    REMAP_FAILURE_MAX = "remap_failure_max"
    REMAP_UNCORRECTABLE_MAX = "remap_uncorrectable_max"
    RETIRED_PAGES_MAX = "retired_pages_max"
    PCIE_REPLAY_MAX = "pcie_replay_max"
    NVLINK_CRC_ERRORS_MAX = "nvlink_crc_errors_max"
    NVLINK_REPLAY_ERRORS_MAX = "nvlink_replay_errors_max"
    NVLINK_RECOVERY_ERRORS_MAX = "nvlink_recovery_errors_max"
    NVLINK_CRC_ERRORS_PER_HOUR_MAX = "nvlink_crc_errors_per_hour_max"
    NVLINK_REPLAY_ERRORS_PER_HOUR_MAX = "nvlink_replay_errors_per_hour_max"
    NVLINK_RECOVERY_ERRORS_PER_HOUR_MAX = "nvlink_recovery_errors_per_hour_max"
    PCIE_REPLAYS_PER_HOUR_MAX = "pcie_replays_per_hour_max"
    ECC_SBE_PER_HOUR_MAX = "ecc_sbe_per_hour_max"
    IB_LINK_FLAPS_MAX = "ib_link_flaps_max"
    IB_LINK_FLAPS_PER_HOUR_MAX = "ib_link_flaps_per_hour_max"
    IB_LINK_RECOVERIES_MAX = "ib_link_recoveries_max"
    IB_LINK_RECOVERIES_PER_HOUR_MAX = "ib_link_recoveries_per_hour_max"
    IB_SYMBOL_ERRORS_MAX = "ib_symbol_errors_max"
    IB_SYMBOL_ERRORS_PER_HOUR_MAX = "ib_symbol_errors_per_hour_max"
    IB_RCV_ERRORS_MAX = "ib_rcv_errors_max"
    IB_RCV_ERRORS_PER_HOUR_MAX = "ib_rcv_errors_per_hour_max"
    IB_XMIT_DISCARDS_MAX = "ib_xmit_discards_max"
    IB_XMIT_DISCARDS_PER_HOUR_MAX = "ib_xmit_discards_per_hour_max"
    IB_LINK_INTEGRITY_ERRORS_MAX = "ib_link_integrity_errors_max"
    IB_LINK_INTEGRITY_ERRORS_PER_HOUR_MAX = "ib_link_integrity_errors_per_hour_max"
    IB_BUFFER_OVERRUNS_MAX = "ib_buffer_overruns_max"
    IB_BUFFER_OVERRUNS_PER_HOUR_MAX = "ib_buffer_overruns_per_hour_max"
    GEMM_BF16_TFLOPS_MIN = "gemm_bf16_tflops_min"
    GEMM_FP16_TFLOPS_MIN = "gemm_fp16_tflops_min"
    GEMM_TF32_TFLOPS_MIN = "gemm_tf32_tflops_min"
    GEMM_FP8_TFLOPS_MIN = "gemm_fp8_tflops_min"
    GEMM_FP4_TFLOPS_MIN = "gemm_fp4_tflops_min"
    GEMM_FP64_TFLOPS_MIN = "gemm_fp64_tflops_min"
    HBM_PATTERN_GBPS_MIN = "hbm_pattern_gbps_min"
    HBM_BANDWIDTH_GBPS_MIN = "hbm_bandwidth_gbps_min"
    H2D_GBPS_MIN = "h2d_gbps_min"
    D2H_GBPS_MIN = "d2h_gbps_min"
    P2P_UNIDIR_GBPS_MIN = "p2p_unidir_gbps_min"
    P2P_BIDIR_GBPS_MIN = "p2p_bidir_gbps_min"
    ALLREDUCE_BUSBW_GBPS_MIN = "allreduce_busbw_gbps_min"
    ALLGATHER_BUSBW_GBPS_MIN = "allgather_busbw_gbps_min"
    REDUCESCATTER_BUSBW_GBPS_MIN = "reducescatter_busbw_gbps_min"
    ALLTOALL_BUSBW_GBPS_MIN = "alltoall_busbw_gbps_min"
    BROADCAST_BUSBW_GBPS_MIN = "broadcast_busbw_gbps_min"
    MULTINODE_ALLREDUCE_BUSBW_GBPS_MIN = "multinode_allreduce_busbw_gbps_min"
    MULTINODE_ALLGATHER_BUSBW_GBPS_MIN = "multinode_allgather_busbw_gbps_min"
    MULTINODE_REDUCESCATTER_BUSBW_GBPS_MIN = "multinode_reducescatter_busbw_gbps_min"
    MULTINODE_ALLTOALL_BUSBW_GBPS_MIN = "multinode_alltoall_busbw_gbps_min"
    IB_WRITE_BW_GBPS_MIN = "ib_write_bw_gbps_min"
    IB_WRITE_BW_GDR_GBPS_MIN = "ib_write_bw_gdr_gbps_min"
    MULTINODE_IB_WRITE_BW_GBPS_MIN = "multinode_ib_write_bw_gbps_min"
    BURNIN_TOKENS_PER_S_MIN = "burnin_tokens_per_s_min"
    BURNIN_TFLOPS_MIN = "burnin_tflops_min"
    FSDP_TOKENS_PER_S_MIN = "fsdp_tokens_per_s_min"
    FSDP_TFLOPS_MIN = "fsdp_tflops_min"
    FSDP_CHECKPOINT_WRITE_GBPS_MIN = "fsdp_checkpoint_write_gbps_min"
    FSDP_CHECKPOINT_READ_GBPS_MIN = "fsdp_checkpoint_read_gbps_min"
    FSDP_STRAGGLER_MARGIN_PCT_MAX = "fsdp_straggler_margin_pct_max"
    STRAGGLER_MARGIN_PCT_MAX = "straggler_margin_pct_max"
    OUTLIER_MARGIN_PCT_MAX = "outlier_margin_pct_max"
    TREND_DRIFT_PCT_MAX = "trend_drift_pct_max"
    THERMAL_MARGIN_C_MIN = "thermal_margin_c_min"
    MEM_TEMP_MAX_C = "mem_temp_max_c"
    POWER_FRACTION_MIN = "power_fraction_min"
    CLOCK_FLOOR_MHZ_MIN = "clock_floor_mhz_min"
    NVME_PERCENTAGE_USED_MAX = "nvme_percentage_used_max"
    NVME_MEDIA_ERRORS_MAX = "nvme_media_errors_max"
    NVME_TEMPERATURE_MAX_C = "nvme_temperature_max_c"
    NVME_UNSAFE_SHUTDOWNS_GROWTH_MAX = "nvme_unsafe_shutdowns_growth_max"
    FIO_SEQ_READ_GBPS_MIN = "fio_seq_read_gbps_min"
    FIO_SEQ_WRITE_GBPS_MIN = "fio_seq_write_gbps_min"
    FIO_RAND_READ_KIOPS_MIN = "fio_rand_read_kiops_min"
    INLET_TEMP_MAX_C = "inlet_temp_max_c"
    CIRCUIT_LOAD_FRACTION_MAX = "circuit_load_fraction_max"
    PSU_BUDGET_FRACTION_MAX = "psu_budget_fraction_max"
    BMC_TO_GPU_POWER_RATIO_MIN = "bmc_to_gpu_power_ratio_min"
    BMC_POWER_SOURCE_SPREAD_MAX = "bmc_power_source_spread_max"


class ThresholdKey(NamedTuple):
    bound: Bound
    unit: str
    meaning: str


THRESHOLD_KEYS: dict[Key, ThresholdKey] = {
    # --- quick level: state read from NVML ---------------------------------------------------
    Key.GPU_TEMP_IDLE_MAX_C: ThresholdKey("max", "C", "GPU core temperature at idle"),
    Key.GPU_MEMORY_DEVIATION_PCT_MAX: ThresholdKey(
        "max", "%", "NVML total memory away from gpu.memory_mib, either way"),
    Key.ECC_DBE_VOLATILE_MAX: ThresholdKey("max", "count", "volatile double-bit ECC errors"),
    Key.ECC_DBE_AGGREGATE_MAX: ThresholdKey("max", "count", "lifetime double-bit ECC errors"),
    Key.ECC_SBE_VOLATILE_MAX: ThresholdKey("max", "count", "volatile single-bit ECC errors"),
    Key.ECC_SBE_AGGREGATE_MAX: ThresholdKey("max", "count", "lifetime single-bit ECC errors"),
    Key.REMAP_PENDING_MAX: ThresholdKey("max", "count", "row remaps pending a GPU reset"),
    Key.REMAP_FAILURE_MAX: ThresholdKey("max", "count", "row remap failures"),
    Key.REMAP_UNCORRECTABLE_MAX: ThresholdKey("max", "rows", "rows remapped for uncorrectable"),
    Key.RETIRED_PAGES_MAX: ThresholdKey("max", "pages", "retired pages (SBE + DBE)"),
    Key.PCIE_REPLAY_MAX: ThresholdKey("max", "count", "PCIe replay counter"),
    Key.NVLINK_CRC_ERRORS_MAX: ThresholdKey("max", "count", "NVLink CRC (flit + data) errors"),
    Key.NVLINK_REPLAY_ERRORS_MAX: ThresholdKey("max", "count", "NVLink replay errors"),
    Key.NVLINK_RECOVERY_ERRORS_MAX: ThresholdKey("max", "count", "NVLink recovery errors"),
    # counters judged by growth since the node's previous report (nodegate.judge.counters)
    Key.NVLINK_CRC_ERRORS_PER_HOUR_MAX: ThresholdKey(
        "max", "count/h", "NVLink CRC errors gained per hour"),
    Key.NVLINK_REPLAY_ERRORS_PER_HOUR_MAX: ThresholdKey(
        "max", "count/h", "NVLink replay errors gained per hour"),
    Key.NVLINK_RECOVERY_ERRORS_PER_HOUR_MAX: ThresholdKey(
        "max", "count/h", "NVLink recovery errors gained per hour"),
    Key.PCIE_REPLAYS_PER_HOUR_MAX: ThresholdKey("max", "count/h", "PCIe replays gained per hour"),
    Key.ECC_SBE_PER_HOUR_MAX: ThresholdKey(
        "max", "count/h", "volatile single-bit ECC errors gained per hour"),
    # RDMA port error counters (sysfs ports/N/counters): total, and growth per hour
    Key.IB_LINK_FLAPS_MAX: ThresholdKey(
        "max", "count", "RDMA port link_downed (flaps) since the counters were cleared"),
    Key.IB_LINK_FLAPS_PER_HOUR_MAX: ThresholdKey(
        "max", "count/h", "RDMA port link_downed (flaps) gained per hour"),
    Key.IB_LINK_RECOVERIES_MAX: ThresholdKey(
        "max", "count", "RDMA port link_error_recovery since the counters were cleared"),
    Key.IB_LINK_RECOVERIES_PER_HOUR_MAX: ThresholdKey(
        "max", "count/h", "RDMA port link_error_recovery gained per hour"),
    Key.IB_SYMBOL_ERRORS_MAX: ThresholdKey(
        "max", "count", "RDMA port symbol_error since the counters were cleared"),
    Key.IB_SYMBOL_ERRORS_PER_HOUR_MAX: ThresholdKey(
        "max", "count/h", "RDMA port symbol_error gained per hour"),
    Key.IB_RCV_ERRORS_MAX: ThresholdKey(
        "max", "count", "RDMA port port_rcv_errors since the counters were cleared"),
    Key.IB_RCV_ERRORS_PER_HOUR_MAX: ThresholdKey(
        "max", "count/h", "RDMA port port_rcv_errors gained per hour"),
    Key.IB_XMIT_DISCARDS_MAX: ThresholdKey(
        "max", "count", "RDMA port port_xmit_discards since the counters were cleared"),
    Key.IB_XMIT_DISCARDS_PER_HOUR_MAX: ThresholdKey(
        "max", "count/h", "RDMA port port_xmit_discards gained per hour"),
    Key.IB_LINK_INTEGRITY_ERRORS_MAX: ThresholdKey(
        "max", "count", "RDMA port local_link_integrity_errors since the counters were cleared"),
    Key.IB_LINK_INTEGRITY_ERRORS_PER_HOUR_MAX: ThresholdKey(
        "max", "count/h", "RDMA port local_link_integrity_errors gained per hour"),
    Key.IB_BUFFER_OVERRUNS_MAX: ThresholdKey(
        "max", "count", "RDMA port excessive_buffer_overrun_errors since the counters "
        "were cleared"),
    Key.IB_BUFFER_OVERRUNS_PER_HOUR_MAX: ThresholdKey(
        "max", "count/h", "RDMA port excessive_buffer_overrun_errors gained per hour"),
    # --- standard / acceptance level: what the hardware delivers under load ---------------
    Key.GEMM_BF16_TFLOPS_MIN: ThresholdKey("min", "TFLOPS", "dense bf16 GEMM per GPU"),
    Key.GEMM_FP16_TFLOPS_MIN: ThresholdKey("min", "TFLOPS", "dense fp16 GEMM per GPU"),
    Key.GEMM_TF32_TFLOPS_MIN: ThresholdKey("min", "TFLOPS", "dense tf32 GEMM per GPU"),
    Key.GEMM_FP8_TFLOPS_MIN: ThresholdKey("min", "TFLOPS", "dense fp8 (e4m3) GEMM per GPU"),
    Key.GEMM_FP4_TFLOPS_MIN: ThresholdKey(
        "min", "TFLOPS", "dense fp4 (NVFP4: e2m1, e4m3 scale per 16) GEMM per GPU"),
    Key.GEMM_FP64_TFLOPS_MIN: ThresholdKey("min", "TFLOPS", "dense fp64 GEMM per GPU"),
    Key.HBM_PATTERN_GBPS_MIN: ThresholdKey(
        "min", "GB/s", "HBM pattern test, bytes written + verified per s"),
    Key.HBM_BANDWIDTH_GBPS_MIN: ThresholdKey("min", "GB/s", "device-to-device copy, read+write"),
    Key.H2D_GBPS_MIN: ThresholdKey("min", "GB/s", "pinned host-to-device copy, local NUMA"),
    Key.D2H_GBPS_MIN: ThresholdKey("min", "GB/s", "pinned device-to-host copy, local NUMA"),
    Key.P2P_UNIDIR_GBPS_MIN: ThresholdKey("min", "GB/s", "GPU-to-GPU copy, one direction"),
    Key.P2P_BIDIR_GBPS_MIN: ThresholdKey("min", "GB/s", "GPU-to-GPU copy, both directions"),
    Key.ALLREDUCE_BUSBW_GBPS_MIN: ThresholdKey("min", "GB/s", "all-reduce bus bandwidth"),
    Key.ALLGATHER_BUSBW_GBPS_MIN: ThresholdKey(
        "min", "GB/s", "all-gather bus bandwidth inside the node (nccl-tests busbw)"),
    Key.REDUCESCATTER_BUSBW_GBPS_MIN: ThresholdKey(
        "min", "GB/s", "reduce-scatter bus bandwidth inside the node (nccl-tests busbw)"),
    Key.ALLTOALL_BUSBW_GBPS_MIN: ThresholdKey(
        "min", "GB/s", "all-to-all bus bandwidth inside the node (nccl-tests busbw)"),
    Key.BROADCAST_BUSBW_GBPS_MIN: ThresholdKey(
        "min", "GB/s", "broadcast bus bandwidth inside the node (nccl-tests busbw)"),
    Key.MULTINODE_ALLREDUCE_BUSBW_GBPS_MIN: ThresholdKey(
        "min", "GB/s", "all-reduce bus bandwidth between this node and known-good ones"),
    Key.MULTINODE_ALLGATHER_BUSBW_GBPS_MIN: ThresholdKey(
        "min", "GB/s", "all-gather bus bandwidth between this node and known-good ones"),
    Key.MULTINODE_REDUCESCATTER_BUSBW_GBPS_MIN: ThresholdKey(
        "min", "GB/s", "reduce-scatter bus bandwidth between this node and known-good ones"),
    Key.MULTINODE_ALLTOALL_BUSBW_GBPS_MIN: ThresholdKey(
        "min", "GB/s", "all-to-all bus bandwidth between this node and known-good ones"),
    Key.IB_WRITE_BW_GBPS_MIN: ThresholdKey(
        "min", "Gb/s", "ib_write_bw per rail port, loopback on the node, host memory"),
    Key.IB_WRITE_BW_GDR_GBPS_MIN: ThresholdKey(
        "min", "Gb/s", "ib_write_bw per rail port, loopback, GPU memory (--use_cuda)"),
    Key.MULTINODE_IB_WRITE_BW_GBPS_MIN: ThresholdKey(
        "min", "Gb/s", "ib_write_bw per rail port between this node and a known-good one"),
    Key.BURNIN_TOKENS_PER_S_MIN: ThresholdKey("min", "tokens/s", "burn-in training throughput"),
    Key.BURNIN_TFLOPS_MIN: ThresholdKey("min", "TFLOPS", "burn-in achieved TFLOPS per GPU"),
    Key.FSDP_TOKENS_PER_S_MIN: ThresholdKey("min", "tokens/s", "FSDP training throughput"),
    Key.FSDP_TFLOPS_MIN: ThresholdKey("min", "TFLOPS", "FSDP model TFLOPS per GPU"),
    Key.FSDP_CHECKPOINT_WRITE_GBPS_MIN: ThresholdKey("min", "GB/s", "FSDP checkpoint write"),
    Key.FSDP_CHECKPOINT_READ_GBPS_MIN: ThresholdKey("min", "GB/s", "FSDP checkpoint read"),
    Key.FSDP_STRAGGLER_MARGIN_PCT_MAX: ThresholdKey(
        "max", "%", "FSDP rank step time above the median (default: straggler_margin_pct_max)"),
    Key.STRAGGLER_MARGIN_PCT_MAX: ThresholdKey("max", "%", "rank step time above the median"),
    Key.OUTLIER_MARGIN_PCT_MAX: ThresholdKey("max", "%", "figure below the node's own median"),
    # --- fleet trends (nodegate report, over each node's report history) -------------------
    Key.TREND_DRIFT_PCT_MAX: ThresholdKey(
        "max", "%", "a metric's move against the node's own baseline or its profile's median"),
    # --- load telemetry -----------------------------------------------------------------
    Key.THERMAL_MARGIN_C_MIN: ThresholdKey("min", "C", "slowdown threshold minus peak temp"),
    Key.MEM_TEMP_MAX_C: ThresholdKey("max", "C", "HBM temperature under load"),
    Key.POWER_FRACTION_MIN: ThresholdKey("min", "ratio", "GEMM power as a fraction of limit"),
    Key.CLOCK_FLOOR_MHZ_MIN: ThresholdKey("min", "MHz", "SM clock held under load"),
    # --- NVMe drives (nvme-cli SMART log) and the array under fio ----------------------------
    Key.NVME_PERCENTAGE_USED_MAX: ThresholdKey(
        "max", "%", "NVMe Percentage Used: share of the rated endurance consumed"),
    Key.NVME_MEDIA_ERRORS_MAX: ThresholdKey(
        "max", "count", "NVMe media and data integrity errors (unrecovered)"),
    Key.NVME_TEMPERATURE_MAX_C: ThresholdKey(
        "max", "C", "NVMe composite temperature (else the drive's own WCTEMP)"),
    Key.NVME_UNSAFE_SHUTDOWNS_GROWTH_MAX: ThresholdKey(
        "max", "count", "NVMe unsafe shutdowns gained since the previous report"),
    Key.FIO_SEQ_READ_GBPS_MIN: ThresholdKey("min", "GB/s", "array sequential read, direct I/O"),
    Key.FIO_SEQ_WRITE_GBPS_MIN: ThresholdKey("min", "GB/s", "array sequential write, direct I/O"),
    Key.FIO_RAND_READ_KIOPS_MIN: ThresholdKey("min", "kIOPS", "array random 4 KiB read"),
    # --- power path (PDU / BMC) -----------------------------------------------------------
    Key.INLET_TEMP_MAX_C: ThresholdKey("max", "C", "chassis inlet temperature"),
    Key.CIRCUIT_LOAD_FRACTION_MAX: ThresholdKey("max", "ratio", "draw / circuit rating"),
    Key.PSU_BUDGET_FRACTION_MAX: ThresholdKey("max", "ratio", "draw / non-redundant PSU capacity"),
    Key.BMC_TO_GPU_POWER_RATIO_MIN: ThresholdKey("min", "ratio", "BMC node power / NVML GPU sum"),
    Key.BMC_POWER_SOURCE_SPREAD_MAX: ThresholdKey(
        "max", "ratio", "spread of one BMC's node power figures / the largest"),
}


def key_named(name: str) -> Key | None:
    """The catalogue's key of that name, or None (a name a profile file wrote)."""
    try:
        return Key(name)
    except ValueError:
        return None


# --- GPU model features ---------------------------------------------------------------------
# What a GPU model has, as NVML exposes it (profile key ``gpu.features``, set by the GPU model
# layer with its ``source``). The judge (nodegate.judge.gpu) reads an NVML_ERROR_NOT_SUPPORTED
# answer through it: on a feature the model has, the GPU failed to answer (ERROR); on one it
# lacks, the checks do not apply (SKIP naming the feature).

#: Boolean feature -> what the model then has (the SKIP reason where it does not).
GPU_FEATURES: dict[str, str] = {
    "ecc": "ECC memory (nvmlDeviceGetEccMode, nvmlDeviceGetTotalEccErrors)",
    "row_remapping": "row remapping (nvmlDeviceGetRemappedRows)",
    "page_retirement": "page retirement (nvmlDeviceGetRetiredPages)",
    "gpu_fabric": "GPU fabric info (nvmlDeviceGetGpuFabricInfo(V))",
    "mig": "MIG (nvmlDeviceGetMigMode)",
    "recovery_action": "NVML's GPU recovery action (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)",
}
#: ``nvmlNvlinkVersion_t`` names a model may declare it reports (nvml.h ``NVML_NVLINK_VERSION_``
#: + this suffix); real drivers return more than one value for one NVLink generation.
NVLINK_VERSION_NAMES: tuple[str, ...] = ("1_0", "2_0", "2_2", "3_0", "3_1", "4_0", "5_0", "6_0")


class GpuFeatures(NamedTuple):
    """``gpu.features`` of a resolved profile, typed."""

    ecc: bool
    row_remapping: bool
    page_retirement: bool
    gpu_fabric: bool
    mig: bool
    recovery_action: bool
    nvlink_links: int
    nvlink_versions: tuple[str, ...]
    source: str

    @classmethod
    def of(cls, gpu_section: dict[str, object]) -> GpuFeatures:
        """From a resolved profile's ``gpu`` section (the schema made every key present)."""
        data = gpu_section["features"]
        assert isinstance(data, dict)  # the resolved schema requires it
        return cls(**{name: bool(data[name]) for name in GPU_FEATURES},
                   nvlink_links=int(data["nvlink_links"]),
                   nvlink_versions=tuple(str(v) for v in data["nvlink_versions"]),
                   source=str(data["source"]))

    def has(self, feature: str) -> bool:
        return bool(getattr(self, feature))


class Feature(Word):
    """What a check needs the node to have, as its resolved profile says. A check whose
    feature the profile lacks does not apply there: its thresholds are not required, and it is
    a documented SKIP naming the feature (never a missing number)."""

    # the GPU model (``gpu.features``, GPU_FEATURES): NVML calls the model answers
    ECC = "ecc"
    ROW_REMAPPING = "row_remapping"
    PAGE_RETIREMENT = "page_retirement"
    GPU_FABRIC = "gpu_fabric"
    MIG = "mig"
    RECOVERY_ACTION = "recovery_action"
    # the platform
    NVLINK = "nvlink"  # nvlink.links_per_gpu above 0
    NVSWITCH = "nvswitch"  # nvlink.nvswitch
    FABRICMANAGER = "fabricmanager"  # driver.fabricmanager
    ACS = "acs"  # host.acs_disabled: ACS must be off on the bridges above the GPUs
    NVME_ARRAY = "nvme_array"  # nvme.devices above 0
    NVME_SMART = "nvme_smart"  # nvme.smart: SMART health read with nvme-cli
    NVME_FIO = "nvme_fio"  # nvme.fio: the array under fio at the load levels
    RAILS = "rails"  # network.rails: the RDMA rails the node joins through
    PEERS = "peers"  # gpu.count above 1: GPU-to-GPU copies and collectives


def has_feature(data: Mapping[str, Any], feature: Feature) -> bool:
    """Whether the resolved profile ``data`` has ``feature`` (the schema made the sections
    these read present, except the optional ``network``)."""
    if feature.value in GPU_FEATURES:
        return bool(data["gpu"]["features"][feature.value])
    nvlink, nvme = data["nvlink"], data["nvme"]
    return bool({
        Feature.NVLINK: nvlink["links_per_gpu"] > 0,
        Feature.NVSWITCH: nvlink["nvswitch"],
        Feature.FABRICMANAGER: data["driver"]["fabricmanager"],
        Feature.ACS: data["host"]["acs_disabled"],
        Feature.NVME_ARRAY: nvme["devices"] > 0,
        Feature.NVME_SMART: nvme.get("smart"),
        Feature.NVME_FIO: nvme.get("fio"),
        Feature.RAILS: (data.get("network") or {}).get("rails"),
        Feature.PEERS: int(data["gpu"]["count"]) > 1,
    }[feature])
