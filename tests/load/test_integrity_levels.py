"""The acceptance level's integrity phases end to end on CPU/gloo worker processes: the
acceptance level emits every new result with a value, and the HBM and copy seams FAIL their own
check on their own entity."""

from __future__ import annotations

import tempfile
from typing import Any

import pytest

pytest.importorskip("torch")

from nodegate.battery import load_levels as levels
from nodegate.judge.load_integrity import CHECKS
from nodegate.load import seams
from nodegate.results import Verdict

pytestmark = [pytest.mark.torch, pytest.mark.slow]

TINY_MODEL = {"vocab": 64, "d_model": 32, "layers": 1, "heads": 2, "seq_len": 16, "batch": 4,
              "lr": 3e-3}


def _floor(value: float, unit: str) -> dict[str, Any]:
    return {"min": value, "unit": unit, "source": "policy: test"}


def profile() -> dict[str, Any]:
    load = {"dtypes": ["bf16"], "acceptance_dtypes": ["fp16", "tf32", "fp8", "fp4"],
            "gemm_size": 48, "gemm_seconds": 0.2, "dtype_gemm_seconds": 0.2,
            "hbm_bytes": 1 << 18, "copy_bytes": 1 << 16, "p2p_bytes": 1 << 16,
            "allreduce_max_bytes": 1 << 16, "allreduce_steps": 2, "burnin_steps": 8,
            "burnin_seconds": 0.3, "soak_seconds": 0.2, "soak_min_seconds": 0.2,
            "min_phase_seconds": 0.2, "sample_hz": 2, "collective_timeout_s": 20,
            "copy_iters": 1, "burnin_model": TINY_MODEL, "hbm_test_seconds": 0.2,
            "fsdp_seconds": 0.3, "fsdp_checkpoint_dir": tempfile.gettempdir(),
            "hbm_test_cpu_bytes": 1 << 16, "hbm_test_chunk_bytes": 1 << 14}
    tiny = {f"gemm_{d}_tflops_min": _floor(1e-9, "TFLOPS") for d in ("bf16", "fp16", "tf32",
                                                                      "fp8", "fp4")}
    return {"gpu": {"count": 2}, "load": load, "thresholds": {
        **tiny, "hbm_pattern_gbps_min": _floor(1e-6, "GB/s")}}


def test_acceptance_emits_every_new_result_and_each_seam_fails_its_check_and_entity() -> None:
    out = levels.run(profile(), "acceptance",
                     env={seams.HBM_FAULT: "1:2", seams.CORRUPT_COPY:
                          "p2p:0-1,hbm:1,h2d:0,d2h:1,allreduce:1"})
    got: dict[str, dict[str, Any]] = {}
    for r in out.results:
        got.setdefault(r.check, {})[r.entity] = r
    assert set(CHECKS) <= set(got), sorted(set(CHECKS) - set(got))
    not_run = {c for c in CHECKS if "fp64" in c} | {"gemm_bf16_completed"}
    for check in not_run:  # the profile lists no fp64, and bf16 runs first as "gemm"
        assert got[check]["node"].verdict == Verdict.SKIP
        assert got[check]["node"].evidence["reason"], check
    for check in ("gemm_tflops_fp4", "gemm_consistency_fp4"):  # listed, but no CPU kernel
        assert got[check]["node"].verdict == Verdict.SKIP, check
        assert "no fp4 GEMM kernel for cpu" in got[check]["node"].evidence["reason"], check
    assert {r.verdict for r in got["gemm_fp4_completed"].values()} == {Verdict.PASS}
    not_run |= {c for c in CHECKS if "fp4" in c and not c.endswith("_completed")}
    expected = set(CHECKS) - not_run
    for check in expected - {c for c in expected if c.endswith(("_completed", "_outlier"))}:
        for entity, r in got[check].items():
            assert r.measured is not None, (check, entity)
    pattern = got["hbm_patterns"]
    assert pattern["gpu1"].verdict == Verdict.FAIL and pattern["gpu1"].measured >= 8
    assert pattern["gpu0"].verdict == Verdict.PASS
    p2p = got["p2p_copy_verified"]
    assert p2p["gpu0-gpu1"].verdict == Verdict.FAIL and p2p["gpu1-gpu0"].verdict == Verdict.PASS
    for check, bad in (("hbm_copy_verified", "gpu1"), ("h2d_copy_verified", "gpu0"),
                       ("d2h_copy_verified", "gpu1"), ("allreduce_verified", "gpu1")):
        verdicts = {e: r.verdict for e, r in got[check].items()}
        assert verdicts == {e: Verdict.FAIL if e == bad else Verdict.PASS
                            for e in ("gpu0", "gpu1")}, check
    assert {r.verdict for r in got["gemm_consistency_fp8"].values()} == {Verdict.PASS}
    assert out.seams[seams.HBM_FAULT] == "1:2"
