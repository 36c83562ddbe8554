"""One rank of the multi-node collectives, started by torchrun on each node of the group.

torchrun (``torch.distributed.run``) does the rendezvous and sets RANK, WORLD_SIZE and
LOCAL_RANK; this module joins the process group, runs the same nccl-tests style sweeps as the
node's own battery (``nodegate.load.tasks.collectives``: all_reduce, all_gather,
reduce_scatter, alltoall) and, on each node's local rank 0, writes the
figures and the hosts that took part to ``--out``. Judging happens in the coordinator
(``nodegate.load.multinode``), which also bounds the whole run with a deadline.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
from datetime import timedelta
from pathlib import Path
from typing import Any


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="nodegate.load.multinode_worker")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--backend", choices=("cpu", "cuda"), required=True)
    parser.add_argument("--max-bytes", type=int, required=True)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--seconds-per-size", type=float, default=0.2)
    parser.add_argument("--timeout-s", type=float, default=300.0)
    parser.add_argument("--collectives", default="all_reduce",
                        help="comma-separated nccl-tests names, run in this order")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run this rank; an exception is also left in ``<out>.rank<N>.err`` for the coordinator
    (torchrun's own summary of a failed child keeps no traceback)."""
    args = parse(argv)
    try:
        return _run(args)
    except BaseException:
        import traceback

        rank = os.environ.get("RANK", "?")
        Path(f"{args.out}.rank{rank}.err").write_text(traceback.format_exc()[-4000:])
        raise


#: Bytes of a hostname exchanged between ranks (all_gather_object would need numpy).
NAME_BYTES = 64


def _gather_hostnames(device: Any, world: int) -> list[str]:
    import torch
    import torch.distributed as dist

    raw = socket.gethostname().encode()[:NAME_BYTES].ljust(NAME_BYTES, b"\0")
    mine = torch.tensor(list(raw), dtype=torch.uint8, device=device)
    every = [torch.zeros(NAME_BYTES, dtype=torch.uint8, device=device) for _ in range(world)]
    dist.all_gather(every, mine)
    return [bytes(t.cpu().tolist()).rstrip(b"\0").decode(errors="replace") for t in every]


def _run(args: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist

    from nodegate.load import tasks
    from nodegate.load.devices import Backend
    from nodegate.load.workers import SLOTS, WorkerContext

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    kwargs: dict[str, Any] = {}
    if args.backend == "cuda":
        backend = Backend("cuda", "nccl", torch.cuda.device_count())
        torch.cuda.set_device(local)
        kwargs["device_id"] = torch.device("cuda", local)
    else:
        backend = Backend("cpu", "gloo", 0)
        if local_world > 1:
            torch.set_num_threads(1)  # ranks of one node share its cores
    dist.init_process_group(backend.dist, timeout=timedelta(seconds=args.timeout_s), **kwargs)
    try:
        ctx = WorkerContext(rank, world, backend, [0.0] * (world * SLOTS), local_rank=local)
        names = [n for n in args.collectives.split(",") if n]
        value = tasks.collectives(ctx, names=names, max_bytes=args.max_bytes,
                                  steps=args.steps, seconds_per_size=args.seconds_per_size)
        hosts = _gather_hostnames(ctx.device, world)
    finally:
        dist.destroy_process_group()
    if local == 0:
        # "sweep" (the all-reduce's) is what reports before the other collectives carried
        record = {**value, "sweep": value["collectives"].get("all_reduce", []),
                  "backend": backend.name, "hosts": hosts, "rank": rank,
                  "local_world": local_world}
        tmp = args.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
