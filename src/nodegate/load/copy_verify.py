"""Did the copy arrive? Source and destination checksums for the bandwidth phases.

A bandwidth figure says how fast bytes moved, not that the right bytes arrived: a copy engine,
a PCIe or NVLink path or an HBM stack can corrupt data and still run at full speed. So every
timed copy (HBM, H2D, D2H, P2P) is followed, outside the timed region, by a checksum of its
source and of its destination, and the judge FAILs the copy whose two differ. The buffers hold
a position-dependent pattern (never a constant), so a misplaced or short copy shows too.
"""

from __future__ import annotations

from typing import Any

from nodegate.load import seams

#: Elements filled per step: the index temporary stays small beside a multi-GiB buffer.
FILL_CHUNK_WORDS = 1 << 23  # 64 MiB of int64
#: A 64-bit odd multiplier (Knuth's golden-ratio constant, as a signed int64): neighbouring
#: words then differ in most bits.
_MIX = 0x9E3779B97F4A7C15 - (1 << 64)


def fill(tensor: Any, seed: int) -> Any:
    """Fill a flat uint8 tensor with a seeded, position-dependent pattern (in place; the
    tail that is not a whole int64 word gets ``seed``'s low byte)."""
    import torch

    flat = tensor.reshape(-1)
    words = flat.numel() // 8
    if words:
        view = flat[: words * 8].view(torch.int64)
        for start in range(0, words, FILL_CHUNK_WORDS):
            stop = min(words, start + FILL_CHUNK_WORDS)
            idx = torch.arange(start, stop, dtype=torch.int64, device=view.device)
            view[start:stop] = idx.add_(seed).mul_(_MIX)
    if flat.numel() % 8:
        flat[words * 8:] = seed & 0xFF
    return tensor


def checksum(tensor: Any) -> int:
    """Wrapping int64 sum of the raw bytes taken as words (the tail byte by byte): a single
    corrupted byte changes the word's value by a non-zero multiple of a power of 256 below
    2**64, so it always changes the sum. One host sync (the caller is outside its timing)."""
    import torch

    flat = tensor.reshape(-1).view(torch.uint8)
    words = flat.numel() // 8
    total = flat[: words * 8].view(torch.int64).sum(dtype=torch.int64) if words else 0
    tail = flat[words * 8:].to(torch.int64).sum() if flat.numel() % 8 else 0
    return int(total + tail) & ((1 << 64) - 1)


def corrupt_if_seamed(kind: str, target: str, tensor: Any) -> bool:
    """The test seam: flip every bit of one byte in the middle of ``tensor`` (a destination,
    after its timed copies) when ``NODEGATE_LOAD_CORRUPT_COPY`` names this copy."""
    if not seams.corrupt_copy(kind, target):
        return False
    import torch

    flat = tensor.reshape(-1).view(torch.uint8)
    flat[flat.numel() // 2] ^= 0xFF
    return True


def compare(src: Any, dst: Any) -> dict[str, Any]:
    """Both checksums and whether they agree: plain data for the judge."""
    a, b = checksum(src), checksum(dst)
    return {"src_checksum": f"{a:016x}", "dst_checksum": f"{b:016x}", "ok": a == b,
            "bytes": int(src.numel() * src.element_size())}


#: Distinct small integers per element in the all-reduce check: every partial sum of them is
#: exact in float32 for any node size, so the expected result is exact too.
_AR_PERIOD = 7


def _ar_chunks(numel: int) -> range:
    return range(0, numel, FILL_CHUNK_WORDS)


def allreduce_fill(buf: Any, rank: int) -> None:
    """Rank r holds (r + 1) * (1 + j % 7) at element j (a float32 tensor), nccl-tests' ``-c``
    idea: every rank contributes a different, position-dependent value."""
    import torch

    for start in _ar_chunks(buf.numel()):
        stop = min(buf.numel(), start + FILL_CHUNK_WORDS)
        idx = torch.arange(start, stop, dtype=torch.int64, device=buf.device)
        buf[start:stop] = (idx.remainder_(_AR_PERIOD).add_(1) * (rank + 1)).to(buf.dtype)


def allreduce_wrong(buf: Any, world: int) -> tuple[int, int | None]:
    """Elements of a summed ``allreduce_fill`` buffer that differ from the exact sum
    (1 + j % 7) * world * (world + 1) / 2, and the first such index."""
    import torch

    ranks_sum = world * (world + 1) // 2
    wrong, first = 0, None
    for start in _ar_chunks(buf.numel()):
        stop = min(buf.numel(), start + FILL_CHUNK_WORDS)
        idx = torch.arange(start, stop, dtype=torch.int64, device=buf.device)
        expected = (idx.remainder_(_AR_PERIOD).add_(1) * ranks_sum).to(buf.dtype)
        bad = buf[start:stop] != expected
        count = int(bad.sum())
        if count and first is None:
            first = start + int(bad.nonzero()[0, 0])
        wrong += count
    return wrong, first
