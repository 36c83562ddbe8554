"""Test seams: environment variables that inject one fault into one worker.

They exist so the suite's failure paths are exercised for real (a corrupted GEMM output, a
slow rank, a rank that dies or hangs) instead of being mocked. Unset, they cost nothing.

=============================== ==============================================================
``NODEGATE_LOAD_CORRUPT_GPU=N[:K]`` GPU N flips one bit of its GEMM output (silent corruption):
                                 every iteration, or with K only every K-th (an intermittent
                                 fault: its first output is clean, later ones are not)
``NODEGATE_LOAD_SLOW_RANK=R[:S]`` rank R sleeps S seconds (default 0.05) in every burn-in
                                 forward pass and GEMM iteration (a straggler)
``NODEGATE_LOAD_KILL_RANK=R[:K]`` rank R SIGKILLs itself at burn-in step K (default 2)
``NODEGATE_LOAD_HANG_RANK=R[:K]`` rank R stops responding at burn-in step K (default 2)
``NODEGATE_LOAD_FAIL_RANK=R[:K]`` rank R raises as a CUDA error would (uncorrectable ECC, Xid)
                                 at burn-in step K (default 2), at the sync inside the step, or
                                 once GEMM iteration K is done: alive, out of the collectives
``NODEGATE_LOAD_CORRUPT_CHECKPOINT=R`` rank R flips one bit of its first tensor's bytes in its
                                 FSDP checkpoint file, on disk, before the verified reload
=============================== ==============================================================
"""

from __future__ import annotations

import os

CORRUPT_GPU = "NODEGATE_LOAD_CORRUPT_GPU"
SLOW_RANK = "NODEGATE_LOAD_SLOW_RANK"
KILL_RANK = "NODEGATE_LOAD_KILL_RANK"
HANG_RANK = "NODEGATE_LOAD_HANG_RANK"
FAIL_RANK = "NODEGATE_LOAD_FAIL_RANK"
CORRUPT_CHECKPOINT = "NODEGATE_LOAD_CORRUPT_CHECKPOINT"
ALL = (CORRUPT_GPU, SLOW_RANK, KILL_RANK, HANG_RANK, FAIL_RANK, CORRUPT_CHECKPOINT)


def _parse(name: str, default: float) -> tuple[int, float] | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    target, _, arg = raw.partition(":")
    return int(target), float(arg) if arg else default


def corrupt_every(rank: int) -> int | None:
    """Every how many GEMM iterations ``rank`` corrupts its output (1: all), None: never."""
    parsed = _parse(CORRUPT_GPU, 1)
    return max(1, int(parsed[1])) if parsed and parsed[0] == rank else None


def slow_seconds(rank: int) -> float:
    parsed = _parse(SLOW_RANK, 0.05)
    return parsed[1] if parsed and parsed[0] == rank else 0.0


def fault_step(name: str, rank: int) -> int | None:
    """Step at which ``rank`` should die (KILL_RANK), hang (HANG_RANK) or raise (FAIL_RANK),
    if it is the target."""
    parsed = _parse(name, 2)
    return int(parsed[1]) if parsed and parsed[0] == rank else None


def active() -> dict[str, str]:
    """The seams set in this environment (recorded in the report so a test run is obvious)."""
    return {k: os.environ[k] for k in ALL if os.environ.get(k)}


def injected_error(rank: int, step: int) -> str:
    """The FAIL_RANK seam's message, shaped like the CUDA error it stands for."""
    return (f"CUDA error: uncorrectable ECC error encountered (injected by {FAIL_RANK} on rank "
            f"{rank} at step {step})")


def corrupt_checkpoint(rank: int) -> bool:
    """``rank`` corrupts its shard of the FSDP checkpoint on disk before the reload."""
    parsed = _parse(CORRUPT_CHECKPOINT, 0)
    return bool(parsed and parsed[0] == rank)
