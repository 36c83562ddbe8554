"""Judging the acceptance level's integrity results: bad HBM words, corrupted copies, a wrong
all-reduce sum and a GEMM dtype the device lacks, each on the right check and entity."""

from __future__ import annotations

from typing import Any

from nodegate.battery.registry import CHECKS as REGISTRY
from nodegate.judge import load as verdicts
from nodegate.judge import load_integrity as integrity
from nodegate.results import Verdict

TH = verdicts.thresholds_of({"thresholds": {
    "hbm_pattern_gbps_min": {"min": 100, "unit": "GB/s", "source": "policy: test"}}})


def by(results: list[Any], check: str) -> dict[str, Any]:
    return {r.entity: r for r in results if r.check == check}


def ok(sum_: str = "00000000000000aa") -> dict[str, Any]:
    return {"src_checksum": sum_, "dst_checksum": sum_, "ok": True, "bytes": 4096}


BAD = {"src_checksum": "00000000000000aa", "dst_checksum": "00000000000001a9", "ok": False,
       "bytes": 4096}


def hbm_value(errors: int = 0, gbps: float = 250.0) -> dict[str, Any]:
    first = [{"offset": 4096, "address": "0x7f0000002000", "expected": "0x1", "read": "0x21",
              "bits": "0x0000000000000020", "pattern": "walking_ones", "round": 0}]
    return {"errors": errors, "first_bad": first if errors else [], "bytes_tested": 72 << 30,
            "free_bytes": 80 << 30, "fraction": 0.9, "rounds": 3, "passes": 12,
            "patterns": {}, "gbps": gbps, "seconds": 40.0, "counted": "bytes written + "
            "bytes verified", "cuda": True}


def test_every_new_check_is_registered() -> None:
    assert set(integrity.CHECKS) <= set(REGISTRY)


def test_bad_hbm_words_fail_that_gpu_naming_count_and_first_address() -> None:
    out = integrity.hbm_patterns({0: hbm_value(), 1: hbm_value(errors=3)}, TH)
    pat = by(out, "hbm_patterns")
    assert pat["gpu0"].verdict == Verdict.PASS and pat["gpu0"].measured == 0
    assert pat["gpu1"].verdict == Verdict.FAIL and pat["gpu1"].measured == 3
    assert "0x7f0000002000" in pat["gpu1"].evidence["reason"]
    assert pat["gpu1"].evidence["first_bad"][0]["bits"] == "0x0000000000000020"
    rate = by(out, "hbm_patterns_gbps")
    assert rate["gpu0"].verdict == Verdict.PASS and rate["gpu0"].measured == 250.0
    slow = by(integrity.hbm_patterns({0: hbm_value(gbps=20)}, TH), "hbm_patterns_gbps")
    assert slow["gpu0"].verdict == Verdict.FAIL


def memory_value(**bad: dict[str, Any]) -> dict[str, Any]:
    return {"hbm_verify": bad.get("hbm", ok()),
            "host": {"local": {"h2d_verify": bad.get("h2d", ok()), "d2h_verify": ok()},
                     "remote": {"h2d_verify": ok(), "d2h_verify": bad.get("d2h_remote", ok())}}}


def test_a_corrupted_copy_fails_its_own_check_on_its_own_gpu() -> None:
    out = integrity.memory_copies({0: memory_value(), 1: memory_value(h2d=BAD),
                                   2: memory_value(hbm=BAD), 3: memory_value(d2h_remote=BAD)})
    failed = sorted((r.check, r.entity) for r in out if r.verdict == Verdict.FAIL)
    assert failed == [("d2h_copy_verified", "gpu3"), ("h2d_copy_verified", "gpu1"),
                      ("hbm_copy_verified", "gpu2")]
    d2h = by(out, "d2h_copy_verified")["gpu3"]
    assert d2h.evidence["failed_placements"] == ["remote"]
    assert d2h.measured == BAD["dst_checksum"] and d2h.threshold == BAD["src_checksum"]
    assert all(r.verdict == Verdict.PASS for r in out if r.entity == "gpu0")


def test_an_unchecked_copy_is_an_error_never_a_pass() -> None:
    value = memory_value()
    del value["hbm_verify"]
    value["host"]["local"]["h2d_verify"] = None
    out = integrity.memory_copies({0: value})
    assert by(out, "hbm_copy_verified")["gpu0"].verdict == Verdict.ERROR
    assert by(out, "h2d_copy_verified")["gpu0"].verdict == Verdict.ERROR


def test_p2p_copies_are_judged_per_ordered_pair() -> None:
    verify = {f"{s}-{d}": ok() for s in range(3) for d in range(3) if s != d}
    verify["2-0"] = BAD
    out = integrity.p2p_copies({"verify": verify}, 3)
    assert len(out) == 6
    assert [r.entity for r in out if r.verdict == Verdict.FAIL] == ["gpu2-gpu0"]
    assert by(integrity.p2p_copies({"verify": {}}, 2), "p2p_copy_verified")[
        "gpu0-gpu1"].verdict == Verdict.ERROR


def test_a_wrong_allreduce_sum_fails_the_rank_that_received_it() -> None:
    good = {"world": 2, "sweep": [{"bytes": 4096, "wrong": 0, "first_wrong": None},
                                  {"bytes": 16384, "wrong": 0, "first_wrong": None}]}
    bad = {"world": 2, "sweep": [{"bytes": 4096, "wrong": 0, "first_wrong": None},
                                 {"bytes": 16384, "wrong": 2, "first_wrong": 17}]}
    out = by(integrity.allreduce_results({0: good, 1: bad}), "allreduce_verified")
    assert out["gpu0"].verdict == Verdict.PASS
    assert out["gpu1"].verdict == Verdict.FAIL and out["gpu1"].measured == 2
    assert "index 17 of the 16384-byte run" in out["gpu1"].evidence["reason"]
    old = {"world": 2, "sweep": [{"bytes": 4096}]}  # a worker that did not check
    assert by(integrity.allreduce_results({0: old}), "allreduce_verified")[
        "gpu0"].verdict == Verdict.ERROR


def test_dtype_checks_carry_their_suffix_and_an_unsupported_dtype_says_why() -> None:
    assert integrity.gemm_checks("bf16") == ["gemm_tflops", "gemm_consistency"]
    assert integrity.gemm_checks("fp8") == ["gemm_tflops_fp8", "gemm_consistency_fp8"]
    why = "fp8 GEMM needs compute capability 8.9 or later; this GPU is 8.0"
    assert integrity.gemm_unsupported({0: {"dtype": "fp8", "unsupported": why}}) == why
    assert integrity.gemm_unsupported({0: {"dtype": "fp8", "tflops": 1.0}}) is None
    values = {r: {"dtype": "fp8", "n": 64, "iterations": 9, "seconds": 1.0, "tflops": 1200.0,
                  "digest": "ab" * 32, "self_mismatches": 0} for r in range(3)}
    values[2]["digest"] = "cd" * 32
    th = verdicts.thresholds_of({"thresholds": {
        "gemm_fp8_tflops_min": {"min": 990, "unit": "TFLOPS", "source": "policy: test"}}})
    out = verdicts.gemm(values, th)
    assert {r.check for r in out} == {"gemm_tflops_fp8", "gemm_consistency_fp8",
                                      "gemm_tflops_fp8_outlier"}
    assert by(out, "gemm_consistency_fp8")["gpu2"].verdict == Verdict.FAIL
    assert by(out, "gemm_tflops_fp8")["gpu0"].verdict == Verdict.PASS


def test_dtypes_a_level_did_not_run_skip_with_the_profiles_reason() -> None:
    out = {r.check: r for r in integrity.gemm_not_run(["bf16", "fp8"], "acceptance")}
    assert all(r.verdict == Verdict.SKIP and r.entity == "node" for r in out.values())
    assert "gemm_tflops_fp8" not in out and "gemm_tflops" not in out  # those ran
    assert {"gemm_tflops_fp64", "gemm_consistency_tf32", "gemm_fp16_completed"} <= set(out)
    assert out["gemm_tflops_fp64"].evidence["reason"] == (
        "not a dtype of the profile's load.dtypes and load.acceptance_dtypes at the "
        "acceptance level: bf16, fp8")
    assert "gemm_completed" in out["gemm_bf16_completed"].evidence["reason"]
    # bf16 second: its phase is gemm_bf16, fp16's is gemm
    second = {r.check for r in integrity.gemm_not_run(["fp16", "bf16"], "standard")}
    assert "gemm_bf16_completed" not in second and "gemm_fp16_completed" in second
    assert set(REGISTRY) >= integrity.GEMM_PHASE_CHECKS
