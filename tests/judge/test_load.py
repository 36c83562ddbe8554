"""The load stack, judge side: pure functions, no torch, hand-checkable figures."""

from __future__ import annotations

import pytest

from nodegate.judge import load as verdicts
from nodegate.load import config, formulas
from nodegate.load.telemetry import GpuStatic, Telemetry
from nodegate.load.workers import PhaseOutcome, RankFailure
from nodegate.results import Verdict

TH = verdicts.thresholds_of({"thresholds": {
    "gemm_bf16_tflops_min": {"min": 1.0, "unit": "TFLOPS", "source": "policy: test"},
    "outlier_margin_pct_max": {"max": 5, "unit": "%", "source": "policy: test"},
    "straggler_margin_pct_max": {"max": 10, "unit": "%", "source": "policy: test"},
    "allreduce_busbw_gbps_min": {"min": 100, "unit": "GB/s", "source": "policy: test"},
    "thermal_margin_c_min": {"min": 5, "unit": "C", "source": "policy: test"},
    "power_fraction_min": {"min": 0.85, "unit": "ratio", "source": "policy: test"},
    "clock_floor_mhz_min": {"min": 1400, "unit": "MHz", "source": "policy: test"},
}})


def by(results: list, check: str) -> dict:
    return {r.entity: r for r in results if r.check == check}


@pytest.mark.parametrize(("n", "factor"), [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75)])
def test_busbw_factor_is_nccl_tests_definition(n: int, factor: float) -> None:
    assert formulas.busbw_factor(n) == pytest.approx(factor)


def test_busbw_hand_computed() -> None:
    # 16 GiB in 0.1 s on 8 ranks: algbw = 171.798691840 GB/s, busbw = x 14/8
    alg, bus = formulas.allreduce_bandwidth(16 * 2**30, 0.1, 8)
    assert alg == pytest.approx(171.79869184)
    assert bus == pytest.approx(300.64771072)
    value = {"world": 8, "sweep": [{"bytes": 16 * 2**30, "seconds": 0.1, "iters": 1,
                                    "algbw_gbps": alg, "busbw_gbps": bus}]}
    (result,) = verdicts.allreduce(value, TH)
    assert result.verdict == Verdict.PASS and result.unit == "GB/s"
    assert result.measured == pytest.approx(300.6477, abs=1e-4)


def gemm_values(tflops: list[float], digests: list[str]) -> dict[int, dict]:
    return {r: {"dtype": "bf16", "n": 64, "iterations": 10, "seconds": 1.0, "tflops": t,
                "digest": d * 8, "self_mismatches": 0}
            for r, (t, d) in enumerate(zip(tflops, digests, strict=True))}


def test_gemm_corruption_names_the_odd_gpu_and_outlier_warns() -> None:
    results = verdicts.gemm(gemm_values([10, 10, 10, 9.0], ["aa", "aa", "bb", "aa"]), TH)
    consistency = by(results, "gemm_consistency")
    assert [e for e, r in consistency.items() if r.verdict == Verdict.FAIL] == ["gpu2"]
    assert consistency["gpu2"].severity.value == "hardware"
    outlier = by(results, "gemm_tflops_outlier")
    assert outlier["gpu3"].verdict == Verdict.WARN and outlier["gpu3"].measured == 10.0
    assert by(results, "gemm_tflops")["gpu3"].verdict == Verdict.PASS  # above the floor


def test_missing_threshold_skips_with_reason() -> None:
    results = verdicts.gemm(gemm_values([10, 10], ["aa", "aa"]), {})
    tflops = by(results, "gemm_tflops")["gpu0"]
    assert tflops.verdict == Verdict.SKIP and "threshold" in tflops.evidence["reason"]


def test_dead_rank_fails_phase_naming_rank_and_step() -> None:
    outcome = PhaseOutcome("burnin", failures=[
        RankFailure(1, "died", 2, "rank 1 exited", exitcode=-9),
        RankFailure(0, "error", 2, "gloo: connection reset", in_collective=True)])
    (result,) = verdicts.phase_completed(outcome, 2)
    assert (result.entity, result.verdict, result.evidence["last_step"]) == ("gpu1",
                                                                             Verdict.FAIL, 2)
    assert result.evidence["consequences"][0]["rank"] == 0


@pytest.mark.parametrize(("failures", "named"), [
    # a rank that stopped outside a collective; its peers time out waiting for it
    ([RankFailure(0, "error", 4, "Timed out waiting 5000ms", in_collective=True, trigger=True),
      RankFailure(1, "hung", 4, "", in_collective=False)], ["gpu1"]),
    # a CUDA error on gpu2, raised at the sync inside its training step (so inside the
    # collective block) and seen first; its peers then hang or NCCL's watchdog kills them
    ([RankFailure(2, "error", 4, "CUDA error: uncorrectable ECC error encountered",
                  in_collective=True, trigger=True),
      RankFailure(0, "hung", 4, "", in_collective=True),
      RankFailure(1, "died", 4, "", exitcode=-6, in_collective=True)], ["gpu2"]),
    # the first thing seen was a watchdog abort: every rank was waiting, none is singled out
    ([RankFailure(0, "died", 4, "", exitcode=-6, in_collective=True, trigger=True),
      RankFailure(1, "hung", 4, "", in_collective=True)], ["gpu0", "gpu1"]),
    ([RankFailure(0, "hung", 4, "", in_collective=True),
      RankFailure(1, "hung", 4, "", in_collective=True)], ["gpu0", "gpu1"]),
])
def test_the_rank_that_failed_outside_a_collective_is_the_cause(
        failures: list[RankFailure], named: list[str]) -> None:
    results = verdicts.phase_completed(PhaseOutcome("allreduce", failures=failures), 3)
    assert [r.entity for r in results] == named
    assert all(r.verdict == Verdict.FAIL for r in results)


def burnin_values(forward: list[float]) -> dict[int, dict]:
    return {r: {"steps": 10, "losses": [5.0 - 0.3 * i for i in range(10)],
                "step_s": [0.2] * 10, "forward_s": [f] * 10, "tokens_per_step": 128,
                "n_params": 1000, "flops_per_step": 6.0 * 1000 * 128, "param_digest": "p" * 64,
                "precision": "fp32"} for r, f in enumerate(forward)}


def test_straggler_is_the_rank_above_the_median() -> None:
    results = verdicts.burnin(burnin_values([0.1, 0.1, 0.13, 0.1]), TH)
    straggler = by(results, "burnin_straggler")
    assert [e for e, r in straggler.items() if r.verdict == Verdict.FAIL] == ["gpu2"]
    assert straggler["gpu2"].measured == pytest.approx(30.0)
    assert by(results, "burnin_loss")["node"].verdict == Verdict.PASS
    assert by(results, "burnin_tokens_per_s")["node"].verdict == Verdict.SKIP


def test_flat_loss_fails() -> None:
    values = burnin_values([0.1, 0.1])
    for v in values.values():
        v["losses"] = [5.0] * 10
    assert by(verdicts.burnin(values, TH), "burnin_loss")["node"].verdict == Verdict.FAIL


def test_telemetry_judge_hot_gpu_fails_and_unavailable_errors() -> None:
    tel = Telemetry(available=True, hz=2, windows=[("gemm", 0.0, 10.0)])
    for gpu, peak, reasons in (("gpu0", 70.0, 0), ("gpu1", 90.0, 0x40)):
        tel.static[gpu] = GpuStatic(slowdown_c=87, power_limit_w=700, sm_max_mhz=1980)
        tel.series[gpu] = {"temp_c": [[1, 40.0], [9, peak]], "power_w": [[1, 690.0]],
                           "sm_clock_mhz": [[1, 1980.0], [2, 1980.0]],
                           "clock_event_reasons": [[1, float(reasons)]], "mem_temp_c": []}
    results = verdicts.telemetry(tel, TH, ["gpu0", "gpu1"])
    assert by(results, "thermal_peak")["gpu0"].verdict == Verdict.PASS
    assert by(results, "thermal_peak")["gpu1"].verdict == Verdict.FAIL
    assert by(results, "thermal_events")["gpu1"].measured == ["hw_thermal_slowdown"]
    assert by(results, "power_under_load")["gpu0"].measured == pytest.approx(690 / 700, 1e-3)
    assert by(results, "clock_floor")["gpu0"].verdict == Verdict.PASS
    off = verdicts.telemetry(Telemetry(available=False, reason="NVML unavailable: x"), TH,
                             ["gpu0"])
    assert {r.verdict for r in off} == {Verdict.ERROR}  # unmeasured is not SKIP
    assert {r.check for r in off} == set(verdicts.TELEMETRY_CHECKS)
    assert off[0].evidence["reason"] == "telemetry unavailable: NVML unavailable: x"
    tel.series["gpu2"] = {}
    tel.static.pop("gpu2", None)
    silent = verdicts.telemetry(tel, TH, ["gpu2"])
    assert {r.verdict for r in silent} == {Verdict.ERROR}


def test_config_scales_with_floors() -> None:
    cfg = config.from_profile({"load": {"gemm_seconds": 30, "soak_seconds": 300,
                                        "burnin_steps": 400}}, "acceptance", 0.02)
    assert cfg.gemm_seconds == pytest.approx(0.6)
    assert cfg.soak_seconds == pytest.approx(6.0)
    assert cfg.burnin_steps == 8
    with pytest.raises(Exception, match=r"load\.dtypes"):
        config.from_profile({"load": {"dtypes": ["int3"]}}, "standard")
