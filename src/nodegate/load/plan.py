"""How long each load phase should take, before it runs.

An operator holding a node out of service wants to know for how long; a profile whose sizes
would blow the level's budget (standard about 3 minutes, acceptance at most 15 on an 8-GPU
node) should be caught when it is written, not after a quarter of an hour. Timed phases take
their profile duration; copy phases are sized from their bytes at the profile's own bandwidth
floor (a node that passes is at least that fast), plus a rough allowance for making buffers.
"""

from __future__ import annotations

from typing import Any

from nodegate.load import formulas
from nodegate.load.config import LoadConfig
from nodegate.load.formulas import COLLECTIVE_CHECK, NODE_COLLECTIVES
from nodegate.load.tasks import JUDGED_ITERS

#: Level budgets on a full node (issue 5): standard "about 3 minutes", acceptance "at most 15".
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


def _seconds(nbytes: float, th: dict[str, Any], name: str) -> float:
    floor = th.get(name)
    gbps = floor.value if floor is not None and floor.value > 0 else FALLBACK_GBPS
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
                         + cfg.copy_bytes / (HOST_BUFFER_GBPS * 1e9))
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
                            + (JUDGED_ITERS + 2) * largest)
        out["collectives"] = SETUP_S + sum(
            len(sizes) * ALLREDUCE_SIZE_S + (JUDGED_ITERS + 2) * _collective_s(
                name, sizes[-1], world, th) for name in NODE_COLLECTIVES)
    if cfg.acceptance:
        out["burnin"] = cfg.burnin_seconds + SETUP_S
        out["soak"] = cfg.soak_seconds + SETUP_S
    return out


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
