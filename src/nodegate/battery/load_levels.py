"""The load levels' entry point: run the standard or acceptance load level and judge it.

``run(profile, level)`` starts one worker per GPU (CUDA/NCCL, or CPU/gloo when there is no
GPU), runs the phases in order with the telemetry sampler going, judges every figure against
``profile["thresholds"]`` and returns a ``LoadOutcome``. It never hangs: each phase has a
deadline, a phase that loses a rank FAILs and the next phase starts a fresh gang.

    standard:   gemm (per dtype), memory (HBM + host copies), p2p, allreduce
    acceptance: standard + GEMM in acceptance_dtypes + hbm_patterns (the whole-HBM test)
                + burnin (DDP training) + fsdp (sharded training, checkpoints on the NVMe
                array, verified reload) + soak (GEMM held for soak_seconds)

It lives in the battery, above both halves: ``nodegate.load`` measures, ``nodegate.judge.load``
judges, and this module runs one then the other, phase by phase.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nodegate.judge import fsdp as fsdp_verdicts
from nodegate.judge import load as verdicts
from nodegate.judge import load_integrity as integrity
from nodegate.load import config, devices, fsdp_size, hbm_test, plan, seams, tasks
from nodegate.load.outcome import LoadOutcome
from nodegate.load.telemetry import Sampler, Telemetry
from nodegate.load.workers import Gang, PhaseOutcome
from nodegate.progress import Beat, Progress, adapt
from nodegate.results import CheckResult, Verdict

#: Headroom on every phase deadline beyond its own duration and the collective timeout.
DEADLINE_SLACK_S = 30.0


@dataclass
class _Run:
    cfg: config.LoadConfig
    backend: devices.Backend
    world: int
    th: dict[str, Any]
    sampler: Sampler
    progress: Progress
    env: dict[str, str]
    gang: Gang | None = None
    results: list[CheckResult] = field(default_factory=list)
    phases: list[dict[str, Any]] = field(default_factory=list)
    matrices: dict[str, Any] = field(default_factory=dict)
    gpus: list[int] = field(default_factory=list)  # each rank's NVML index
    planned: dict[str, float] = field(default_factory=dict)  # phase -> seconds (load.plan)

    @property
    def indices(self) -> list[int]:
        return self.gpus or list(range(self.world))

    def ensure_gang(self) -> PhaseOutcome | None:
        """A running gang, started afresh after a phase that lost a rank."""
        if self.gang is not None and self.gang.healthy:
            return None
        self.gang = Gang(self.world, self.backend, env=self.env,
                         collective_timeout_s=self.cfg.collective_timeout_s,
                         start_timeout_s=self.cfg.collective_timeout_s + DEADLINE_SLACK_S)
        started = self.gang.start()
        return None if started.ok else started

    def phase(self, name: str, func: Callable[..., Any], expected_s: float,
              loads: bool = True, estimate_s: float | None = None,
              **kwargs: Any) -> PhaseOutcome:
        """Run one phase on the gang. ``expected_s`` sizes the deadline (generous: start-up,
        calibration); ``estimate_s``, when known better, is what the progress bar shows.
        The plan's figure, where larger, sizes both."""
        planned = self.planned.get(name)
        if planned is not None:
            expected_s = max(expected_s, planned)
            estimate_s = estimate_s or planned
        failed_start = self.ensure_gang()
        if failed_start is not None:
            failed_start.name = name
            self.phases.append({"name": name, "duration_s": round(failed_start.duration_s, 3),
                                "ok": False, "workers": self.world,
                                "error": "workers did not start"})
            return failed_start
        assert self.gang is not None
        timeout = expected_s * 2 + self.cfg.collective_timeout_s + DEADLINE_SLACK_S
        self.progress.line(f"load: {name} on {self.world} worker(s) ({self.backend.name}), "
                           f"~{estimate_s or expected_s:.1f} s")
        if loads:
            self.sampler.begin_phase(self.indices)
        try:
            outcome = self.gang.run(name, func, timeout, kwargs=kwargs,
                                    on_progress=self._beat(name, estimate_s or expected_s),
                                    beat_s=self.progress.beat_s)
        finally:
            self.progress.clear()
            if loads:
                self.sampler.end_phase(self.indices)
        self.progress.line(f"load: {name} {'done' if outcome.ok else 'FAILED'} in "
                           f"{outcome.duration_s:.1f} s")
        walls = [v["wall"] for v in outcome.values.values()
                 if isinstance(v, dict) and "wall" in v]
        if walls:
            self.sampler.add_window(name, min(w[0] for w in walls), max(w[1] for w in walls))
        self.phases.append({"name": name, "duration_s": round(outcome.duration_s, 3),
                            "ok": outcome.ok, "workers": self.world,
                            "deadline_s": round(timeout, 1)})
        return outcome

    def _beat(self, name: str, expected_s: float) -> Callable[[list[int]], None]:
        started = time.monotonic()

        def beat(steps: list[int]) -> None:
            self.progress.beat(Beat(f"load: {name}", time.monotonic() - started, expected_s,
                                    tuple(steps)))
        return beat

    def judged(self, outcome: PhaseOutcome, checks: list[str],
               judging: Callable[[], list[CheckResult]]) -> None:
        """The phase's completion check, then its figures, or SKIPs when it ended early."""
        self.results += verdicts.phase_completed(outcome, self.world)
        if outcome.ok:
            self.results += judging()
            return
        first = outcome.failures[0]
        self.results += verdicts.skipped(
            checks, f"{outcome.name} phase ended early: rank {first.rank} {first.kind} "
            f"at step {first.last_step}")


def _gemm(run: _Run, dtype: str, seconds: float, name: str = "gemm") -> None:
    outcome = run.phase(name, tasks.gemm, seconds + 5, estimate_s=seconds, dtype=dtype,
                        n=run.cfg.gemm_size, seconds=seconds)
    if name != "soak":
        speed, consistency = integrity.gemm_checks(dtype)
        # the outlier check too: a dtype with no kernel here (or a phase that ended early)
        # says why for every check the phase would have emitted
        checks = [speed, consistency, f"{speed}_outlier"]
        why_not = integrity.gemm_unsupported(outcome.values) if outcome.ok else None
        run.judged(outcome, checks, lambda: verdicts.skipped(checks, why_not) if why_not
                   else verdicts.gemm(outcome.values, run.th))
    else:  # the soak: GEMM digests must still agree; speed is not judged twice
        run.judged(outcome, [], lambda: [
            r for r in verdicts.gemm(outcome.values, run.th, speed=False)
            if r.verdict == Verdict.FAIL])


def _memory(run: _Run) -> None:
    cfg = run.cfg
    # the host copies take turns, a few seconds per GPU
    outcome = run.phase("memory", tasks.memory, 10.0 + 3.0 * run.world, hbm_bytes=cfg.hbm_bytes,
                        copy_bytes=cfg.copy_bytes, iters=cfg.copy_iters)
    run.judged(outcome, ["hbm_bandwidth", "h2d_bandwidth", "d2h_bandwidth",
                         "hbm_copy_verified", "h2d_copy_verified", "d2h_copy_verified"],
               lambda: verdicts.memory(outcome.values, run.th)
               + integrity.memory_copies(outcome.values))


def _p2p(run: _Run) -> None:
    if run.world < 2:
        run.results += verdicts.skipped(["p2p_unidir", "p2p_bidir", "p2p_copy_verified"],
                                        "one GPU: no peer to copy to")
        return
    outcome = run.phase("p2p", tasks.p2p, 0.05 * run.world**2, loads=False,
                        nbytes=run.cfg.p2p_bytes, iters=run.cfg.copy_iters)

    def judging() -> list[CheckResult]:
        value = outcome.values[0]
        run.matrices.update(verdicts.p2p_matrix(value, run.world))
        return verdicts.p2p(value, run.world, run.th) + integrity.p2p_copies(value, run.world)

    run.judged(outcome, ["p2p_unidir", "p2p_bidir", "p2p_copy_verified"], judging)


def _allreduce(run: _Run) -> None:
    if run.world < 2:
        run.results += verdicts.skipped(["allreduce_busbw", "allreduce_verified"],
                                        "one GPU: nothing to all-reduce")
        return
    outcome = run.phase("allreduce", tasks.allreduce, 0.5 * run.cfg.allreduce_steps,
                        loads=False, max_bytes=run.cfg.allreduce_max_bytes,
                        steps=run.cfg.allreduce_steps)
    run.judged(outcome, ["allreduce_busbw", "allreduce_verified"],
               lambda: verdicts.allreduce(outcome.values[0], run.th)
               + integrity.allreduce_results(outcome.values))


def _hbm_patterns(run: _Run) -> None:
    """The whole-HBM pattern test on every GPU at once (acceptance)."""
    cfg = run.cfg
    outcome = run.phase("hbm_patterns", hbm_test.patterns, cfg.hbm_test_seconds + 10,
                        estimate_s=cfg.hbm_test_seconds, fraction=cfg.hbm_test_fraction,
                        seconds=cfg.hbm_test_seconds, cpu_bytes=cfg.hbm_test_cpu_bytes,
                        chunk_bytes=cfg.hbm_test_chunk_bytes)
    run.judged(outcome, ["hbm_patterns", "hbm_patterns_gbps"],
               lambda: integrity.hbm_patterns(outcome.values, run.th))


def _collectives(run: _Run) -> None:
    """all_gather, reduce_scatter, alltoall and broadcast with all_reduce's sweep."""
    checks = [f"{verdicts.COLLECTIVE_CHECK[n]}_busbw" for n in verdicts.NODE_COLLECTIVES]
    if run.world < 2:
        run.results += verdicts.skipped(checks, "one GPU: no collective")
        return
    outcome = run.phase("collectives", tasks.collectives,
                        0.5 * run.cfg.allreduce_steps * len(verdicts.NODE_COLLECTIVES),
                        loads=False, names=list(verdicts.NODE_COLLECTIVES),
                        max_bytes=run.cfg.allreduce_max_bytes, steps=run.cfg.allreduce_steps)
    run.judged(outcome, checks, lambda: verdicts.collectives(outcome.values[0], run.th))


def _burnin(run: _Run) -> None:
    cfg = run.cfg
    outcome = run.phase("burnin", tasks.burnin, cfg.burnin_seconds + 10,
                        estimate_s=cfg.burnin_seconds,
                        steps=cfg.burnin_steps, min_steps=cfg.burnin_min_steps,
                        seconds=cfg.burnin_seconds, model=cfg.burnin_model,
                        precision=cfg.dtypes[0])
    run.judged(outcome, ["burnin_loss", "burnin_straggler", "burnin_tokens_per_s",
                         "burnin_tflops", "burnin_param_consistency"],
               lambda: verdicts.burnin(outcome.values, run.th))


def _fsdp(run: _Run, where: dict[str, Any]) -> None:
    """The FSDP burn-in; ``where`` is the pre-flight's finding (checkpoint directory, on the
    NVMe array's mount or not), kept as evidence."""
    from nodegate.load import fsdp

    # a directory of this run's own, removed whatever happens: a rank that dies mid-write
    # must not leave a 100 GB checkpoint on the array
    settings = {**run.cfg.fsdp, "checkpoint_dir": os.path.join(
        run.cfg.fsdp["checkpoint_dir"], f"run-{os.getpid()}-{int(time.time())}")}
    try:
        outcome = run.phase("fsdp", fsdp.train, settings["seconds"] + 20,
                            estimate_s=run.planned.get("fsdp"), fsdp=settings)
    finally:
        shutil.rmtree(settings["checkpoint_dir"], ignore_errors=True)
    run.judged(outcome, fsdp_verdicts.JUDGED, lambda: fsdp_verdicts.fsdp(
        outcome.values, run.th, {**settings, **where}))


def _series(tel: Telemetry) -> dict[str, Any]:
    out: dict[str, Any] = {name: dict(series) for name, series in tel.series.items()}
    if tel.available:
        out["_windows"] = [{"phase": p, "t0": round(a, 3), "t1": round(b, 3)}
                           for p, a, b in tel.windows]
        out["_hz"] = tel.hz
    return out


_GPU_NAME = re.compile(r"\bgpu(\d+)\b")


def name_gpus(results: list[CheckResult], matrices: dict[str, Any], gpus: list[int]
              ) -> tuple[list[CheckResult], dict[str, Any]]:
    """Rank-named entities (``gpu<rank>``, ``gpu<a>-gpu<b>``) renamed to the NVML index of
    each rank's GPU, so the load results name the same GPU as the quick checks and NVML do
    when a scheduler's ``CUDA_VISIBLE_DEVICES`` hands us a subset."""
    if gpus == list(range(len(gpus))):
        return results, matrices

    def rename(text: str) -> str:
        return _GPU_NAME.sub(lambda m: f"gpu{gpus[int(m.group(1))]}", text)

    named = [dataclasses.replace(r, entity=rename(r.entity)) for r in results]
    renamed = {key: {**value, "entities": [rename(e) for e in value.get("entities", [])]}
               for key, value in matrices.items()}
    return named, renamed


def workers_for(profile: dict[str, Any], backend: devices.Backend, workers: int | None) -> int:
    """The profile's GPU count, scaled down by ``workers`` and by the GPUs torch can see."""
    count = int((profile.get("gpu") or {}).get("count") or 1)
    if workers is not None:
        count = min(count, max(1, workers))
    if backend.cuda:
        count = min(count, backend.device_count)
    return max(1, count)


def run(profile: dict[str, Any], level: str, *, duration_scale: float = 1.0,
        workers: int | None = None, device: str = "auto",
        progress: Progress | Callable[[str], None] | None = None,
        env: dict[str, str] | None = None) -> LoadOutcome:
    """Run ``level`` on this node; ``env`` goes to every worker (how tests set the seams).
    ``progress``: a ``nodegate.progress.Progress`` (live line or log lines) or a callable
    that takes one line."""
    started = time.monotonic()
    cfg = config.from_profile(profile, level, duration_scale)
    backend = devices.choose(device)
    world = workers_for(profile, backend, workers)
    backend = devices.for_world(backend, world)
    if not backend.cuda and "burnin_model" not in (profile.get("load") or {}):
        cfg = dataclasses.replace(cfg, burnin_model=dict(config.CPU_BURNIN_MODEL))
    where: dict[str, Any] = {}
    if cfg.acceptance:  # sized, and its checkpoint's room checked, before any load starts
        cfg = dataclasses.replace(cfg, fsdp=fsdp_size.resolve(cfg.fsdp, cuda=backend.cuda,
                                                              world=world))
        where = fsdp_size.preflight(cfg.fsdp)
    if not backend.cuda:  # CPU workers test hbm_test_cpu_bytes, not the profile's GPU memory
        cfg = dataclasses.replace(cfg, gpu_memory_bytes=0)
    shown = adapt(progress)
    gpus = devices.nvml_indices(backend, world)
    sampler = Sampler(gpus, cfg.sample_hz)
    th = verdicts.thresholds_of(profile)
    run_ = _Run(cfg, backend, world, th, sampler, shown, dict(env or {}), gpus=gpus,
                planned=plan.phases(cfg, world, th))
    shown.line(plan.describe(cfg, world, th))
    tel = sampler.start()
    if not tel.available:
        shown.line(f"load: telemetry off ({tel.reason})")
    try:
        for dtype in cfg.dtypes:
            _gemm(run_, dtype, cfg.gemm_seconds,
                  name="gemm" if dtype == cfg.dtypes[0] else f"gemm_{dtype}")
        _memory(run_)
        _p2p(run_)
        _allreduce(run_)
        _collectives(run_)
        ran = [*cfg.dtypes, *(cfg.acceptance_dtypes if cfg.acceptance else ())]
        run_.results += integrity.gemm_not_run(ran, level)
        if cfg.acceptance:
            for dtype in cfg.acceptance_dtypes:
                _gemm(run_, dtype, cfg.dtype_gemm_seconds, name=f"gemm_{dtype}")
            _hbm_patterns(run_)
            _burnin(run_)
            _fsdp(run_, where)
            _gemm(run_, cfg.dtypes[0], cfg.soak_seconds, name="soak")
    finally:
        if run_.gang is not None:
            run_.gang.close()
        sampler.end_phase(run_.indices)
        tel = sampler.stop()
    results, matrices = name_gpus(run_.results, run_.matrices, gpus)
    results += verdicts.telemetry(tel, run_.th, [verdicts.gpu(i) for i in gpus],
                                  power_settle_s=cfg.power_settle_s)
    gen = (profile.get("pcie") or {}).get("gen")
    results += verdicts.pcie_under_load(tel, [verdicts.gpu(i) for i in gpus],
                                        None if gen is None else int(gen))
    shown.line(f"load: {level} done in {time.monotonic() - started:.1f} s")
    return LoadOutcome(
        results=results, series=_series(tel), matrices=matrices,
        backend=backend.name, phases=run_.phases,
        config={**cfg.as_dict(), "workers": world, "gpus": gpus,
                "planned_s": {k: round(v, 1) for k, v in run_.planned.items()}},
        seams={**seams.active(), **{k: v for k, v in (env or {}).items() if k in seams.ALL}})
