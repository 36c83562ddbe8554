"""Battery: load group. GEMM in the further dtypes: speed and bit compare."""

import pytest

from nodegate.results import CheckResult
from nodegate.testing.asserts import assert_verdicts


@pytest.mark.check("gemm_bf16_completed")
def test_gemm_bf16_completed(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("gemm_fp16_completed")
def test_gemm_fp16_completed(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("gemm_tflops_fp16")
def test_gemm_tflops_fp16(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("gemm_consistency_fp16")
def test_gemm_consistency_fp16(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("gemm_tflops_fp16_outlier")
def test_gemm_tflops_fp16_outlier(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("gemm_tf32_completed")
def test_gemm_tf32_completed(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("gemm_tflops_tf32")
def test_gemm_tflops_tf32(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("gemm_consistency_tf32")
def test_gemm_consistency_tf32(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("gemm_tflops_tf32_outlier")
def test_gemm_tflops_tf32_outlier(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("gemm_fp8_completed")
def test_gemm_fp8_completed(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("gemm_tflops_fp8")
def test_gemm_tflops_fp8(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("gemm_consistency_fp8")
def test_gemm_consistency_fp8(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("gemm_tflops_fp8_outlier")
def test_gemm_tflops_fp8_outlier(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("gemm_fp64_completed")
def test_gemm_fp64_completed(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("gemm_tflops_fp64")
def test_gemm_tflops_fp64(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("gemm_consistency_fp64")
def test_gemm_consistency_fp64(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("gemm_tflops_fp64_outlier")
def test_gemm_tflops_fp64_outlier(results: list[CheckResult]) -> None:
    assert_verdicts(results)
