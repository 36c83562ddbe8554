"""Burn-in: a small GPT-style model trained with DDP on synthetic tokens, one rank per GPU.

It measures what a real training job sees: loss per step, each rank's step time, tokens/s,
achieved TFLOPS (6 x parameters x tokens, the usual dense-transformer estimate) and a digest
of the parameters at the end, which must be bit-identical on every rank.

Why per-rank *forward* time for stragglers: DDP's gradient all-reduce makes every rank's step
wall time equal to the slowest rank's, so step time alone cannot say which rank is slow; the
forward pass has no communication and shows it.

torchrun-compatible: ``torchrun --nproc-per-node 8 -m nodegate.load.burnin --steps 100``
prints one JSON line per rank (the gang in ``workers`` calls ``train`` directly).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import warnings
from dataclasses import dataclass
from typing import Any

from nodegate.load import seams
from nodegate.load.tensor_digest import digest
from nodegate.load.workers import SLOTS, WorkerContext


def _model(vocab: int, d_model: int, layers: int, heads: int, seq_len: int) -> Any:
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1 = nn.LayerNorm(d_model)
            self.attn = nn.MultiheadAttention(d_model, heads, batch_first=True)
            self.ln2 = nn.LayerNorm(d_model)
            self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(),
                                     nn.Linear(4 * d_model, d_model))

        def forward(self, x: Any, mask: Any) -> Any:
            h = self.ln1(x)
            x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
            return x + self.mlp(self.ln2(x))

    class TinyGPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(vocab, d_model)
            self.pos = nn.Embedding(seq_len, d_model)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln = nn.LayerNorm(d_model)
            self.head = nn.Linear(d_model, vocab, bias=False)
            self.register_buffer(
                "mask", torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool), 1),
                persistent=False)

        def forward(self, idx: Any) -> Any:
            t = idx.shape[1]
            x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
            for block in self.blocks:
                mask: Any = self.mask
                x = block(x, mask[:t, :t])
            return self.head(self.ln(x))

    return TinyGPT()


def synthetic_batch(step: int, rank: int, *, batch: int, seq_len: int, vocab: int,
                    device: Any) -> tuple[Any, Any]:
    """Learnable synthetic tokens: each sequence follows x' = (5x + 3) mod vocab from a random
    start, so a working model's loss falls fast; a broken one's does not."""
    import torch

    gen = torch.Generator(device="cpu").manual_seed(10_000 * rank + step)
    start = torch.randint(0, vocab, (batch, 1), generator=gen)
    seq = [start]
    for _ in range(seq_len):
        seq.append((seq[-1] * 5 + 3) % vocab)
    tokens = torch.cat(seq, dim=1).to(device)
    return tokens[:, :-1], tokens[:, 1:]


@dataclass(frozen=True)
class _Seams:
    """The test seams aimed at this rank (``seams``): kill, hang or fail at a step, or slow
    every step down."""

    kill_at: int | None
    hang_at: int | None
    fail_at: int | None
    slow: float

    @classmethod
    def for_rank(cls, rank: int) -> _Seams:
        return cls(seams.fault_step(seams.KILL_RANK, rank), seams.fault_step(seams.HANG_RANK, rank),
                   seams.fault_step(seams.FAIL_RANK, rank), seams.slow_seconds(rank))

    def before_step(self, step: int) -> None:
        if self.kill_at is not None and step == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        if self.hang_at is not None and step == self.hang_at:
            while True:  # the hang seam: alive, silent, holding its collectives
                time.sleep(1.0)


@dataclass
class _Trainer:
    """One rank's DDP model, optimiser and precision settings: what each step needs."""

    net: Any
    ddp: Any
    opt: Any
    scaler: Any
    use_amp: bool
    amp_dtype: Any
    vocab: int
    seq_len: int
    batch: int


def _trainer(ctx: WorkerContext, model: dict[str, Any], precision: str) -> _Trainer:
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    vocab, seq_len, batch = int(model["vocab"]), int(model["seq_len"]), int(model["batch"])
    torch.manual_seed(0)  # same initial weights on every rank (DDP broadcasts them anyway)
    net = _model(vocab, int(model["d_model"]), int(model["layers"]), int(model["heads"]),
                 seq_len).to(ctx.device)
    # DDP broadcasts rank 0's weights: a collective
    with ctx.collective(), warnings.catch_warnings():  # broadcast_buffers: deprecated, no
        warnings.simplefilter("ignore", FutureWarning)  # final successor yet
        ddp = DDP(net, device_ids=[ctx.gpu_index] if ctx.backend.cuda else None,
                  broadcast_buffers=False)
    opt = torch.optim.AdamW(ddp.parameters(), lr=float(model.get("lr", 3e-4)))
    use_amp = ctx.backend.cuda and precision in ("bf16", "fp16")
    amp_dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    # fp16 gradients underflow without loss scaling (bf16 has fp32's range and needs none)
    scaler = torch.amp.GradScaler("cuda", enabled=use_amp and precision == "fp16")
    return _Trainer(net, ddp, opt, scaler, use_amp, amp_dtype, vocab, seq_len, batch)


def _train_step(ctx: WorkerContext, run: _Trainer, step: int,
                faults: _Seams) -> tuple[float, float, float]:
    """One forward and backward pass; returns (loss, forward seconds, step seconds)."""
    import torch

    x, y = synthetic_batch(step, ctx.rank, batch=run.batch, seq_len=run.seq_len,
                           vocab=run.vocab, device=ctx.device)
    t0 = time.perf_counter()
    with torch.autocast(device_type="cuda", dtype=run.amp_dtype, enabled=run.use_amp):
        logits = run.ddp(x)
        loss = torch.nn.functional.cross_entropy(logits.float().view(-1, run.vocab),
                                                 y.reshape(-1))
    if faults.slow:
        time.sleep(faults.slow)
    if faults.fail_at is not None and step == faults.fail_at:  # where a CUDA error surfaces: a sync
        raise RuntimeError(seams.injected_error(ctx.rank, step))
    ctx.sync()
    t1 = time.perf_counter()
    run.opt.zero_grad(set_to_none=True)
    run.scaler.scale(loss).backward()
    run.scaler.step(run.opt)
    run.scaler.update()
    ctx.sync()
    t2 = time.perf_counter()
    return float(loss.item()), t1 - t0, t2 - t0


def _all_stop(ctx: WorkerContext, want: bool) -> bool:
    """True once any rank wants to stop: every rank must stop at the same step, or the others
    wait in an all-reduce forever."""
    import torch
    import torch.distributed as dist

    flag = torch.tensor([1.0 if want else 0.0], device=ctx.device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item() > 0)


def train(ctx: WorkerContext, *, steps: int, min_steps: int, seconds: float,
          model: dict[str, Any], precision: str = "bf16") -> dict[str, Any]:
    """Train for ``steps`` steps or ``seconds`` (at least ``min_steps``); return the figures."""
    import torch

    run = _trainer(ctx, model, precision)
    n_params = sum(p.numel() for p in run.net.parameters())
    faults = _Seams.for_rank(ctx.rank)
    losses: list[float] = []
    step_s: list[float] = []
    forward_s: list[float] = []
    wall_start = time.time()
    start = time.perf_counter()
    step = 0
    while True:
        ctx.step(step)
        faults.before_step(step)
        # forward, backward (DDP's all-reduce) and the stop vote wait on the other ranks
        with ctx.collective():
            loss, forward, total = _train_step(ctx, run, step, faults)
            losses.append(loss)
            forward_s.append(forward)
            step_s.append(total)
            step += 1
            want = step >= steps or (time.perf_counter() - start >= seconds and step >= min_steps)
            if _all_stop(ctx, want):
                break
    ctx.step(step)
    with torch.no_grad():
        flat = torch.cat([p.detach().reshape(-1).float() for p in run.net.parameters()])
    batch, seq_len = run.batch, run.seq_len
    return {"steps": step, "losses": losses, "step_s": step_s, "forward_s": forward_s,
            "tokens_per_step": batch * seq_len, "n_params": n_params,
            "flops_per_step": 6.0 * n_params * batch * seq_len,
            "param_digest": digest(flat), "seconds": time.perf_counter() - start,
            "precision": precision if run.use_amp else "fp32",
            "wall": [wall_start, time.time()]}


def main(argv: list[str] | None = None) -> int:
    """torchrun entry: ranks and rendezvous come from the environment torchrun sets."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from nodegate.load import devices

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--model", default="{}", help="JSON burnin_model overrides")
    args = parser.parse_args(argv)
    from multiprocessing import Array

    from nodegate.load.config import DEFAULTS

    backend = devices.choose(args.device)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    if backend.cuda:
        torch.cuda.set_device(local)
    dist.init_process_group(backend.dist, timeout=timedelta(seconds=args.timeout))
    model = {**DEFAULTS["burnin_model"], **json.loads(args.model)}
    ctx = WorkerContext(rank, world, backend, Array("d", SLOTS * world, lock=False),
                        local_rank=local)
    result = train(ctx, steps=args.steps, min_steps=1, seconds=args.seconds, model=model)
    result.pop("losses")
    print(json.dumps({"rank": rank, **result}), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
