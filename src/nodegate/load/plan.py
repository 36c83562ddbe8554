"""How long each load phase should take, before it runs.

An operator holding a node out of service wants to know for how long; a profile whose sizes
would blow the level's budget (standard about 3 minutes, acceptance at most 15 on an 8-GPU
node) should be caught when it is written, not after a quarter of an hour. Timed phases take
their profile duration; copy phases are sized from their bytes at the profile's own bandwidth
floor (a node that passes is at least that fast), plus a rough allowance for making buffers.
"""

from __future__ import annotations

from typing import Any

from nodegate.load import formulas, fsdp_size
from nodegate.load.config import LoadConfig
from nodegate.load.formulas import COLLECTIVE_CHECK, NODE_COLLECTIVES
from nodegate.load.tasks import JUDGED_ITERS

#: Level budgets on a full node: standard "about 3 minutes", acceptance "at most 15".
BUDGET_S = {"standard": 240.0, "acceptance": 900.0}
#: Bandwidth assumed where a profile sets no floor (GB/s): slow, so the estimate stays high.
FALLBACK_GBPS = 10.0
#: Per-phase overhead: workers pick the task up, calibrate, allocate, synchronise.
SETUP_S = 2.0
#: The all-reduce task's time budget per swept size (``tasks.allreduce``'s default).
ALLREDUCE_SIZE_S = 0.2
#: The host copies of one GPU run from its local NUMA node and a remote one.
PLACEMENTS = 2
#: Making each host buffer (first-touch memset from one thread, pinning, page scan), as bytes
#: per second: a rough allowance, not a measured figure.
HOST_BUFFER_GBPS = 2.0
#: Checksumming a host buffer after its copy (one CPU thread), as bytes per second:
#: ~2 GB/s was seen on the shared 2-core CI machine (0.135 s per 256 MiB), a server is faster.
HOST_CHECK_GBPS = 2.0
#: The all-reduce result check (nccl-tests -c): one untimed run per size, then a fill and a
#: compare of about the buffer's size each, counted as this many runs of the largest size.
ALLREDUCE_CHECK_RUNS = 3


def _seconds(nbytes: float, th: dict[str, Any], name: str,
             fallback: float = FALLBACK_GBPS) -> float:
    floor = th.get(name)
    gbps = floor.value if floor is not None and floor.value > 0 else fallback
    return nbytes / (gbps * 1e9)


def _collective_s(name: str, nbytes: int, world: int, th: dict[str, Any]) -> float:
    """One run of ``name`` at ``nbytes`` at the profile's busbw floor (fallback: slow)."""
    floor = th.get(f"{COLLECTIVE_CHECK[name]}_busbw_gbps_min")
    busbw = floor.value if floor is not None and floor.value > 0 else FALLBACK_GBPS
    return nbytes / (busbw / formulas.collective_factor(name, world) * 1e9)


def phases(cfg: LoadConfig, world: int, th: dict[str, Any]) -> dict[str, float]:
    """Phase name -> expected seconds on a healthy node of ``world`` GPUs, in run order."""
    out: dict[str, float] = {}
    for dtype in cfg.dtypes:
        out["gemm" if dtype == cfg.dtypes[0] else f"gemm_{dtype}"] = cfg.gemm_seconds + SETUP_S
    copies = cfg.copy_iters + 1  # one warm-up each
    hbm = copies * _seconds(2 * (cfg.hbm_bytes // 2), th, "hbm_bandwidth_gbps_min")
    host = PLACEMENTS * (copies * (_seconds(cfg.copy_bytes, th, "h2d_gbps_min")
                                   + _seconds(cfg.copy_bytes, th, "d2h_gbps_min"))
                         + cfg.copy_bytes / (HOST_BUFFER_GBPS * 1e9)
                         + 2 * cfg.copy_bytes / (HOST_CHECK_GBPS * 1e9))
    out["memory"] = SETUP_S + hbm + world * host  # host copies take turns
    if world > 1:
        # per ordered pair: a warm-up both ways, the one-way run, the both-ways run
        per_pair = (2 + cfg.copy_iters) * _seconds(cfg.p2p_bytes, th, "p2p_unidir_gbps_min") \
            + cfg.copy_iters * _seconds(2 * cfg.p2p_bytes, th, "p2p_bidir_gbps_min")
        out["p2p"] = SETUP_S + world * (world - 1) * per_pair
        floor = th.get("allreduce_busbw_gbps_min")
        busbw = floor.value if floor is not None and floor.value > 0 else FALLBACK_GBPS
        algbw = busbw * world / (2 * (world - 1))
        sizes = formulas.sweep_sizes(cfg.allreduce_max_bytes, steps=cfg.allreduce_steps)
        largest = sizes[-1] / (algbw * 1e9)
        out["allreduce"] = (SETUP_S + len(sizes) * ALLREDUCE_SIZE_S
                            + (JUDGED_ITERS + 2 + ALLREDUCE_CHECK_RUNS) * largest)
        out["collectives"] = SETUP_S + sum(
            len(sizes) * ALLREDUCE_SIZE_S + (JUDGED_ITERS + 2) * _collective_s(
                name, sizes[-1], world, th) for name in NODE_COLLECTIVES)
    if cfg.acceptance:
        for dtype in cfg.acceptance_dtypes:
            out[f"gemm_{dtype}"] = cfg.dtype_gemm_seconds + SETUP_S
        out["hbm_patterns"] = hbm_patterns_seconds(cfg, th)
        out["burnin"] = cfg.burnin_seconds + SETUP_S
        if cfg.fsdp:
            out["fsdp"] = fsdp_phase(cfg.fsdp, world, th)["seconds"]
        out["soak"] = cfg.soak_seconds + SETUP_S
    out.update(cfg.storage_s)  # fio on the array and DCGM's diagnostic (battery.storage)
    return out


#: Model TFLOPS assumed where a profile sets no ``fsdp_tflops_min`` (slow: the minimum steps
#: take longer), and checkpoint GB/s without a floor (slow).
FSDP_FALLBACK_TFLOPS = 50.0
CHECKPOINT_FALLBACK_GBPS = 1.0
#: Making and initialising the sharded model, twice (trained, then the fresh one the
#: checkpoint is read into), as parameters per second: a rough allowance, not measured.
FSDP_INIT_PARAMS_PER_S = 2e9


def fsdp_phase(fsdp: dict[str, Any], world: int, th: dict[str, Any]) -> dict[str, Any]:
    """The FSDP burn-in's plan: its seconds (periodic checkpoints included: ``fsdp.train``),
    or its minimum steps at the profile's TFLOPS floor where longer, one more step, two
    writes at the write floor (a periodic one across the deadline, the final one), one read
    at the read floor, two model builds. Unresolved settings are sized for the profile's
    GPUs."""
    run = fsdp if "n_params" in fsdp else fsdp_size.resolve(fsdp, cuda=True, world=world)
    floor = th.get("fsdp_tflops_min")
    step_s = fsdp_size.step_seconds(run, floor.value if floor is not None and floor.value > 0
                                    else FSDP_FALLBACK_TFLOPS)
    train_s = max(float(run["seconds"]), run["min_steps"] * step_s) + step_s
    write_s = _seconds(run["checkpoint_bytes"], th, "fsdp_checkpoint_write_gbps_min",
                       CHECKPOINT_FALLBACK_GBPS)
    read_s = _seconds(run["checkpoint_bytes"], th, "fsdp_checkpoint_read_gbps_min",
                      CHECKPOINT_FALLBACK_GBPS)
    init_s = 2 * run["n_params"] / world / FSDP_INIT_PARAMS_PER_S
    return {"seconds": SETUP_S + init_s + train_s + 2 * write_s + read_s, "step_s": step_s,
            "train_s": train_s, "write_s": write_s, "read_s": read_s, "init_s": init_s,
            "n_params": run["n_params"], "layers": run["model"]["layers"],
            "checkpoint_bytes": run["checkpoint_bytes"]}


def hbm_patterns_seconds(cfg: LoadConfig, th: dict[str, Any]) -> float:
    """The pattern test runs for its seconds (one whole round of its 4 passes at the least),
    then finishes the pass it is in; a pass writes and reads the tested bytes once, at the
    profile's pattern-rate floor. The GPU's free memory is not known before the run: the
    estimate takes the profile's total (``gpu.memory_mib``), else the CPU stand-in."""
    nbytes = cfg.hbm_test_fraction * (cfg.gpu_memory_bytes or cfg.hbm_test_cpu_bytes)
    one_pass = _seconds(2 * nbytes, th, "hbm_pattern_gbps_min")
    return SETUP_S + max(cfg.hbm_test_seconds, 4 * one_pass) + one_pass


def total(cfg: LoadConfig, world: int, th: dict[str, Any]) -> float:
    return sum(phases(cfg, world, th).values())


def describe(cfg: LoadConfig, world: int, th: dict[str, Any]) -> str:
    """One line for the operator: the level, its planned time and where it goes."""
    parts = phases(cfg, world, th)
    spent = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in parts.items())
    planned = sum(parts.values())
    over = (f"; over the {cfg.level} budget of {BUDGET_S[cfg.level] / 60:.0f} min"
            if planned > BUDGET_S[cfg.level] else "")
    return f"load: {cfg.level} on {world} GPU(s), planned ~{planned / 60:.1f} min ({spent}){over}"
