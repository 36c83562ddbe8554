"""The load checks (torch: CUDA/NCCL on GPUs, CPU/gloo in tests and the lab), declared once
(``nodegate.judge.declare``), in the order the load levels run their phases.

Judge functions: ``nodegate.judge.load`` (``phase_completed`` for every ``<phase>_completed``,
``gemm``, ``memory``, ``p2p``, ``allreduce``, ``collectives``, ``burnin``, ``telemetry``,
``pcie_under_load``), ``nodegate.judge.load_integrity`` (what arrived) and
``nodegate.judge.fsdp``; each emits several checks, and each check names the function.
"""

from __future__ import annotations

from nodegate.judge.declare import Check, check
from nodegate.profiles.threshold_keys import Feature, Key
from nodegate.vocabulary import Group, Level, Subject

S = Subject
STD, ACC = Level.STANDARD, Level.ACCEPTANCE
LOAD, INTEGRITY, FSDP = ("nodegate.judge.load:", "nodegate.judge.load_integrity:",
                         "nodegate.judge.fsdp:")
COMPLETED = LOAD + "phase_completed"
PEERS = (Feature.PEERS,)
OUTLIER = Key.OUTLIER_MARGIN_PCT_MAX

#: GEMM dtype -> the floor of its TFLOPS per GPU.
GEMM_TFLOPS_KEY: dict[str, Key] = {
    "bf16": Key.GEMM_BF16_TFLOPS_MIN, "fp16": Key.GEMM_FP16_TFLOPS_MIN,
    "tf32": Key.GEMM_TF32_TFLOPS_MIN, "fp8": Key.GEMM_FP8_TFLOPS_MIN,
    "fp4": Key.GEMM_FP4_TFLOPS_MIN, "fp64": Key.GEMM_FP64_TFLOPS_MIN,
}
#: Host copy direction -> its floor.
HOST_COPY_KEY: dict[str, Key] = {"h2d": Key.H2D_GBPS_MIN, "d2h": Key.D2H_GBPS_MIN}
#: P2P kind -> its floor.
P2P_KEY: dict[str, Key] = {"unidir": Key.P2P_UNIDIR_GBPS_MIN, "bidir": Key.P2P_BIDIR_GBPS_MIN}
#: Check infix (``formulas.COLLECTIVE_CHECK``) -> the floor of its busbw inside the node.
BUSBW_KEY: dict[str, Key] = {
    "allreduce": Key.ALLREDUCE_BUSBW_GBPS_MIN, "allgather": Key.ALLGATHER_BUSBW_GBPS_MIN,
    "reducescatter": Key.REDUCESCATTER_BUSBW_GBPS_MIN, "alltoall": Key.ALLTOALL_BUSBW_GBPS_MIN,
    "broadcast": Key.BROADCAST_BUSBW_GBPS_MIN,
}


def _load(name: str, subject: Subject, level: Level, meaning: str, judge: str, *keys: Key,
          requires: tuple[Feature, ...] = (), fallback: tuple[Key, ...] = (),
          phase: str | None = None, dtype: str | None = None) -> Check:
    return check(name, meaning, judge, *keys, subject=subject, group=Group.LOAD, level=level,
                 requires=requires, fallback=fallback, phase=phase, dtype=dtype)


def _dtype(dtype: str) -> tuple[Check, ...]:
    """A further GEMM dtype's checks (bf16 keeps the unsuffixed names)."""
    gemm = LOAD + "gemm"
    return (
        _load(f"gemm_{dtype}_completed", S.COMPUTE_DTYPES, STD,
              f"every rank finished the {dtype} GEMM phase", COMPLETED, dtype=dtype),
        _load(f"gemm_tflops_{dtype}", S.COMPUTE_DTYPES, STD, f"dense {dtype} GEMM TFLOPS per GPU",
              gemm, GEMM_TFLOPS_KEY[dtype], dtype=dtype),
        _load(f"gemm_consistency_{dtype}", S.COMPUTE_DTYPES, STD,
              f"{dtype} GEMM output bit-identical across GPUs and iterations", gemm, dtype=dtype),
        _load(f"gemm_tflops_{dtype}_outlier", S.COMPUTE_DTYPES, STD,
              f"{dtype} GEMM TFLOPS against the node's own median", gemm, OUTLIER, dtype=dtype),
    )


CHECKS: tuple[Check, ...] = (
    _load("gemm_completed", S.COMPUTE, STD, "every rank finished the GEMM phase", COMPLETED,
          phase="gemm"),
    _load("gemm_tflops", S.COMPUTE, STD,
          "dense GEMM TFLOPS per GPU (bf16; gemm_tflops_fp16/_tf32 for others)", LOAD + "gemm",
          Key.GEMM_BF16_TFLOPS_MIN, dtype="bf16"),
    _load("gemm_consistency", S.COMPUTE, STD,
          "GEMM output bit-identical across GPUs and iterations (SDC)", LOAD + "gemm",
          dtype="bf16"),
    _load("gemm_tflops_outlier", S.COMPUTE, STD, "GEMM TFLOPS against the node's own median",
          LOAD + "gemm", OUTLIER, dtype="bf16"),
    _load("memory_completed", S.BANDWIDTH, STD, "every rank finished the memory phase",
          COMPLETED, phase="memory"),
    _load("hbm_bandwidth", S.BANDWIDTH, STD, "device-to-device copy bandwidth (read + write)",
          LOAD + "memory", Key.HBM_BANDWIDTH_GBPS_MIN),
    _load("hbm_bandwidth_outlier", S.BANDWIDTH, STD,
          "HBM bandwidth against the node's own median", LOAD + "memory", OUTLIER),
    _load("h2d_bandwidth", S.BANDWIDTH, STD,
          "pinned host-to-device copy from the GPU's own NUMA node", LOAD + "memory",
          Key.H2D_GBPS_MIN),
    _load("d2h_bandwidth", S.BANDWIDTH, STD,
          "pinned device-to-host copy to the GPU's own NUMA node", LOAD + "memory",
          Key.D2H_GBPS_MIN),
    _load("h2d_bandwidth_outlier", S.BANDWIDTH, STD,
          "H2D bandwidth against the node's own median", LOAD + "memory", OUTLIER),
    _load("d2h_bandwidth_outlier", S.BANDWIDTH, STD,
          "D2H bandwidth against the node's own median", LOAD + "memory", OUTLIER),
    _load("p2p_completed", S.BANDWIDTH, STD, "the P2P phase finished", COMPLETED, phase="p2p",
          requires=PEERS),
    _load("p2p_unidir", S.BANDWIDTH, STD, "GPU-to-GPU copy, one direction, per ordered pair",
          LOAD + "p2p", Key.P2P_UNIDIR_GBPS_MIN, requires=PEERS),
    _load("p2p_bidir", S.BANDWIDTH, STD,
          "GPU-to-GPU copy, both directions at once, per ordered pair", LOAD + "p2p",
          Key.P2P_BIDIR_GBPS_MIN, requires=PEERS),
    _load("p2p_unidir_outlier", S.BANDWIDTH, STD,
          "P2P one-direction figure against the node's median pair", LOAD + "p2p", OUTLIER,
          requires=PEERS),
    _load("p2p_bidir_outlier", S.BANDWIDTH, STD,
          "P2P both-direction figure against the node's median pair", LOAD + "p2p", OUTLIER,
          requires=PEERS),
    _load("allreduce_completed", S.BANDWIDTH, STD, "every rank finished the all-reduce sweep",
          COMPLETED, phase="allreduce", requires=PEERS),
    _load("allreduce_busbw", S.BANDWIDTH, STD,
          "all-reduce bus bandwidth at the profile's size (nccl-tests busbw)",
          LOAD + "allreduce", Key.ALLREDUCE_BUSBW_GBPS_MIN, requires=PEERS),
    _load("collectives_completed", S.BANDWIDTH, STD,
          "every rank finished the all-gather/reduce-scatter/all-to-all/broadcast sweeps",
          COMPLETED, phase="collectives", requires=PEERS),
    _load("allgather_busbw", S.BANDWIDTH, STD,
          "all-gather bus bandwidth at the profile's size (nccl-tests busbw)",
          LOAD + "collectives", Key.ALLGATHER_BUSBW_GBPS_MIN, requires=PEERS),
    _load("reducescatter_busbw", S.BANDWIDTH, STD,
          "reduce-scatter bus bandwidth (nccl-tests busbw)", LOAD + "collectives",
          Key.REDUCESCATTER_BUSBW_GBPS_MIN, requires=PEERS),
    _load("alltoall_busbw", S.BANDWIDTH, STD, "all-to-all bus bandwidth (nccl-tests busbw)",
          LOAD + "collectives", Key.ALLTOALL_BUSBW_GBPS_MIN, requires=PEERS),
    _load("broadcast_busbw", S.BANDWIDTH, STD, "broadcast bus bandwidth (nccl-tests busbw)",
          LOAD + "collectives", Key.BROADCAST_BUSBW_GBPS_MIN, requires=PEERS),
    _load("hbm_patterns_completed", S.HBM_PATTERNS, ACC,
          "every rank finished the whole-HBM pattern test", COMPLETED, phase="hbm_patterns"),
    _load("burnin_completed", S.BURNIN, ACC, "every rank finished the burn-in training",
          COMPLETED, phase="burnin"),
    _load("burnin_loss", S.BURNIN, ACC, "burn-in loss finite and falling", LOAD + "burnin"),
    _load("burnin_straggler", S.BURNIN, ACC, "rank forward time against the median rank",
          LOAD + "burnin", Key.STRAGGLER_MARGIN_PCT_MAX),
    _load("burnin_tokens_per_s", S.BURNIN, ACC, "burn-in training throughput of the node",
          LOAD + "burnin", Key.BURNIN_TOKENS_PER_S_MIN),
    _load("burnin_tflops", S.BURNIN, ACC, "burn-in achieved TFLOPS per GPU", LOAD + "burnin",
          Key.BURNIN_TFLOPS_MIN),
    _load("burnin_param_consistency", S.BURNIN, ACC,
          "parameters bit-identical across ranks after training", LOAD + "burnin"),
    _load("fsdp_completed", S.FSDP, ACC,
          "every rank finished the FSDP burn-in and its checkpoint round trip", COMPLETED,
          phase="fsdp"),
    _load("fsdp_loss", S.FSDP, ACC, "FSDP training loss finite and falling", FSDP + "fsdp"),
    # fsdp_straggler_margin_pct_max when set, else the burn-in's straggler margin
    _load("fsdp_straggler", S.FSDP, ACC, "rank FSDP step time against the median rank",
          FSDP + "fsdp", Key.STRAGGLER_MARGIN_PCT_MAX,
          fallback=(Key.FSDP_STRAGGLER_MARGIN_PCT_MAX,)),
    _load("fsdp_tokens_per_s", S.FSDP, ACC, "FSDP training throughput of the node",
          FSDP + "fsdp", Key.FSDP_TOKENS_PER_S_MIN),
    _load("fsdp_tflops", S.FSDP, ACC, "FSDP model TFLOPS per GPU", FSDP + "fsdp",
          Key.FSDP_TFLOPS_MIN),
    _load("fsdp_checkpoint_write", S.FSDP, ACC,
          "sharded checkpoint write rate (torch.distributed.checkpoint, fsync)", FSDP + "fsdp",
          Key.FSDP_CHECKPOINT_WRITE_GBPS_MIN),
    _load("fsdp_checkpoint_read", S.FSDP, ACC,
          "sharded checkpoint read rate into a fresh model (cold page cache)", FSDP + "fsdp",
          Key.FSDP_CHECKPOINT_READ_GBPS_MIN),
    _load("fsdp_checkpoint_verify", S.FSDP, ACC,
          "reloaded model and optimizer state bit-identical to the trained", FSDP + "fsdp"),
    _load("soak_completed", S.SOAK, ACC, "every rank finished the thermal/power soak",
          COMPLETED, phase="soak"),
    # acceptance integrity: what arrived (copy checksums, all-reduce -c), the whole HBM
    _load("hbm_patterns", S.HBM_PATTERNS, ACC,
          "HBM pattern test (address, walking ones/zeros, random): no bad word",
          INTEGRITY + "hbm_patterns"),
    _load("hbm_patterns_gbps", S.HBM_PATTERNS, ACC,
          "HBM pattern test rate (bytes written + verified per second)",
          INTEGRITY + "hbm_patterns", Key.HBM_PATTERN_GBPS_MIN),
    _load("hbm_copy_verified", S.INTEGRITY, STD,
          "device-to-device copy: destination checksum equals the source's",
          INTEGRITY + "memory_copies"),
    _load("h2d_copy_verified", S.INTEGRITY, STD,
          "host-to-device copy: destination checksum equals the source's",
          INTEGRITY + "memory_copies"),
    _load("d2h_copy_verified", S.INTEGRITY, STD,
          "device-to-host copy: destination checksum equals the source's",
          INTEGRITY + "memory_copies"),
    _load("p2p_copy_verified", S.INTEGRITY, STD,
          "GPU-to-GPU copy per ordered pair: destination equals the source",
          INTEGRITY + "p2p_copies", requires=PEERS),
    _load("allreduce_verified", S.INTEGRITY, STD,
          "all-reduce result equals the exact expected sum (nccl-tests -c)",
          INTEGRITY + "allreduce_results", requires=PEERS),
    # GEMM in the further dtypes: speed and bit compare
    _load("gemm_bf16_completed", S.COMPUTE_DTYPES, STD,
          "every rank finished the bf16 GEMM phase (bf16 not listed first)", COMPLETED,
          dtype="bf16"),
    *(c for dtype in ("fp16", "tf32", "fp8", "fp4", "fp64") for c in _dtype(dtype)),
    # telemetry sampled under load
    _load("thermal_peak", S.SOAK, STD, "slowdown threshold minus peak temperature under load",
          LOAD + "telemetry", Key.THERMAL_MARGIN_C_MIN),
    _load("mem_temp_peak", S.SOAK, STD, "peak HBM temperature under load", LOAD + "telemetry",
          Key.MEM_TEMP_MAX_C),
    _load("thermal_events", S.SOAK, STD,
          "no HW slowdown, thermal or power-brake event under load", LOAD + "telemetry"),
    _load("power_under_load", S.SOAK, STD,
          "power under GEMM as a fraction of the enforced limit", LOAD + "telemetry",
          Key.POWER_FRACTION_MIN),
    _load("clock_floor", S.SOAK, STD, "SM clock held under load (median of samples)",
          LOAD + "telemetry", Key.CLOCK_FLOOR_MHZ_MIN),
    _load("pcie_gen_under_load", S.PCIE_LOAD, STD,
          "PCIe link trains to the profile's gen under load (max of samples)",
          LOAD + "pcie_under_load"),
)
