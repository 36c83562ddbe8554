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
``NODEGATE_LOAD_HBM_FAULT=N[:K]`` GPU N's HBM pattern test finds K words (default 1) flipped
                                 after every pattern is written (a stuck bit, in effect)
``NODEGATE_LOAD_CORRUPT_COPY=KIND:T`` one byte of a copy's destination is flipped after the
                                 timed copies: KIND ``hbm``, ``h2d``, ``d2h`` (T: the GPU),
                                 ``p2p`` (T: ``S-D``, the ordered pair) or ``allreduce``
                                 (T: the rank whose result is corrupted); several
                                 comma-separated (``p2p:0-1,h2d:2``)
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
HBM_FAULT = "NODEGATE_LOAD_HBM_FAULT"
CORRUPT_COPY = "NODEGATE_LOAD_CORRUPT_COPY"
ALL = (CORRUPT_GPU, SLOW_RANK, KILL_RANK, HANG_RANK, FAIL_RANK, CORRUPT_CHECKPOINT, HBM_FAULT,
       CORRUPT_COPY)


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


def hbm_fault_words(rank: int) -> int:
    """How many words of ``rank``'s HBM pattern buffer the seam flips per pattern (0: none)."""
    parsed = _parse(HBM_FAULT, 1)
    return max(1, int(parsed[1])) if parsed and parsed[0] == rank else 0


def corrupt_copy(kind: str, target: str) -> bool:
    """Whether the copy seam corrupts ``kind``'s destination for ``target`` (a rank, or
    ``"s-d"`` for a P2P pair)."""
    for item in os.environ.get(CORRUPT_COPY, "").split(","):
        got_kind, _, got_target = item.strip().partition(":")
        if got_kind.strip() == kind and got_target.strip() == target:
            return True
    return False
