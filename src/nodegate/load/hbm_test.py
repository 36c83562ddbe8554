"""The whole-HBM pattern test: write known patterns over most of each GPU's free memory, read
them back, count the words that differ and name the first ones.

A bandwidth copy touches a few GiB; a weak HBM cell, row or stack elsewhere stays unseen until
a training job lands on it. So, on every GPU at once, this phase allocates a profile-set
fraction of the free memory (``load.hbm_test_fraction``, default 0.90) and runs, pass after
pass until its time is up (at least one whole round of the four), the patterns memory testers use:

- ``address``: every 64-bit word holds its own address (inverted on odd rounds, so every bit
  is seen at 0 and at 1): catches address-line faults, a word written to the wrong place;
- ``walking_ones`` / ``walking_zeros``: word i holds 1 << ((i + k) % 64) (or its complement) in
  round k: every bit lane alone at 1 (0) beside neighbours at the opposite value;
- ``random``: a seeded splitmix64 stream (seed = the round): data-dependent faults.

Each pattern is written over the whole buffer before any of it is read back, so the data sits
in HBM while the rest is written. Expected values are computed chunk by chunk (temporaries
stay at a few times ``hbm_test_chunk_bytes``, inside the free memory the fraction leaves), and
the mismatch count stays on the device until the pass ends: one host sync per pass. The rate
reported is bytes written plus bytes verified per second.

On CPU (the simulated board) the "free memory" is ``load.hbm_test_cpu_bytes`` per worker and
the code path is the same.
"""

from __future__ import annotations

import time
from typing import Any

from nodegate.load import seams
from nodegate.load.workers import WorkerContext

PATTERNS = ("address", "walking_ones", "walking_zeros", "random")
#: First bad words kept as evidence (the count is always complete).
FIRST_BAD = 8
#: The bit the HBM fault seam flips (a stuck bit in one lane).
SEAM_BIT = 5

_M64 = (1 << 64) - 1


def _signed(value: int) -> int:
    """A 64-bit pattern as the int64 torch stores."""
    value &= _M64
    return value - (1 << 64) if value >> 63 else value


_GOLDEN = _signed(0x9E3779B97F4A7C15)
_MIX1 = _signed(0xBF58476D1CE4E5B9)
_MIX2 = _signed(0x94D049BB133111EB)


def _lsr(x: Any, shift: int) -> Any:
    """Logical right shift of int64 words (torch's >> is arithmetic)."""
    return (x >> shift) & ((1 << (64 - shift)) - 1)


def expected(pattern: str, round_: int, start: int, stop: int, *, base: int, device: Any) -> Any:
    """The int64 words ``pattern`` puts at word indices [start, stop) in round ``round_``;
    ``base`` is the buffer's device address (the address pattern's origin)."""
    import torch

    idx = torch.arange(start, stop, dtype=torch.int64, device=device)
    if pattern == "address":
        words = idx.mul_(8).add_(_signed(base))
        return words.bitwise_not_() if round_ % 2 else words
    if pattern in ("walking_ones", "walking_zeros"):
        one = torch.ones((), dtype=torch.int64, device=device)
        words = torch.bitwise_left_shift(one, idx.add_(round_).remainder_(64))
        return words.bitwise_not_() if pattern == "walking_zeros" else words
    if pattern == "random":  # splitmix64 of (round, index): the same stream on any device
        z = idx.add_(1).mul_(_GOLDEN).add_(_signed(round_ * 0x632BE59BD9B4E019))
        z = (z ^ _lsr(z, 30)).mul_(_MIX1)
        z = (z ^ _lsr(z, 27)).mul_(_MIX2)
        return z ^ _lsr(z, 31)
    raise ValueError(f"unknown pattern {pattern!r}")


def sized(ctx: WorkerContext, fraction: float, cpu_bytes: int) -> tuple[int, int]:
    """(free bytes, bytes to test) on this worker's device."""
    import torch

    if ctx.backend.cuda:
        torch.cuda.empty_cache()  # this process's cached blocks from earlier phases go back
        free, _total = torch.cuda.mem_get_info(ctx.device)
    else:
        free = cpu_bytes
    return int(free), int(free * fraction) // 8 * 8


class _Buffer:
    """The tested words, chunked; per-chunk mismatch counts kept on the device."""

    def __init__(self, ctx: WorkerContext, nbytes: int, chunk_bytes: int) -> None:
        import torch

        self.ctx = ctx
        self.words = torch.empty(max(1, nbytes // 8), dtype=torch.int64, device=ctx.device)
        self.base = int(self.words.data_ptr())
        step = max(1, chunk_bytes // 8)
        n = self.words.numel()
        self.chunks = [(s, min(n, s + step)) for s in range(0, n, step)]
        self.counts = torch.zeros(len(self.chunks), dtype=torch.int64, device=ctx.device)

    def expected(self, pattern: str, round_: int, start: int, stop: int) -> Any:
        return expected(pattern, round_, start, stop, base=self.base, device=self.ctx.device)

    def write(self, pattern: str, round_: int) -> None:
        for start, stop in self.chunks:
            self.words[start:stop] = self.expected(pattern, round_, start, stop)

    def inject(self, flips: int) -> None:
        """The fault seam: ``flips`` words spread over the buffer lose bit SEAM_BIT."""
        n = self.words.numel()
        for j in range(flips):
            self.words[(j + 1) * n // (flips + 1)] ^= 1 << SEAM_BIT

    def verify(self, pattern: str, round_: int) -> int:
        """Mismatching words of this pass (one host sync)."""
        self.counts.zero_()
        for c, (start, stop) in enumerate(self.chunks):
            want = self.expected(pattern, round_, start, stop)
            self.counts[c] = (self.words[start:stop] != want).sum()
        return int(self.counts.sum())

    def first_bad(self, pattern: str, round_: int, limit: int) -> list[dict[str, Any]]:
        """The first ``limit`` bad words of the pass just verified (read again: only on the
        failure path, before the next pattern overwrites them)."""
        out: list[dict[str, Any]] = []
        bad_chunks = [c for c, n in enumerate(self.counts.tolist()) if n]
        for c in bad_chunks:
            start, stop = self.chunks[c]
            want = self.expected(pattern, round_, start, stop)
            got = self.words[start:stop]
            for j in (got != want).nonzero().flatten()[: limit - len(out)].tolist():
                w, g = int(want[j]) & _M64, int(got[j]) & _M64
                offset = (start + j) * 8
                out.append({"offset": offset, "address": f"0x{self.base + offset:x}",
                            "expected": f"0x{w:016x}", "read": f"0x{g:016x}",
                            "bits": f"0x{w ^ g:016x}", "pattern": pattern, "round": round_})
            if len(out) >= limit:
                break
        return out


def patterns(ctx: WorkerContext, *, fraction: float, seconds: float, cpu_bytes: int,
             chunk_bytes: int) -> dict[str, Any]:
    """Run the patterns on ``fraction`` of this device's free memory for ``seconds`` (at the
    least one whole round): counts, first bad words, coverage and the rate reached."""
    import torch
    import torch.distributed as dist

    free, nbytes = sized(ctx, fraction, cpu_bytes)
    buf = _Buffer(ctx, nbytes, chunk_bytes)
    flips = seams.hbm_fault_words(ctx.rank)
    if ctx.world > 1:
        with ctx.collective():
            dist.barrier()  # every GPU at once: the node's whole HBM under test together
    per_pattern = {p: {"passes": 0, "errors": 0} for p in PATTERNS}
    first_bad: list[dict[str, Any]] = []
    passes = rounds = 0
    wall_start = time.time()
    start = time.perf_counter()
    elapsed = 0.0
    while passes < len(PATTERNS) or elapsed < seconds:  # one whole round at the least
        pattern = PATTERNS[passes % len(PATTERNS)]
        buf.write(pattern, rounds)
        if flips:
            buf.inject(flips)
        bad = buf.verify(pattern, rounds)
        per_pattern[pattern]["passes"] += 1
        per_pattern[pattern]["errors"] += bad
        if bad and len(first_bad) < FIRST_BAD:
            first_bad += buf.first_bad(pattern, rounds, FIRST_BAD - len(first_bad))
        passes += 1
        rounds = passes // len(PATTERNS)
        ctx.step(passes)
        elapsed = time.perf_counter() - start
    tested = buf.words.numel() * 8
    del buf
    if ctx.backend.cuda:
        torch.cuda.empty_cache()  # the memory goes back for the next phases
    moved = 2 * tested * passes  # every pass writes the buffer once and reads it once
    return {"free_bytes": free, "bytes_tested": tested, "fraction": fraction,
            "fraction_tested": tested / free if free else 0.0, "chunk_bytes": chunk_bytes,
            "rounds": rounds, "passes": passes, "patterns": per_pattern,
            "errors": sum(p["errors"] for p in per_pattern.values()), "first_bad": first_bad,
            "seconds": elapsed, "gbps": moved / elapsed / 1e9 if elapsed > 0 else 0.0,
            "counted": "bytes written + bytes verified", "cuda": ctx.backend.cuda,
            "wall": [wall_start, wall_start + elapsed]}
