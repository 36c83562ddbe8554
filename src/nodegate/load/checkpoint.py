"""Sharded checkpoints of the FSDP burn-in: written with ``torch.distributed.checkpoint``
(DCP), read back into a fresh model and optimizer, and compared bit for bit.

Why each step is done as it is:

- Written through DCP's ``FileSystemWriter`` with ``sync_files`` (fsync per file), so the
  write rate is the storage's, not the page cache's. Bytes are what landed on disk (the
  directory's files, summed by rank 0).
- Before the timed read every file's cached pages are dropped with
  ``posix_fadvise(POSIX_FADV_DONTNEED)`` (what fio's ``invalidate=1`` does): a read straight
  after a write would otherwise come from memory. Pages of a file another process holds
  dirty cannot be dropped; ours are fsynced, so they are clean.
- DCP reads tensors back with ``torch.load``, which does not check the zip's CRC32 (a flipped
  bit in a tensor's payload loads silently: tried on torch 2.13). So nothing but a compare
  of the loaded state with the trained one proves the round trip; the compare runs on the
  raw bytes of every local shard (parameters, both AdamW moments, the step counters) in a
  fixed order, and names the first tensor that differs.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from typing import Any

from nodegate.load import seams
from nodegate.load.workers import WorkerContext


def _local(tensor: Any) -> Any:
    """A DTensor's shard on this rank; a plain tensor as it is."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor


def flat_state(net: Any, opt: Any) -> Iterator[tuple[str, Any]]:
    """(name, local tensor or plain value) of the model and optimizer state, in DCP's
    fully-qualified names and a fixed order: ``model.<fqn>``, ``optim.<fqn>.<key>``, then
    ``optim.param_groups``."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    both: Any = get_state_dict(net, opt)
    model_sd: dict[str, Any] = both[0]
    optim_sd: dict[str, Any] = both[1]
    for name in sorted(model_sd):
        yield f"model.{name}", _local(model_sd[name])
    state = optim_sd.get("state", {})
    for name in sorted(state):
        for key in sorted(state[name]):
            yield f"optim.{name}.{key}", _local(state[name][key])
    yield "optim.param_groups", [
        {k: v for k, v in group.items() if k != "params"} | {"params": list(group["params"])}
        for group in optim_sd.get("param_groups", [])]


def _bytes_view(tensor: Any) -> Any:
    import torch

    return tensor.detach().contiguous().reshape(-1).view(torch.uint8)


def _differs(ref: Any, got: Any) -> dict[str, Any] | None:
    """None when ``got`` is ``ref`` bit for bit; else where and how much it differs."""
    import torch

    if not isinstance(ref, torch.Tensor) or not isinstance(got, torch.Tensor):
        return None if ref == got else {"reason": "value differs", "expected": str(ref)[:200],
                                        "got": str(got)[:200]}
    if ref.dtype != got.dtype or ref.shape != got.shape:
        return {"reason": "dtype or shape differs",
                "expected": f"{ref.dtype} {tuple(ref.shape)}",
                "got": f"{got.dtype} {tuple(got.shape)}"}
    a, b = _bytes_view(ref.to(got.device)), _bytes_view(got)
    if torch.equal(a, b):
        return None
    bad = (a != b).nonzero()
    return {"reason": "bytes differ", "differing_bytes": int(bad.numel()),
            "first_byte": int(bad[0].item()), "bytes": int(a.numel())}


def _state_save(net: Any, opt: Any) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_sd, optim_sd = get_state_dict(net, opt)
    return {"model": model_sd, "optim": optim_sd}


def _dir_bytes(path: str) -> int:
    return sum(e.stat().st_size for e in os.scandir(path) if e.is_file())


def _slowest(ctx: WorkerContext, seconds: float) -> float:
    """The slowest rank's seconds: a checkpoint is done when its last shard is."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([seconds], dtype=torch.float64, device=ctx.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def save(ctx: WorkerContext, net: Any, opt: Any, path: str) -> dict[str, Any]:
    """One sharded checkpoint at ``path`` (fsynced): seconds of the slowest rank, bytes on
    disk (rank 0's count; 0 elsewhere)."""
    import torch.distributed as dist
    from torch.distributed.checkpoint.filesystem import FileSystemWriter
    from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

    state = _state_save(net, opt)
    with ctx.collective():
        dist.barrier()
        t0 = time.perf_counter()
        dcp_save(state, storage_writer=FileSystemWriter(path, sync_files=True))
        ctx.sync()
        seconds = _slowest(ctx, time.perf_counter() - t0)
    nbytes = _dir_bytes(path) if ctx.rank == 0 else 0
    return {"path": path, "seconds": seconds, "bytes": nbytes}


def drop_cache(path: str) -> int:
    """Drop the page cache of every file under ``path`` (fadvise DONTNEED); files done."""
    done = 0
    for entry in os.scandir(path):
        if not entry.is_file():
            continue
        fd = os.open(entry.path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            done += 1
        finally:
            os.close(fd)
    return done


def corrupt(path: str, rank: int, tensor: Any, name: str) -> dict[str, Any]:
    """The corruption seam: flip one bit in the middle of ``tensor``'s bytes where this
    rank's file holds them (silent corruption on the disk, after the write)."""
    raw = bytes(_bytes_view(tensor).cpu().numpy().tobytes())
    for entry in sorted(os.scandir(path), key=lambda e: e.name):
        if not entry.name.startswith(f"__{rank}_"):
            continue
        with open(entry.path, "r+b") as fh:
            blob = fh.read()
            at = blob.find(raw)
            if at < 0:
                continue
            where = at + len(raw) // 2
            fh.seek(where)
            fh.write(bytes([blob[where] ^ 0x01]))
            os.fsync(fh.fileno())
            return {"tensor": name, "file": entry.name, "offset": where}
    raise RuntimeError(f"corruption seam: {name}'s bytes not found in rank {rank}'s files")


def round_trip(ctx: WorkerContext, net: Any, opt: Any, *, path: str,
               fresh: Callable[[], tuple[Any, Any]], keep_on_device: bool) -> dict[str, Any]:
    """Load the checkpoint at ``path`` (written from ``net``/``opt`` as they are now) into
    the model and optimizer ``fresh()`` builds, timed with a cold page cache; compare every
    local tensor bit for bit. ``keep_on_device``: the reference stays where it is (room for
    two copies), else it moves to host memory and the trained model is freed first."""
    import torch
    import torch.distributed as dist
    from torch.distributed.checkpoint.filesystem import FileSystemReader
    from torch.distributed.checkpoint.state_dict import set_state_dict
    from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

    reference = list(flat_state(net, opt))
    injected = None
    if seams.corrupt_checkpoint(ctx.rank):
        name, tensor = next((n, t) for n, t in reference
                            if isinstance(t, torch.Tensor) and t.numel() > 0)
        injected = corrupt(path, ctx.rank, tensor, name)
    if not keep_on_device:
        reference = [(n, t.cpu().clone() if isinstance(t, torch.Tensor) else t)
                     for n, t in reference]
        del net, opt
        if ctx.backend.cuda:
            torch.cuda.empty_cache()
    net2, opt2 = fresh()
    state = _state_save(net2, opt2)  # initialises the fresh optimizer's moments
    with ctx.collective():
        dist.barrier()
        dropped = drop_cache(path) if ctx.rank == 0 else 0
        dist.barrier()
        t0 = time.perf_counter()
        dcp_load(state, storage_reader=FileSystemReader(path))
        ctx.sync()
        seconds = _slowest(ctx, time.perf_counter() - t0)
    set_state_dict(net2, opt2, model_state_dict=state["model"], optim_state_dict=state["optim"])
    loaded = dict(flat_state(net2, opt2))
    first: dict[str, Any] | None = None
    differing = 0
    for name, ref in reference:
        got = loaded.get(name)
        why = {"reason": "missing after load"} if got is None else _differs(ref, got)
        if why is not None:
            differing += 1
            first = first or {"tensor": name, **why}
    return {"read_seconds": seconds, "files_uncached": dropped, "tensors": len(reference),
            "differing": differing, "first_difference": first, "injected": injected,
            "reference": "device" if keep_on_device else "host"}


def remove(path: str) -> None:
    """Drop an earlier checkpoint once a newer one is written (one on disk at a time)."""
    shutil.rmtree(path, ignore_errors=True)
