"""FSDP burn-in: a GPT-style model sharded over every rank with ``fully_shard`` (FSDP2),
trained on the burn-in's synthetic tokens, checkpointed with ``torch.distributed.checkpoint``
every N steps and at the end, and the last checkpoint read back and verified bit for bit
(``checkpoint``).

What the workload exercises, every step: each block's parameters are all-gathered for its
forward, freed, all-gathered again for its backward (``reshard_after_forward``), and its
gradients reduce-scattered to their owners; the AdamW step updates only this rank's shard.
The model's size comes from ``fsdp_size`` (HBM fraction on a GPU, a fixed small model on
CPU/gloo). Figures only: the judge (``nodegate.judge.fsdp``) decides.

Per-rank step times: FSDP's collectives hold every rank to the slowest, so step times agree
closely on a healthy node and a GPU slow inside forward or backward slows every rank alike: it
shows in the node's tokens/s and TFLOPS against their floors (and by name in the DDP burn-in's
forward-time straggler and the GEMM outlier checks). A rank whose own work lags (the
optimizer step on its shard, data, host) shows above the median; each rank's optimizer-step
time, the one part with no collective, is kept as evidence.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

from nodegate.load import checkpoint, seams
from nodegate.load.burnin import synthetic_batch
from nodegate.load.workers import WorkerContext


def _model(cfg: dict[str, Any]) -> Any:
    import torch
    from torch import nn
    from torch.nn import functional as F

    d, heads, seq = int(cfg["d_model"]), int(cfg["heads"]), int(cfg["seq_len"])

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1 = nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.ln2 = nn.LayerNorm(d)
            self.fc = nn.Linear(d, 4 * d)
            self.out = nn.Linear(4 * d, d)

        def forward(self, x: Any) -> Any:
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, heads, d // heads).unbind(2)
            att = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                 v.transpose(1, 2), is_causal=True)
            x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(int(cfg["vocab"]), d)
            self.pos = nn.Embedding(seq, d)
            self.blocks = nn.ModuleList(Block() for _ in range(int(cfg["layers"])))
            self.ln = nn.LayerNorm(d)
            self.head = nn.Linear(d, int(cfg["vocab"]), bias=False)

        def forward(self, idx: Any) -> Any:
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln(x))

    return GPT()


def _init_shards(net: Any, layers: int, seed: int) -> None:
    """GPT-2's initialisation, drawn on each rank's own shard from a per-rank seed (the
    full model never exists on one GPU): weights N(0, 0.02), residual projections scaled by
    1/sqrt(2 x layers), biases zero, LayerNorms one."""
    import torch

    gen: Any = None
    with torch.no_grad():
        for name, param in net.named_parameters():
            local = checkpoint._local(param)
            if gen is None:  # drawn where the shard lives: no host copy of the model
                gen = torch.Generator(device=local.device).manual_seed(seed)
            if name.endswith("bias"):
                local.zero_()
            elif ".ln" in name or name.startswith("ln."):
                local.fill_(1.0)
            else:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith(("proj.weight",
                                                                      "out.weight")) else 0.02
                local.normal_(0.0, std, generator=gen)


def build(ctx: WorkerContext, cfg: dict[str, Any], *, bf16: bool, seed: int) -> tuple[Any, Any]:
    """The model on the meta device, each block then the root ``fully_shard``-ed, storage
    made for this rank's shards only, initialised; and its AdamW."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    with torch.device("meta"):
        net = _model(cfg)
    policy = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
              if bf16 else MixedPrecisionPolicy())
    for block in net.blocks:
        fully_shard(block, mp_policy=policy)
    fully_shard(net, mp_policy=policy)
    net.to_empty(device=ctx.device)
    _init_shards(net, int(cfg["layers"]), seed * 1_000_003 + ctx.rank)
    opt = torch.optim.AdamW(net.parameters(), lr=float(cfg.get("lr", 1e-4)))
    return net, opt


def _stop_vote(ctx: WorkerContext, want: bool) -> bool:
    import torch
    import torch.distributed as dist

    flag = torch.tensor([1.0 if want else 0.0], device=ctx.device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item() > 0)


def _step(ctx: WorkerContext, net: Any, opt: Any, *, cfg: dict[str, Any], step: int,
          slow: float) -> tuple[float, float, float]:
    """One forward, backward and optimizer step; (loss, seconds, optimizer seconds)."""
    import torch

    vocab = int(cfg["vocab"])
    x, y = synthetic_batch(step, ctx.rank, batch=int(cfg["batch"]),
                           seq_len=int(cfg["seq_len"]), vocab=vocab, device=ctx.device)
    t0 = time.perf_counter()
    logits = net(x)
    loss: Any = torch.nn.functional.cross_entropy(logits.float().view(-1, vocab), y.reshape(-1))
    if slow:
        time.sleep(slow)
    loss.backward()
    ctx.sync()
    t1 = time.perf_counter()
    opt.step()  # this rank's shard only: no collective in it
    opt.zero_grad(set_to_none=True)
    ctx.sync()
    t2 = time.perf_counter()
    return float(loss.item()), t2 - t0, t2 - t1


def train(ctx: WorkerContext, *, fsdp: dict[str, Any]) -> dict[str, Any]:
    """Train for ``fsdp["steps"]`` steps or ``fsdp["seconds"]`` (at least ``min_steps``),
    checkpointing every ``checkpoint_every`` steps and at the end; verify the last
    checkpoint; return the figures. The seconds count the periodic checkpoints too, so the
    phase is bounded however fast the node is: the plan adds one step and two writes (a
    periodic one that crosses the deadline, the final one) and one read."""
    cfg = fsdp["model"]
    bf16 = ctx.backend.cuda
    wall_start = time.time()
    net, opt = build(ctx, cfg, bf16=bf16, seed=0)
    local_params = sum(checkpoint._local(p).numel() for p in net.parameters())
    slow = seams.slow_seconds(ctx.rank)
    losses: list[float] = []
    step_s: list[float] = []
    opt_s: list[float] = []
    writes: list[dict[str, Any]] = []
    step = 0
    path = ""
    start = time.perf_counter()
    while True:
        ctx.step(step)
        with ctx.collective():  # every step all-gathers and reduce-scatters
            loss, seconds, opt_seconds = _step(ctx, net, opt, cfg=cfg, step=step, slow=slow)
            losses.append(loss)
            step_s.append(seconds)
            opt_s.append(opt_seconds)
            step += 1
            done = _stop_vote(ctx, step >= fsdp["steps"] or (
                time.perf_counter() - start >= fsdp["seconds"] and step >= fsdp["min_steps"]))
        if done or step % int(fsdp["checkpoint_every"]) == 0:
            previous, path = path, os.path.join(fsdp["checkpoint_dir"], f"step-{step:07d}")
            writes.append({"step": step, **checkpoint.save(ctx, net, opt, path)})
            if previous and ctx.rank == 0:
                checkpoint.remove(previous)
        if done:
            break
    ctx.step(step)
    keep = not ctx.backend.cuda or 2 * float(fsdp["fraction"]) <= 0.9
    verify = checkpoint.round_trip(
        ctx, net, opt, path=path, fresh=lambda: build(ctx, cfg, bf16=bf16, seed=1),
        keep_on_device=keep)
    if ctx.rank == 0:
        checkpoint.remove(path)
    tokens = int(cfg["batch"]) * int(cfg["seq_len"])
    return {"steps": step, "losses": losses, "step_s": step_s, "opt_s": opt_s,
            "tokens_per_step": tokens,
            "n_params": fsdp["n_params"], "local_params": local_params,
            "flops_per_step": fsdp["flops_per_token"] * tokens,
            "precision": "bf16 compute, fp32 master" if bf16 else "fp32",
            "checkpoints": writes, "verify": verify, "layers": int(cfg["layers"]),
            "wall": [wall_start, time.time()]}
