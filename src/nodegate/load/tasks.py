"""The measuring half: what each worker runs in a phase. Figures only, never a verdict.

Every function takes a ``WorkerContext`` and returns plain data (numbers, digests, units) that
pickles back to the coordinator, where ``judge`` decides. The same code runs on CUDA tensors
and on CPU tensors; ``ctx.sync()`` is where CUDA needs it.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from typing import Any

from nodegate.load import copy_verify, formulas, gemm_dtypes, seams
from nodegate.load.tensor_digest import digest
from nodegate.load.workers import WorkerContext


def _seeded(n: int, seed: int, dtype: Any, device: Any) -> Any:
    """Inputs drawn on the CPU from a fixed seed, so every GPU multiplies the same numbers."""
    import torch

    gen = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)


def _slow(ctx: WorkerContext) -> None:
    delay = seams.slow_seconds(ctx.rank)
    if delay:
        time.sleep(delay)


#: Integer views for the checksum, widest first: the sum runs in the view's own type, so no
#: widened copy of the output is made (an int16 tensor summed into int64 is cast first: a
#: 512 MiB temporary per 8192^2 bf16 output, ~20% of the matmul's time on an H200).
_CHECKSUM_WIDTHS = ((8, "int64"), (4, "int32"), (2, "int16"), (1, "uint8"))


def _checksum(tensor: Any) -> Any:
    """Wrapping integer sum of the raw bits (on the device, no sync): one flipped bit changes
    it by a power of two below the word size, so every single-bit error is seen, for one read
    of the output. A full element compare moves three times the bytes (two reads, a bool
    tensor written and read again): ~6% of an 8192^3 bf16 matmul's time on an H200 by
    datasheet arithmetic, enough to pull our TFLOPS below a plain matmul's
    (docs/load-checks.md)."""
    import torch

    flat = tensor.reshape(-1).view(torch.uint8)
    name = next(n for width, n in _CHECKSUM_WIDTHS if flat.numel() % width == 0)
    dtype = getattr(torch, name)
    return flat.view(dtype).sum(dtype=dtype)


def _set_tf32(enabled: bool) -> None:
    """Let fp32 matmuls use TF32 tensor cores only when TF32 is what is measured."""
    import torch

    matmul: Any = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):  # torch >= 2.9; allow_tf32 is deprecated there
        matmul.fp32_precision = "tf32" if enabled else "ieee"
    else:
        matmul.allow_tf32 = enabled


def _calibrated_batch(ctx: WorkerContext, once: Callable[[], None]) -> int:
    """Matmuls per batch so one batch takes ~0.1 s: the clock is then read without a sync per
    matmul (runs ``once`` one more time to measure it)."""
    t0 = time.perf_counter()
    once()
    ctx.sync()
    per = max(time.perf_counter() - t0, 1e-6)
    return max(1, min(1000, int(0.1 / per)))


def gemm(ctx: WorkerContext, *, dtype: str, n: int, seconds: float,
         barrier: bool = True) -> dict[str, Any]:
    """Seeded n x n matmuls for ``seconds``: achieved TFLOPS, the output digest (compared
    bit-for-bit across GPUs by the judge) and how many later iterations disagreed with this
    GPU's own first result (by checksum, every iteration, no host sync in the loop)."""
    import torch
    import torch.distributed as dist

    if ctx.backend.cuda:
        _set_tf32(dtype == "tf32")
    why_not = gemm_dtypes.unsupported(dtype, ctx.device)
    if why_not is not None:  # the judge SKIPs with this reason
        return {"dtype": dtype, "n": n, "unsupported": why_not}
    n = gemm_dtypes.size_for(dtype, n, ctx.device)
    _a, _b, out, matmul = gemm_dtypes.operands(dtype, n, ctx.device, _seeded)
    corrupt_every = seams.corrupt_every(ctx.rank)
    fail_at = seams.fault_step(seams.FAIL_RANK, ctx.rank)
    done = [0]

    def once() -> None:
        matmul()
        done[0] += 1
        if corrupt_every and done[0] % corrupt_every == 0:
            # the test seam: one flipped low bit, exactly what silent corruption is
            flat = out.view(-1).view(torch.int16 if out.element_size() == 2 else torch.int32)
            flat[0] ^= 1
        _slow(ctx)

    once()
    ctx.sync()
    ref_digest = digest(out)
    ref_sum = _checksum(out)
    if barrier:
        with ctx.collective():
            dist.barrier()  # every GPU loads at once: power and heat are judged on a full node
    batch = _calibrated_batch(ctx, once)
    mismatches = torch.zeros((), dtype=torch.int64, device=ctx.device)
    iters = 0
    wall_start = time.time()
    start = time.perf_counter()
    while True:
        for _ in range(batch):
            once()
            mismatches += _checksum(out) != ref_sum
        ctx.sync()
        iters += batch
        ctx.step(iters)
        if fail_at is not None and iters >= fail_at:
            raise RuntimeError(seams.injected_error(ctx.rank, iters))
        elapsed = time.perf_counter() - start
        if elapsed >= seconds and iters >= 3:
            break
    flops = formulas.gemm_flops(n) * iters
    return {"dtype": dtype, "n": n, "iterations": iters, "seconds": elapsed,
            "tflops": formulas.tflops(flops, elapsed), "digest": ref_digest,
            "self_mismatches": int(mismatches.item()), "self_check": "bit checksum",
            "wall": [wall_start, wall_start + elapsed]}


def _time_copy(ctx: WorkerContext, dst: Any, src: Any, iters: int) -> float:
    dst.copy_(src, non_blocking=True)  # warm-up (first-touch pages, stream setup)
    ctx.sync()
    start = time.perf_counter()
    for _ in range(iters):
        dst.copy_(src, non_blocking=True)
    ctx.sync()
    return time.perf_counter() - start


def memory(ctx: WorkerContext, *, hbm_bytes: int, copy_bytes: int, iters: int) -> dict[str, Any]:
    """Device-to-device copy (bytes read + written) and pinned host<->device copies, driven
    from the CPUs of the GPU's own NUMA node and, where there is one, a remote node. Each
    host buffer's pages are placed by first touch from the bound CPUs and pinned in place;
    where they really landed (``move_pages``) is kept as evidence. The host copies take turns,
    one GPU at a time."""
    import torch
    import torch.distributed as dist

    from nodegate.load import devices

    dev = ctx.device
    src = copy_verify.fill(torch.empty(hbm_bytes // 2, dtype=torch.uint8, device=dev),
                           seed=1 + ctx.rank)
    dst = torch.empty_like(src)
    seconds = _time_copy(ctx, dst, src, iters)
    hbm = formulas.gbps(2 * src.numel() * iters, seconds)
    copy_verify.corrupt_if_seamed("hbm", str(ctx.rank), dst)
    hbm_verify = copy_verify.compare(src, dst)  # outside the timed region
    del src, dst
    ctx.step(1)

    nodes = devices.numa_nodes()
    local = devices.gpu_numa_node(ctx.backend, ctx.gpu_index)
    remote = next((n for n in sorted(nodes) if local is not None and n != local), None)
    original = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    host_figures: dict[str, Any] = {}
    device_buf = torch.empty(copy_bytes, dtype=torch.uint8, device=dev)
    # one GPU at a time: on HGX boards two GPUs share a PCIe switch's uplink to the CPU, so
    # copies on all GPUs at once would measure the uplink's share, not the GPU's link
    window = [0.0, 0.0]
    for turn in range(ctx.world):
        if turn == ctx.rank:
            window[0] = time.time()
            try:
                for where, node in (("local", local), ("remote", remote)):
                    if where == "remote" and node is None:
                        continue
                    host_figures[where] = _host_copies(ctx, device_buf, node=node, nodes=nodes,
                                                       nbytes=copy_bytes, iters=iters)
                    ctx.step(2 + len(host_figures))
            finally:
                if original is not None:
                    os.sched_setaffinity(0, original)
                window[1] = time.time()
        if ctx.world > 1:
            with ctx.collective():
                dist.barrier()
    return {"hbm_gbps": hbm, "hbm_verify": hbm_verify, "hbm_bytes": 2 * (hbm_bytes // 2),
            "copy_bytes": copy_bytes,
            "iters": iters, "host": host_figures, "numa_nodes": len(nodes),
            "pinned": ctx.backend.cuda, "host_copies": "one GPU at a time",
            "host_window": window}


def _host_copies(ctx: WorkerContext, device_buf: Any, *, node: int | None,
                 nodes: dict[int, set[int]], nbytes: int, iters: int) -> dict[str, Any]:
    """H2D and D2H from CPUs bound to ``node``, through a buffer placed there by first touch
    and pinned in place. A fresh buffer per placement, never a cached one: torch's
    pinned-memory cache would hand the remote run the local run's pages."""
    from nodegate.load import devices

    bound = devices.pin_to_node(node, nodes)
    rank = str(ctx.rank)
    with devices.host_buffer(nbytes, pin=ctx.backend.cuda) as (host, pinning):
        # the host's pattern is made on the device and copied over, untimed (one CPU thread
        # takes seconds per GiB); the pages stay where first touch put them
        host.copy_(copy_verify.fill(device_buf, seed=2 + ctx.rank))
        copy_verify.fill(device_buf, seed=4 + ctx.rank)  # what H2D must overwrite
        h2d = formulas.gbps(nbytes * iters, _time_copy(ctx, device_buf, host, iters))
        copy_verify.corrupt_if_seamed("h2d", rank, device_buf)
        h2d_verify = copy_verify.compare(host, device_buf)
        # new content on the device first: the host already holds what the H2D copy sent
        copy_verify.fill(device_buf, seed=3 + ctx.rank)
        d2h = formulas.gbps(nbytes * iters, _time_copy(ctx, host, device_buf, iters))
        copy_verify.corrupt_if_seamed("d2h", rank, host)
        d2h_verify = copy_verify.compare(device_buf, host)
        pages = devices.page_nodes(host.data_ptr(), nbytes)
    return {"numa_node": node, "cpu_bound": bound, "h2d_gbps": h2d, "d2h_gbps": d2h,
            "h2d_verify": h2d_verify, "d2h_verify": d2h_verify,
            "pinning": pinning, "pages_on_node": pages, "placed": devices.placed_on(pages, node)}


class _PairCopies:
    """One buffer to send and one to receive on each device, and a stream per GPU, made
    before any clock starts (the first stream makes torch's stream pool)."""

    def __init__(self, ctx: WorkerContext, nbytes: int) -> None:
        import torch

        from nodegate.load import devices

        self.ctx = ctx
        devs = [devices.torch_device(ctx.backend, i) for i in range(ctx.world)]
        self.bufs = [copy_verify.fill(torch.empty(nbytes, dtype=torch.uint8, device=d), 100 + i)
                     for i, d in enumerate(devs)]
        self.back = [torch.empty(nbytes, dtype=torch.uint8, device=d) for d in devs]
        self.streams = ([torch.cuda.Stream(device=dev) for dev in devs]  # type: ignore[no-untyped-call,unused-ignore]
                        if ctx.backend.cuda else [])

    def sync_all(self) -> None:
        from nodegate.load import devices

        for i in range(self.ctx.world):
            devices.sync(self.ctx.backend, i if self.ctx.backend.cuda else None)

    def both_ways(self, s: int, d: int) -> None:
        """s->d on s's stream and d->s on d's at once; on CPU, one after the other."""
        import torch

        if not self.streams:
            self.back[d].copy_(self.bufs[s])
            self.back[s].copy_(self.bufs[d])
            return
        with torch.cuda.stream(self.streams[s]):
            self.back[d].copy_(self.bufs[s], non_blocking=True)
        with torch.cuda.stream(self.streams[d]):
            self.back[s].copy_(self.bufs[d], non_blocking=True)

    def one_way_seconds(self, s: int, d: int, iters: int) -> float:
        """Wall time of ``iters`` s->d copies, launch to every device synced (the copy
        inline: no call of ours between launches)."""
        start = time.perf_counter()
        for _ in range(iters):
            self.back[d].copy_(self.bufs[s], non_blocking=True)
        self.sync_all()
        return time.perf_counter() - start

    def both_ways_seconds(self, s: int, d: int, iters: int) -> float:
        """Wall time of ``iters`` rounds of copies both ways at once, launch to synced."""
        start = time.perf_counter()
        for _ in range(iters):
            self.both_ways(s, d)
        self.sync_all()
        return time.perf_counter() - start

    def release(self) -> None:
        import torch

        self.bufs.clear()
        self.back.clear()
        if self.ctx.backend.cuda:
            torch.cuda.empty_cache()  # this process's blocks on every GPU go back for later phases


def p2p(ctx: WorkerContext, *, nbytes: int, iters: int) -> dict[str, Any]:
    """Every ordered pair (src, dst), one direction then both at once, measured by rank 0
    alone so no other copy shares the fabric (nvbandwidth's copy-engine method).

    On CPU the "devices" share one memory: the figures are memcpy rates, the code path is the
    same. Bidirectional copies overlap on two CUDA streams; on CPU they run back to back.
    """
    import torch

    if ctx.rank != 0:
        return {}
    world = ctx.world
    copies = _PairCopies(ctx, nbytes)
    uni = [[0.0] * world for _ in range(world)]
    bidir = [[0.0] * world for _ in range(world)]
    access = [[True] * world for _ in range(world)]
    verified: dict[str, dict[str, Any]] = {}
    pairs = [(s, d) for s in range(world) for d in range(world) if s != d]
    for done, (s, d) in enumerate(pairs, start=1):
        if ctx.backend.cuda:
            access[s][d] = bool(torch.cuda.can_device_access_peer(s, d))
        # untimed round in both directions: torch enables peer access on a pair's first
        # copy, and the d->s direction may not have run yet
        copies.both_ways(s, d)
        copies.sync_all()
        uni[s][d] = formulas.gbps(nbytes * iters, copies.one_way_seconds(s, d, iters))
        bidir[s][d] = formulas.gbps(2 * nbytes * iters, copies.both_ways_seconds(s, d, iters))
        copy_verify.corrupt_if_seamed("p2p", f"{s}-{d}", copies.back[d])
        verified[f"{s}-{d}"] = copy_verify.compare(copies.bufs[s], copies.back[d])
        ctx.step(done)
    copies.release()
    return {"bytes": nbytes, "iters": iters, "unidir_gbps": uni, "bidir_gbps": bidir,
            "peer_access": access, "verify": verified}


#: Timed all-reduce runs at the size the judge reads, at the least.
JUDGED_ITERS = 5


def _timed(ctx: WorkerContext, once: Callable[[], object], *, judged: bool,
           seconds_per_size: float) -> tuple[float, int]:
    """The slowest rank's seconds per call of the collective ``once`` and how many calls were
    timed: a warm-up call (connections, algorithm selection), one call to fit the repetitions
    to the time budget (agreed on by all ranks), then the timed ones. Called by every rank,
    inside ``ctx.collective()``."""
    import torch
    import torch.distributed as dist

    once()  # warm-up: connections, algorithm selection
    ctx.sync()
    dist.barrier()
    t0 = time.perf_counter()
    once()
    ctx.sync()
    probe = torch.tensor([time.perf_counter() - t0], device=ctx.device)
    dist.all_reduce(probe, op=dist.ReduceOp.MAX)
    # the judged (largest) size gets at least JUDGED_ITERS timed runs even when one takes
    # longer than the budget (16 GiB on H100 is ~0.1 s a run): one run is one sample
    least = JUDGED_ITERS if judged else 1
    iters = max(least, min(50, int(seconds_per_size / max(float(probe.item()), 1e-6))))
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        once()
    ctx.sync()
    elapsed = torch.tensor([(time.perf_counter() - t0) / iters], device=ctx.device)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    return float(elapsed.item()), iters


def allreduce(ctx: WorkerContext, *, max_bytes: int, steps: int,
              seconds_per_size: float = 0.2) -> dict[str, Any]:
    """nccl-tests style sweep: float32 sum all-reduce at each size, the slowest rank's time."""
    import torch
    import torch.distributed as dist

    rows = []
    sizes = formulas.sweep_sizes(max_bytes, steps=steps)
    for i, size in enumerate(sizes):
        with ctx.collective():  # every line here waits on the other ranks
            buf = torch.ones(size // 4, dtype=torch.float32, device=ctx.device)
            seconds, iters = _timed(ctx, functools.partial(dist.all_reduce, buf),
                                    judged=size == sizes[-1], seconds_per_size=seconds_per_size)
            # nccl-tests -c: one more all-reduce of known values, untimed, checked on every rank
            copy_verify.allreduce_fill(buf, ctx.rank)
            dist.all_reduce(buf)
            ctx.sync()
        copy_verify.corrupt_if_seamed("allreduce", str(ctx.rank), buf)
        wrong, first_wrong = copy_verify.allreduce_wrong(buf, ctx.world)
        del buf  # freed before the next size is allocated (16 + 4 GiB at once otherwise)
        alg, bus = formulas.allreduce_bandwidth(size, seconds, ctx.world)
        rows.append({"bytes": size, "seconds": seconds, "iters": iters,
                     "algbw_gbps": alg, "busbw_gbps": bus, "wrong": wrong,
                     "first_wrong": first_wrong})
        ctx.step(i + 1)
    return {"world": ctx.world, "collective": "all_reduce", "sweep": rows}


def _collective_op(name: str, size: int, world: int, device: Any) -> Callable[[], None]:
    """One call of ``name`` on float32 buffers shaped as nccl-tests sizes it (``size`` is the
    per-rank buffer, the whole all_gather output, the whole reduce_scatter input)."""
    import torch
    import torch.distributed as dist

    count = size // 4
    if name == "all_reduce":
        buf = torch.ones(count, dtype=torch.float32, device=device)
        return lambda: dist.all_reduce(buf)
    if name == "broadcast":
        buf = torch.ones(count, dtype=torch.float32, device=device)
        return lambda: dist.broadcast(buf, 0)
    whole = torch.ones(count, dtype=torch.float32, device=device)
    if name == "alltoall":
        out = torch.empty_like(whole)
        return lambda: dist.all_to_all_single(out, whole)
    part = torch.ones(count // world, dtype=torch.float32, device=device)
    # torch 2.13 renames the single-tensor forms (*_single); older torch has only the others
    if name == "all_gather":
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        return lambda: gather(whole, part)
    if name == "reduce_scatter":
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        return lambda: scatter(part, whole)
    raise ValueError(f"unknown collective {name!r}")


def collective(ctx: WorkerContext, *, name: str, max_bytes: int, steps: int,
               seconds_per_size: float = 0.2) -> dict[str, Any]:
    """nccl-tests style sweep of one collective: at each size, the slowest rank's time and
    nccl-tests' algbw/busbw (``formulas.collective_factor``)."""
    rows = []
    sizes = sorted({formulas.collective_size(name, s, ctx.world)
                    for s in formulas.sweep_sizes(max_bytes, steps=steps)})
    for i, size in enumerate(sizes):
        with ctx.collective():  # every line here waits on the other ranks
            once = _collective_op(name, size, ctx.world, ctx.device)
            seconds, iters = _timed(ctx, once, judged=size == sizes[-1],
                                    seconds_per_size=seconds_per_size)
        del once  # buffers freed before the next size is allocated (16 + 4 GiB at once)
        alg, bus = formulas.collective_bandwidth(name, size, seconds, ctx.world)
        rows.append({"bytes": size, "seconds": seconds, "iters": iters,
                     "algbw_gbps": alg, "busbw_gbps": bus})
        ctx.step(i + 1)
    return {"world": ctx.world, "collective": name, "sweep": rows}


def collectives(ctx: WorkerContext, *, names: list[str], max_bytes: int, steps: int,
                seconds_per_size: float = 0.2) -> dict[str, Any]:
    """The sweep of each collective in ``names`` in turn: ``{"world", "collectives": {name:
    sweep rows}}``; all_reduce is ``allreduce``'s, with its result checked (nccl-tests -c)."""
    out: dict[str, Any] = {}
    for name in names:
        run = allreduce if name == "all_reduce" else functools.partial(collective, name=name)
        out[name] = run(ctx, max_bytes=max_bytes, steps=steps,
                        seconds_per_size=seconds_per_size)["sweep"]
    return {"world": ctx.world, "collectives": out}


def sleep(ctx: WorkerContext, *, seconds: float) -> dict[str, Any]:
    """A phase that does nothing for ``seconds`` (tests of the gang's deadlines)."""
    end = time.monotonic() + seconds
    step = 0
    while time.monotonic() < end:
        time.sleep(0.05)
        step += 1
        ctx.step(step)
    return {"rank": ctx.rank, "pid": os.getpid()}


def burnin(ctx: WorkerContext, **kwargs: Any) -> dict[str, Any]:
    from nodegate.load.burnin import train

    return train(ctx, **kwargs)
