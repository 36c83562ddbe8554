"""The catalogue of threshold names a profile may set, with their bound and unit.

One place: the schema is generated from it, the judge looks names up in it, and
``nodegate profiles show`` prints it. A name outside this table is a profile error.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

Bound = Literal["min", "max"]


class ThresholdKey(NamedTuple):
    bound: Bound
    unit: str
    meaning: str


THRESHOLD_KEYS: dict[str, ThresholdKey] = {
    # --- quick level: state read from NVML ---------------------------------------------------
    "gpu_temp_idle_max_c": ThresholdKey("max", "C", "GPU core temperature at idle"),
    "gpu_memory_deviation_pct_max": ThresholdKey(
        "max", "%", "NVML total memory away from gpu.memory_mib, either way"),
    "ecc_dbe_volatile_max": ThresholdKey("max", "count", "volatile double-bit ECC errors"),
    "ecc_dbe_aggregate_max": ThresholdKey("max", "count", "lifetime double-bit ECC errors"),
    "ecc_sbe_volatile_max": ThresholdKey("max", "count", "volatile single-bit ECC errors"),
    "ecc_sbe_aggregate_max": ThresholdKey("max", "count", "lifetime single-bit ECC errors"),
    "remap_pending_max": ThresholdKey("max", "count", "row remaps pending a GPU reset"),
    "remap_failure_max": ThresholdKey("max", "count", "row remap failures"),
    "remap_uncorrectable_max": ThresholdKey("max", "rows", "rows remapped for uncorrectable"),
    "retired_pages_max": ThresholdKey("max", "pages", "retired pages (SBE + DBE)"),
    "pcie_replay_max": ThresholdKey("max", "count", "PCIe replay counter"),
    "nvlink_crc_errors_max": ThresholdKey("max", "count", "NVLink CRC (flit + data) errors"),
    "nvlink_replay_errors_max": ThresholdKey("max", "count", "NVLink replay errors"),
    "nvlink_recovery_errors_max": ThresholdKey("max", "count", "NVLink recovery errors"),
    # counters judged by growth since the node's previous report (nodegate.judge.counters)
    "nvlink_crc_errors_per_hour_max": ThresholdKey("max", "count/h",
                                                   "NVLink CRC errors gained per hour"),
    "nvlink_replay_errors_per_hour_max": ThresholdKey("max", "count/h",
                                                      "NVLink replay errors gained per hour"),
    "nvlink_recovery_errors_per_hour_max": ThresholdKey(
        "max", "count/h", "NVLink recovery errors gained per hour"),
    "pcie_replays_per_hour_max": ThresholdKey("max", "count/h", "PCIe replays gained per hour"),
    "ecc_sbe_per_hour_max": ThresholdKey("max", "count/h",
                                         "volatile single-bit ECC errors gained per hour"),
    # RDMA port error counters (sysfs ports/N/counters): total, and growth per hour
    **{f"{check}{suffix}": ThresholdKey("max", unit, f"{what}{tail}")
       for check, what in (
           ("ib_link_flaps", "RDMA port link_downed (flaps)"),
           ("ib_link_recoveries", "RDMA port link_error_recovery"),
           ("ib_symbol_errors", "RDMA port symbol_error"),
           ("ib_rcv_errors", "RDMA port port_rcv_errors"),
           ("ib_xmit_discards", "RDMA port port_xmit_discards"),
           ("ib_link_integrity_errors", "RDMA port local_link_integrity_errors"),
           ("ib_buffer_overruns", "RDMA port excessive_buffer_overrun_errors"))
       for suffix, unit, tail in (("_max", "count", " since the counters were cleared"),
                                  ("_per_hour_max", "count/h", " gained per hour"))},
    # --- standard / acceptance level: what the hardware delivers under load ---------------
    "gemm_bf16_tflops_min": ThresholdKey("min", "TFLOPS", "dense bf16 GEMM per GPU"),
    "gemm_fp16_tflops_min": ThresholdKey("min", "TFLOPS", "dense fp16 GEMM per GPU"),
    "gemm_tf32_tflops_min": ThresholdKey("min", "TFLOPS", "dense tf32 GEMM per GPU"),
    "gemm_fp8_tflops_min": ThresholdKey("min", "TFLOPS", "dense fp8 (e4m3) GEMM per GPU"),
    "gemm_fp64_tflops_min": ThresholdKey("min", "TFLOPS", "dense fp64 GEMM per GPU"),
    "hbm_pattern_gbps_min": ThresholdKey("min", "GB/s",
                                         "HBM pattern test, bytes written + verified per s"),
    "hbm_bandwidth_gbps_min": ThresholdKey("min", "GB/s", "device-to-device copy, read+write"),
    "h2d_gbps_min": ThresholdKey("min", "GB/s", "pinned host-to-device copy, local NUMA"),
    "d2h_gbps_min": ThresholdKey("min", "GB/s", "pinned device-to-host copy, local NUMA"),
    "p2p_unidir_gbps_min": ThresholdKey("min", "GB/s", "GPU-to-GPU copy, one direction"),
    "p2p_bidir_gbps_min": ThresholdKey("min", "GB/s", "GPU-to-GPU copy, both directions"),
    "allreduce_busbw_gbps_min": ThresholdKey("min", "GB/s", "all-reduce bus bandwidth"),
    **{f"{infix}_busbw_gbps_min": ThresholdKey("min", "GB/s", f"{name} bus bandwidth "
                                               "inside the node (nccl-tests busbw)")
       for name, infix in (("all-gather", "allgather"), ("reduce-scatter", "reducescatter"),
                           ("all-to-all", "alltoall"), ("broadcast", "broadcast"))},
    **{f"multinode_{infix}_busbw_gbps_min": ThresholdKey(
        "min", "GB/s", f"{name} bus bandwidth between this node and known-good ones")
       for name, infix in (("all-reduce", "allreduce"), ("all-gather", "allgather"),
                           ("reduce-scatter", "reducescatter"), ("all-to-all", "alltoall"))},
    "ib_write_bw_gbps_min": ThresholdKey(
        "min", "Gb/s", "ib_write_bw per rail port, loopback on the node, host memory"),
    "ib_write_bw_gdr_gbps_min": ThresholdKey(
        "min", "Gb/s", "ib_write_bw per rail port, loopback, GPU memory (--use_cuda)"),
    "multinode_ib_write_bw_gbps_min": ThresholdKey(
        "min", "Gb/s", "ib_write_bw per rail port between this node and a known-good one"),
    "burnin_tokens_per_s_min": ThresholdKey("min", "tokens/s", "burn-in training throughput"),
    "burnin_tflops_min": ThresholdKey("min", "TFLOPS", "burn-in achieved TFLOPS per GPU"),
    "fsdp_tokens_per_s_min": ThresholdKey("min", "tokens/s", "FSDP training throughput"),
    "fsdp_tflops_min": ThresholdKey("min", "TFLOPS", "FSDP model TFLOPS per GPU"),
    "fsdp_checkpoint_write_gbps_min": ThresholdKey("min", "GB/s", "FSDP checkpoint write"),
    "fsdp_checkpoint_read_gbps_min": ThresholdKey("min", "GB/s", "FSDP checkpoint read"),
    "fsdp_straggler_margin_pct_max": ThresholdKey(
        "max", "%", "FSDP rank step time above the median (default: straggler_margin_pct_max)"),
    "straggler_margin_pct_max": ThresholdKey("max", "%", "rank step time above the median"),
    "outlier_margin_pct_max": ThresholdKey("max", "%", "figure below the node's own median"),
    # --- fleet trends (nodegate report, over each node's report history) -------------------
    "trend_drift_pct_max": ThresholdKey(
        "max", "%", "a metric's move against the node's own baseline or its profile's median"),
    "thermal_margin_c_min": ThresholdKey("min", "C", "slowdown threshold minus peak temp"),
    "mem_temp_max_c": ThresholdKey("max", "C", "HBM temperature under load"),
    "power_fraction_min": ThresholdKey("min", "ratio", "GEMM power as a fraction of limit"),
    "clock_floor_mhz_min": ThresholdKey("min", "MHz", "SM clock held under load"),
    # --- NVMe drives (nvme-cli SMART log) and the array under fio ----------------------------
    "nvme_percentage_used_max": ThresholdKey(
        "max", "%", "NVMe Percentage Used: share of the rated endurance consumed"),
    "nvme_media_errors_max": ThresholdKey(
        "max", "count", "NVMe media and data integrity errors (unrecovered)"),
    "nvme_temperature_max_c": ThresholdKey(
        "max", "C", "NVMe composite temperature (else the drive's own WCTEMP)"),
    "nvme_unsafe_shutdowns_growth_max": ThresholdKey(
        "max", "count", "NVMe unsafe shutdowns gained since the previous report"),
    "fio_seq_read_gbps_min": ThresholdKey("min", "GB/s", "array sequential read, direct I/O"),
    "fio_seq_write_gbps_min": ThresholdKey("min", "GB/s", "array sequential write, direct I/O"),
    "fio_rand_read_kiops_min": ThresholdKey("min", "kIOPS", "array random 4 KiB read"),
    # --- power path (PDU / BMC) -----------------------------------------------------------
    "inlet_temp_max_c": ThresholdKey("max", "C", "chassis inlet temperature"),
    "circuit_load_fraction_max": ThresholdKey("max", "ratio", "draw / circuit rating"),
    "psu_budget_fraction_max": ThresholdKey("max", "ratio", "draw / non-redundant PSU capacity"),
    "bmc_to_gpu_power_ratio_min": ThresholdKey("min", "ratio", "BMC node power / NVML GPU sum"),
    "bmc_power_source_spread_max": ThresholdKey(
        "max", "ratio", "spread of one BMC's node power figures / the largest"),
}


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
