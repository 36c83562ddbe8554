"""Pure arithmetic of the load checks (no torch), so every figure is testable by hand."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence


def gemm_flops(n: int) -> float:
    """Floating-point operations of one n x n by n x n matmul (multiply + add)."""
    return 2.0 * n**3


def tflops(flops: float, seconds: float) -> float:
    return flops / seconds / 1e12 if seconds > 0 else 0.0


def gbps(nbytes: float, seconds: float) -> float:
    """Decimal GB/s, the unit nvbandwidth and nccl-tests print."""
    return nbytes / seconds / 1e9 if seconds > 0 else 0.0


def busbw_factor(world_size: int) -> float:
    """nccl-tests all-reduce bus factor 2(n-1)/n: each byte crosses the slowest link that often."""
    if world_size < 1:
        raise ValueError("world size must be >= 1")
    return 2.0 * (world_size - 1) / world_size


def allreduce_bandwidth(nbytes: int, seconds: float, world_size: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s for one all-reduce of ``nbytes`` taking ``seconds``."""
    alg = gbps(nbytes, seconds)
    return alg, alg * busbw_factor(world_size)


#: The collectives nccl-tests times, in its names (``<name>_perf``), in the order we run them.
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast")
#: Collectives swept inside the node beside all_reduce.
NODE_COLLECTIVES = ("all_gather", "reduce_scatter", "alltoall", "broadcast")
#: nccl-tests name -> our check's infix (``<infix>_busbw``, ``multinode_<infix>_busbw``).
COLLECTIVE_CHECK = {"all_reduce": "allreduce", "all_gather": "allgather",
                    "reduce_scatter": "reducescatter", "alltoall": "alltoall",
                    "broadcast": "broadcast"}


def collective_factor(collective: str, world_size: int) -> float:
    """nccl-tests' bus-bandwidth factor (doc/PERFORMANCE.md): all_reduce 2(n-1)/n; all_gather,
    reduce_scatter and alltoall (n-1)/n; broadcast 1. ``size`` in nccl-tests is the per-rank
    buffer of all_reduce/broadcast/alltoall, the whole output of all_gather and the whole input
    of reduce_scatter, so busbw compares with the hardware's bandwidth for all of them."""
    if world_size < 1:
        raise ValueError("world size must be >= 1")
    if collective == "all_reduce":
        return busbw_factor(world_size)
    if collective in ("all_gather", "reduce_scatter", "alltoall"):
        return (world_size - 1) / world_size
    if collective == "broadcast":
        return 1.0
    raise ValueError(f"unknown collective {collective!r} (one of {', '.join(COLLECTIVES)})")


def collective_bandwidth(collective: str, nbytes: int, seconds: float,
                         world_size: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s for one ``collective`` of nccl-tests size ``nbytes``."""
    alg = gbps(nbytes, seconds)
    return alg, alg * collective_factor(collective, world_size)


def collective_size(collective: str, nbytes: int, world_size: int) -> int:
    """``nbytes`` rounded down so each rank's share is whole float32 elements (all_gather,
    reduce_scatter and alltoall split the buffer in ``world_size`` parts)."""
    unit = 4 * (world_size if collective in ("all_gather", "reduce_scatter", "alltoall") else 1)
    return max(unit, nbytes - nbytes % unit)


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    if not ordered:
        raise ValueError("median of nothing")
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0


def percentile(values: Sequence[float], pct: float) -> float:
    """Linear-interpolated percentile (pct in 0..100)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of nothing")
    pos = (len(ordered) - 1) * pct / 100.0
    low, high = math.floor(pos), math.ceil(pos)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def pct_below(value: float, reference: float) -> float:
    """How far ``value`` is below ``reference``, in percent (negative when above)."""
    return (reference - value) / reference * 100.0 if reference else 0.0


def pct_above(value: float, reference: float) -> float:
    return (value - reference) / reference * 100.0 if reference else 0.0


def odd_ones_out(digests: dict[str, str]) -> tuple[str | None, list[str]]:
    """The majority digest and the entities that disagree with it.

    With no strict majority (e.g. 1 vs 1) there is no reference: every entity is suspect.
    """
    if not digests:
        return None, []
    counts = Counter(digests.values())
    top, votes = counts.most_common(1)[0]
    if votes * 2 <= len(digests) and len(counts) > 1:
        return None, sorted(digests)
    return top, sorted(e for e, d in digests.items() if d != top)


def sweep_sizes(max_bytes: int, *, steps: int = 5, factor: int = 4,
                floor: int = 4096) -> list[int]:
    """All-reduce sizes: max, max/4, ... (at most ``steps``), ascending, multiples of 4 bytes."""
    sizes: list[int] = []
    size = max_bytes
    while len(sizes) < steps and size >= floor:
        sizes.append(max(4, size - size % 4))
        size //= factor
    if not sizes:
        sizes.append(max(4, max_bytes - max_bytes % 4))
    return sorted(set(sizes))
