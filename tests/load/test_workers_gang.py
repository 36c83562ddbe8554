"""The load stack on CPU/gloo with real worker processes: figures, seams, no hangs."""

from __future__ import annotations

import itertools
import os
import tempfile
import time

import pytest

pytest.importorskip("torch")

from nodegate.battery import load_levels as levels
from nodegate.load import devices, seams, tasks
from nodegate.load.workers import Gang
from nodegate.progress import Beat
from nodegate.results import Verdict

pytestmark = [pytest.mark.torch, pytest.mark.slow]

TINY_MODEL = {"vocab": 64, "d_model": 32, "layers": 1, "heads": 2, "seq_len": 16, "batch": 4,
              "lr": 3e-3}


def profile(count: int, **load: object) -> dict:
    base = {"dtypes": ["bf16"], "gemm_size": 96, "gemm_seconds": 0.3, "hbm_bytes": 1 << 20,
            "copy_bytes": 1 << 19, "p2p_bytes": 1 << 18, "allreduce_max_bytes": 1 << 18,
            "allreduce_steps": 2, "burnin_steps": 12, "burnin_seconds": 30, "soak_seconds": 0.3,
            "soak_min_seconds": 0.3, "min_phase_seconds": 0.3, "sample_hz": 2,
            "collective_timeout_s": 8, "copy_iters": 2, "burnin_model": TINY_MODEL,
            "fsdp_seconds": 0.3, "fsdp_checkpoint_dir": tempfile.gettempdir(),
            "hbm_test_seconds": 0.3, "hbm_test_cpu_bytes": 1 << 16}
    base.update(load)
    return {"gpu": {"count": count}, "load": base, "thresholds": {
        "gemm_bf16_tflops_min": {"min": 1e-7, "unit": "TFLOPS", "source": "policy: test"},
        "straggler_margin_pct_max": {"max": 25, "unit": "%", "source": "policy: test"},
        "outlier_margin_pct_max": {"max": 1000, "unit": "%", "source": "policy: test"},
    }}


def by(results: list, check: str) -> dict:
    return {r.entity: r for r in results if r.check == check}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


class Recorder:
    """A Progress that keeps what the load level reported."""

    beat_s = 0.1

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.beats: list[Beat] = []
        self.clears = 0

    def line(self, message: str) -> None:
        self.lines.append(message)

    def beat(self, beat: Beat) -> None:
        self.beats.append(beat)

    def clear(self) -> None:
        self.clears += 1


def test_standard_level_measures_everything_with_units() -> None:
    progress = Recorder()
    out = levels.run(profile(3), "standard", progress=progress)
    assert out.backend == "cpu/gloo"
    # progress: a beat per phase with every rank's step, a done line, the live line cleared
    phases = {b.phase for b in progress.beats}
    assert {"load: gemm", "load: memory", "load: allreduce"} <= phases
    assert all(len(b.steps) == 3 and b.expected_s > 0 for b in progress.beats)
    assert max(max(b.steps) for b in progress.beats if b.phase == "load: gemm") > 0
    assert any(line.startswith("load: gemm done in ") for line in progress.lines)
    assert progress.clears >= 4
    # host copies: a fresh buffer, first-touched here; move_pages says where its pages are
    h2d = by(out.results, "h2d_bandwidth")["gpu0"]
    assert h2d.evidence["pinning"] == "pageable"  # CPU run: nothing to pin for
    assert sum(h2d.evidence["pages_on_node"].values()) == devices.PAGE_SAMPLES
    assert set(h2d.evidence["pages_on_node"]) <= set(devices.numa_nodes())
    units = {r.check: r.unit for r in out.results if r.verdict == Verdict.PASS}
    assert units["gemm_tflops"] == "TFLOPS"
    assert by(out.results, "gemm_consistency")["gpu2"].verdict == Verdict.PASS
    for check in ("hbm_bandwidth", "h2d_bandwidth", "d2h_bandwidth", "p2p_unidir"):
        skipped = next(iter(by(out.results, check).values()))
        assert skipped.verdict == Verdict.SKIP  # no threshold in this profile
    assert by(out.results, "allreduce_completed")["node"].verdict == Verdict.PASS
    judged = by(out.results, "allreduce_busbw")["node"].evidence["sweep"][-1]
    assert judged["iters"] >= tasks.JUDGED_ITERS  # the judged size is never one sample
    matrix = out.matrices["p2p_unidir_gbps"]
    assert matrix["entities"] == ["gpu0", "gpu1", "gpu2"] and matrix["values"][0][1] > 0
    assert {p["name"] for p in out.phases} == {"gemm", "memory", "p2p", "allreduce",
                                               "collectives"}
    # no NVML library on this machine: telemetry checks ERROR, naming why (what
    # could not be measured under load is not a SKIP)
    thermal = by(out.results, "thermal_peak")["gpu0"]
    assert thermal.verdict == Verdict.ERROR
    assert thermal.evidence["reason"].startswith("telemetry unavailable:")


def test_corrupted_gemm_output_names_that_gpu() -> None:
    out = levels.run(profile(3), "standard", env={seams.CORRUPT_GPU: "1"})
    consistency = by(out.results, "gemm_consistency")
    assert consistency["gpu1"].verdict == Verdict.FAIL
    assert "silent data corruption" in consistency["gpu1"].evidence["reason"]
    assert consistency["gpu0"].verdict == consistency["gpu2"].verdict == Verdict.PASS


def test_intermittent_corruption_is_caught_by_the_gpus_own_compare() -> None:
    # every 3rd output of GPU 1 has a flipped bit: its first output (the one compared across
    # GPUs) is clean, so only the per-iteration self check can see it
    out = levels.run(profile(3), "standard", env={seams.CORRUPT_GPU: "1:3"})
    consistency = by(out.results, "gemm_consistency")
    assert consistency["gpu1"].verdict == Verdict.FAIL
    assert consistency["gpu1"].measured == consistency["gpu1"].threshold  # digests agree
    assert consistency["gpu1"].evidence["self_mismatches"] > 0
    assert "differ from this GPU's first result" in consistency["gpu1"].evidence["reason"]
    assert consistency["gpu0"].verdict == consistency["gpu2"].verdict == Verdict.PASS


def test_slow_rank_is_a_straggler_and_a_dead_rank_fails_then_battery_goes_on() -> None:
    out = levels.run(profile(3), "acceptance", env={seams.SLOW_RANK: "2:0.05"})
    straggler = by(out.results, "burnin_straggler")
    assert straggler["gpu2"].verdict == Verdict.FAIL
    assert straggler["gpu0"].verdict == straggler["gpu1"].verdict == Verdict.PASS
    assert by(out.results, "burnin_loss")["node"].verdict == Verdict.PASS
    assert {r.verdict for r in by(out.results, "burnin_param_consistency").values()} == {
        Verdict.PASS}

    started = time.monotonic()
    out = levels.run(profile(2), "acceptance", env={seams.KILL_RANK: "1:3"})
    completed = by(out.results, "burnin_completed")
    assert completed["gpu1"].verdict == Verdict.FAIL
    assert completed["gpu1"].evidence["kind"] == "died"
    assert completed["gpu1"].evidence["last_step"] == 3
    assert by(out.results, "burnin_loss")["node"].verdict == Verdict.SKIP
    assert by(out.results, "soak_completed")["node"].verdict == Verdict.PASS  # a fresh gang
    assert time.monotonic() - started < 60


def test_hung_rank_ends_within_timeout_and_leaves_no_process() -> None:
    backend = devices.choose("cpu")
    # stale after 5 s without a step, not the 15 s a real GPU's slow step may need: the hung
    # rank is given up at the survivor's timeout and grace either way
    gang = Gang(2, backend, collective_timeout_s=5, env={seams.HANG_RANK: "0:2"}, stale_s=5)
    assert gang.start().ok
    pids = gang.pids
    started = time.monotonic()
    outcome = gang.run("burnin", tasks.burnin, 60, kwargs={
        "steps": 50, "min_steps": 1, "seconds": 60, "model": TINY_MODEL})
    # the survivor errors out of its all-reduce (gloo timeout; DDP may retry), well before the
    # 60 s phase deadline
    assert time.monotonic() - started < 45
    first = outcome.failures[0]
    assert (first.rank, first.kind, first.last_step) == (0, "hung", 2)
    assert not gang.healthy
    deadline = time.monotonic() + 5
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if alive(p)]


@pytest.mark.parametrize("seam", [seams.FAIL_RANK, seams.HANG_RANK])
def test_the_rank_at_fault_is_named_not_the_peers_waiting_on_it(seam: str) -> None:
    """Its peers wait in DDP's all-reduce and then time out (gloo) or are killed (NCCL's
    watchdog); whatever happens to them, the GPU named is the one that failed on its own."""
    out = levels.run(profile(3, collective_timeout_s=5), "acceptance", env={seam: "1:3"})
    completed = by(out.results, "burnin_completed")
    assert set(completed) == {"gpu1"}, {k: v.evidence for k, v in completed.items()}
    failed = completed["gpu1"]
    assert failed.verdict == Verdict.FAIL and failed.evidence["last_step"] == 3
    if seam == seams.FAIL_RANK:
        # raised at the step's sync, inside the collective block, but first
        assert (failed.evidence["kind"], failed.evidence["trigger"]) == ("error", True)
        assert "CUDA error: uncorrectable ECC error" in failed.evidence["message"]
    else:
        assert (failed.evidence["kind"], failed.evidence["in_collective"]) == ("hung", False)
    waiting = failed.evidence["consequences"]
    assert sorted(c["rank"] for c in waiting) == [0, 2]
    assert all(c["in_collective"] for c in waiting)
    assert "rank 1" in by(out.results, "burnin_loss")["node"].evidence["reason"]


def test_a_gpu_failing_while_the_others_work_alone_does_not_fail_them() -> None:
    """In the GEMM each GPU works alone after the start barrier: when one raises, the others
    carry on to the end of their run and are neither hung nor named."""
    with Gang(3, devices.choose("cpu"), collective_timeout_s=20,
              env={seams.FAIL_RANK: "1:1"}) as gang:
        assert gang.start().ok
        outcome = gang.run("gemm", tasks.gemm, 60, kwargs={
            "dtype": "bf16", "n": 64, "seconds": 5.0})
    assert [(f.rank, f.kind) for f in outcome.failures] == [(1, "error")]
    assert sorted(outcome.values) == [0, 2]  # they finished their 5 s
    assert all(v["iterations"] > 0 for v in outcome.values.values())


def test_a_gang_that_failed_is_killed_at_once_not_asked_politely() -> None:
    """A rank stuck in a collective never reads a polite stop: closing must not wait on it."""
    gang = Gang(2, devices.choose("cpu"), collective_timeout_s=60,
                env={seams.HANG_RANK: "0:1"})
    assert gang.start().ok
    # one step first (the seam waits for step 1): DDP and autograd are loaded and warm, so on
    # loaded cores rank 0 is at its hang well within the 6 s, not still building its model
    warm = gang.run("burnin", tasks.burnin, 120, kwargs={
        "steps": 1, "min_steps": 1, "seconds": 60, "model": TINY_MODEL})
    assert warm.ok, warm.failures
    pids = gang.pids
    started = time.monotonic()
    outcome = gang.run("burnin", tasks.burnin, 6, kwargs={
        "steps": 50, "min_steps": 1, "seconds": 60, "model": TINY_MODEL})
    # the 6 s deadline, then the kill: a polite stop would add 10 s per rank
    assert time.monotonic() - started < 10
    assert [(f.rank, f.kind, f.in_collective) for f in outcome.failures] == [
        (0, "hung", False), (1, "hung", True)]
    assert not gang.healthy and not [p for p in pids if alive(p)]


def test_host_copies_take_turns_one_gpu_at_a_time() -> None:
    """Two GPUs share a PCIe uplink on HGX boards: concurrent copies would halve each figure."""
    with Gang(3, devices.choose("cpu"), collective_timeout_s=20) as gang:
        assert gang.start().ok
        outcome = gang.run("memory", tasks.memory, 60, kwargs={
            "hbm_bytes": 1 << 20, "copy_bytes": 8 << 20, "iters": 3})
    assert outcome.ok
    windows = sorted(v["host_window"] for v in outcome.values.values())
    assert all(w[0] < w[1] for w in windows)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(windows))  # no two overlap


def test_the_judged_allreduce_size_is_timed_several_times_whatever_the_budget() -> None:
    with Gang(2, devices.choose("cpu"), collective_timeout_s=10) as gang:
        assert gang.start().ok
        outcome = gang.run("allreduce", tasks.allreduce, 30, kwargs={
            "max_bytes": 1 << 16, "steps": 3, "seconds_per_size": 1e-9})
    assert outcome.ok
    sweep = outcome.values[0]["sweep"]
    assert [row["iters"] for row in sweep] == [1, 1, tasks.JUDGED_ITERS]
