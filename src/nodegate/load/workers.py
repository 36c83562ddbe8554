"""A gang of worker processes, one per GPU, every phase bounded by a deadline.

Why a home-made gang and not ``torch.multiprocessing.spawn``: ``spawn`` joins forever when a
rank hangs, and re-imports torch in every child (seconds each on a small CPU). Here the workers
fork from a forkserver that has imported torch once, join one ``torch.distributed`` group
(gloo or NCCL, with the profile's collective timeout) and take phases from a queue. The
coordinator waits with a deadline: a rank that dies or stops reporting ends the phase with its
rank and last step as evidence, and the gang is killed (SIGKILL, then reaped), so nothing is
left behind; the next phase starts a fresh gang. Each worker also exits on its own when the
coordinator process disappears.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import queue
import re
import signal
import socket
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from nodegate.load.devices import CUDA_ORDER_ENV, Backend

#: Seconds the ranks waiting in a collective get to report once one rank has died or errored.
GRACE_S = 3.0
#: A rank working on its own after another failed is waited for while it made progress within
#: this many seconds (it is not stuck: its phase needs no other rank to finish).
STALE_S = 15.0
#: Errors that are a failure of waiting on other ranks, not of this rank's GPU.
WAIT_ERRORS = re.compile(r"timed? ?out|timeout|watchdog|connection (closed|reset)|"
                         r"closed by peer|communicator was aborted|broken pipe", re.IGNORECASE)
#: Progress slots per rank in the shared array: step, last-beat time, in-a-collective flag.
SLOTS = 3


@dataclass
class WorkerContext:
    """What a phase function gets inside a worker."""

    rank: int
    world: int
    backend: Backend
    progress: Any  # multiprocessing Array of doubles, SLOTS per rank
    #: this rank's GPU on its own node when ranks span nodes (torchrun's LOCAL_RANK)
    local_rank: int | None = None

    @property
    def device(self) -> Any:
        from nodegate.load.devices import torch_device

        return torch_device(self.backend, self.gpu_index)

    @property
    def gpu_index(self) -> int:
        return self.rank if self.local_rank is None else self.local_rank

    def step(self, step: int) -> None:
        """Record progress: the coordinator names this step if the rank dies or hangs."""
        self.progress[self.rank * SLOTS] = float(step)
        self.progress[self.rank * SLOTS + 1] = time.time()

    @contextlib.contextmanager
    def collective(self) -> Iterator[None]:
        """Mark work that waits on the other ranks (a collective, or a step that holds one).

        When a phase fails, a rank caught inside such a block was waiting for its peers: its
        timeout, error or death (NCCL's watchdog aborts the process) is a consequence, and the
        rank that failed outside one is the cause. The mark stays set when the block raises."""
        self.progress[self.rank * SLOTS + 2] = 1.0
        yield
        self.progress[self.rank * SLOTS + 2] = 0.0

    def clear_marks(self) -> None:
        self.step(0)
        self.progress[self.rank * SLOTS + 2] = 0.0

    def sync(self) -> None:
        from nodegate.load.devices import sync

        sync(self.backend, self.gpu_index if self.backend.cuda else None)


@dataclass
class RankFailure:
    rank: int
    kind: str  # died | hung | error | no-start
    last_step: int | None
    message: str
    exitcode: int | None = None
    #: it failed while waiting on its peers (see ``WorkerContext.collective``)
    in_collective: bool = False
    #: the first failure the coordinator saw (what set the others off, unless it timed out)
    trigger: bool = False

    def evidence(self) -> dict[str, Any]:
        return {"rank": self.rank, "kind": self.kind, "last_step": self.last_step,
                "message": self.message[-2000:], "exitcode": self.exitcode,
                "in_collective": self.in_collective, "trigger": self.trigger}

    @property
    def waited_out(self) -> bool:
        """A failure of waiting itself: a collective's timeout, a peer's closed connection,
        NCCL's watchdog abort (SIGABRT), or no answer. Never the cause when others failed."""
        if self.kind in ("hung", "no-start"):
            return True
        if self.kind == "died":
            return self.exitcode == -signal.SIGABRT
        return bool(WAIT_ERRORS.search(self.message))


@dataclass
class PhaseOutcome:
    name: str
    values: dict[int, Any] = field(default_factory=dict)
    failures: list[RankFailure] = field(default_factory=list)
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failures


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _watch_parent(parent: int) -> None:
    """Exit when the coordinator is gone: no orphaned rank keeps a GPU busy."""
    while True:
        time.sleep(1.0)
        try:
            os.kill(parent, 0)
        except OSError:
            os._exit(3)


def _worker_main(  # noqa: PLR0917 - multiprocessing passes args positionally
        rank: int, world: int, backend: Backend, init_method: str, timeout_s: float,
                 tasks: Any, results: Any, progress: Any, parent: int,
                 env: dict[str, str]) -> None:
    os.environ.update(CUDA_ORDER_ENV)  # CUDA device i is NVML GPU i (before CUDA starts)
    os.environ.update(env)
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    import torch
    import torch.distributed as dist

    if backend.cuda:
        torch.cuda.set_device(rank)
    else:
        torch.set_num_threads(1)  # workers share the CPU cores: one thread each
    ctx = WorkerContext(rank, world, backend, progress)
    try:
        kwargs: dict[str, Any] = {}
        if backend.dist == "nccl":  # binds the group (and its barrier) to this rank's GPU
            kwargs["device_id"] = torch.device("cuda", rank)
        dist.init_process_group(backend.dist, init_method=init_method, rank=rank,
                                world_size=world, timeout=timedelta(seconds=timeout_s), **kwargs)
    except Exception:
        results.put((-1, rank, "error", traceback.format_exc()))
        return
    results.put((-1, rank, "ok", None))
    try:
        while True:
            task = tasks.get()
            if task is None:
                break
            seq, func, kwargs = task
            ctx.clear_marks()
            try:
                value = func(ctx, **kwargs)
            except Exception:
                results.put((seq, rank, "error", traceback.format_exc()))
                continue
            results.put((seq, rank, "ok", value))
    finally:
        with contextlib.suppress(Exception):
            dist.destroy_process_group()


def _context() -> Any:
    """A forkserver that preloads torch, so each worker starts in milliseconds, not seconds."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "torch.distributed", "nodegate.load.tasks"])
    return ctx


@dataclass
class _Collecting:
    """One phase's wait: the outcome so far, the ranks yet to answer, and when the grace
    that the first failure starts runs out."""

    outcome: PhaseOutcome
    pending: set[int]
    grace_until: float | None = None

    def failed(self, failure: RankFailure) -> None:
        """Record a failure; the first is the trigger and starts the grace."""
        failure.trigger = self.grace_until is None
        self.outcome.failures.append(failure)
        self.grace_until = self.grace_until or time.monotonic() + GRACE_S


class Gang:
    """``world`` workers in one process group; ``run`` a phase on all of them with a deadline."""

    def __init__(self, world: int, backend: Backend, *, collective_timeout_s: float,
                 start_timeout_s: float = 120.0, env: dict[str, str] | None = None,
                 stale_s: float = STALE_S) -> None:
        self.world = world
        self.backend = backend
        self.collective_timeout_s = collective_timeout_s
        self.start_timeout_s = start_timeout_s
        self.stale_s = stale_s  # ``STALE_S``; tests of a hung rank shorten it
        self.env = dict(env or {})
        self.healthy = False
        self._seq = 0
        self._procs: list[Any] = []
        self._tasks: list[Any] = []
        self._results: Any = None
        self._progress: Any = None

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs if p.pid is not None]

    def start(self) -> PhaseOutcome:
        """Start the workers and wait until every rank has joined the process group."""
        ctx = _context()
        self._results = ctx.Queue()
        self._progress = ctx.Array("d", self.world * SLOTS, lock=False)
        init_method = f"tcp://127.0.0.1:{_free_port()}"
        for rank in range(self.world):
            tasks = ctx.Queue()
            proc = ctx.Process(
                target=_worker_main, name=f"nodegate-load-rank{rank}",
                args=(rank, self.world, self.backend, init_method, self.collective_timeout_s,
                      tasks, self._results, self._progress, os.getpid(), self.env))
            proc.start()
            self._procs.append(proc)
            self._tasks.append(tasks)
        outcome = self._collect("start", -1, self.start_timeout_s)
        self.healthy = outcome.ok
        if not outcome.ok:
            self.close()
        return outcome

    def run(self, name: str, func: Callable[..., Any], timeout_s: float, *,
            kwargs: dict[str, Any] | None = None,
            per_rank: Callable[[int], dict[str, Any]] | None = None,
            on_progress: Callable[[list[int]], None] | None = None,
            beat_s: float = 2.0) -> PhaseOutcome:
        """Run ``func(ctx, **kwargs)`` on every rank; bounded by ``timeout_s`` in total.
        ``on_progress`` gets every rank's last step each ``beat_s`` seconds."""
        if not self.healthy:
            raise RuntimeError("gang is not running")
        self._seq += 1
        for rank, tasks in enumerate(self._tasks):
            args = dict(kwargs or {})
            if per_rank is not None:
                args.update(per_rank(rank))
            tasks.put((self._seq, func, args))
        outcome = self._collect(name, self._seq, timeout_s, on_progress, beat_s)
        if not outcome.ok:
            # a rank that died or hung poisons the process group: start afresh, and kill at
            # once (a rank stuck in a collective never reads a polite stop)
            self.healthy = False
            self.close()
        return outcome

    def _last_step(self, rank: int) -> int | None:
        step = self._progress[rank * SLOTS] if self._progress is not None else 0.0
        return int(step)

    def _last_beat(self, rank: int) -> float:
        return float(self._progress[rank * SLOTS + 1]) if self._progress is not None else 0.0

    def _in_collective(self, rank: int) -> bool:
        return self._progress is not None and self._progress[rank * SLOTS + 2] > 0

    def _collect(self, name: str, seq: int, timeout_s: float,
                 on_progress: Callable[[list[int]], None] | None = None,
                 beat_s: float = 2.0) -> PhaseOutcome:
        """Wait for every rank's result until the deadline. Once one rank has failed, a rank
        waiting in a collective gets ``GRACE_S`` more (it cannot finish without the failed
        one), a rank working on its own keeps going while it shows progress (``stale_s``), so
        it finishes and is not mistaken for a hung one."""
        outcome = PhaseOutcome(name)
        start = time.monotonic()
        deadline = start + timeout_s
        wait = _Collecting(outcome, set(range(self.world)))
        last_beat = 0.0
        while wait.pending:
            now = time.monotonic()
            if now >= deadline or self._grace_over(wait, now):
                break
            self._take_result(seq, wait, beat_s)
            self._reap_dead(name, wait)
            if on_progress is not None and now - last_beat >= beat_s:
                last_beat = now
                on_progress([self._last_step(r) or 0 for r in range(self.world)])
        self._give_up(name, seq, timeout_s, deadline, wait)
        outcome.failures = _blame(outcome.failures)
        outcome.duration_s = time.monotonic() - start
        return outcome

    def _grace_over(self, wait: _Collecting, now: float) -> bool:
        """After a failure's grace: stop waiting unless a pending rank works on its own and
        still shows progress."""
        return wait.grace_until is not None and now >= wait.grace_until and not [
            r for r in wait.pending if not self._in_collective(r)
            and time.time() - self._last_beat(r) < self.stale_s]

    def _take_result(self, seq: int, wait: _Collecting, beat_s: float) -> None:
        """Record one rank's result for this phase, if one comes within the poll interval;
        a stale phase's result or a rank already settled is dropped."""
        try:
            got_seq, rank, status, value = self._results.get(timeout=min(0.2, beat_s))
        except queue.Empty:
            return
        if got_seq != seq or rank not in wait.pending:
            return
        wait.pending.discard(rank)
        if status == "ok":
            wait.outcome.values[rank] = value
        else:
            wait.failed(RankFailure(rank, "error", self._last_step(rank), str(value),
                                    in_collective=self._in_collective(rank)))

    def _reap_dead(self, name: str, wait: _Collecting) -> None:
        """A pending rank whose process exited failed: it will never answer."""
        for rank in sorted(wait.pending):
            proc = self._procs[rank]
            if proc.exitcode is not None:
                wait.pending.discard(rank)
                wait.failed(RankFailure(
                    rank, "died", self._last_step(rank),
                    f"rank {rank} exited with code {proc.exitcode} during {name}",
                    exitcode=proc.exitcode, in_collective=self._in_collective(rank)))

    def _give_up(self, name: str, seq: int, timeout_s: float, deadline: float,
                 wait: _Collecting) -> None:
        """Every rank still pending at the end failed: hung (or never started, for the
        start-up phase ``seq == -1``)."""
        for rank in sorted(wait.pending):
            why = (f"deadline of {timeout_s:.0f} s passed" if time.monotonic() >= deadline
                   else "stopped responding after another rank failed")
            kind = "no-start" if seq == -1 else "hung"
            wait.outcome.failures.append(RankFailure(
                rank, kind, self._last_step(rank), f"rank {rank} {why} during {name}",
                in_collective=self._in_collective(rank)))

    def close(self) -> None:
        """Stop every worker: a polite stop when healthy, SIGKILL otherwise; always reaped."""
        if self.healthy:
            for tasks in self._tasks:
                with contextlib.suppress(Exception):
                    tasks.put(None)
            for proc in self._procs:
                proc.join(timeout=10)
        self.healthy = False
        for proc in self._procs:
            if proc.exitcode is None:
                with contextlib.suppress(Exception):
                    proc.kill()
        for proc in self._procs:
            proc.join(timeout=10)
        for q in [*self._tasks, self._results]:
            if q is not None:
                with contextlib.suppress(Exception):
                    q.close()
                    q.cancel_join_thread()
        self._procs, self._tasks = [], []

    def __enter__(self) -> Gang:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _blame(failures: list[RankFailure]) -> list[RankFailure]:
    """The causes first (``causes``), then the rest, each by rank."""
    named = causes(failures)
    rest = [f for f in failures if f not in named]
    return sorted(named, key=lambda f: f.rank) + sorted(rest, key=lambda f: f.rank)


def causes(failures: list[RankFailure]) -> list[RankFailure]:
    """The failures that name a GPU.

    1. Ranks that failed outside a collective (died, hung or raised while working alone).
    2. Else the first failure seen, unless it was a failure of waiting (a collective's
       timeout, NCCL's watchdog): a CUDA error surfaces at a sync inside the step, so the rank
       that raised it is caught inside a collective block too, but it failed first.
    3. Else all of them: every rank was waiting (a fabric or collective-library hang).
    """
    own = [f for f in failures if not f.in_collective]
    if own:
        return own
    first = [f for f in failures if f.trigger and not f.waited_out]
    return first or list(failures)
