"""Battery: load group. GEMM throughput and silent data corruption."""

import pytest

from nodegate.results import CheckResult
from nodegate.testing.asserts import assert_verdicts


@pytest.mark.check("gemm_completed")
def test_gemm_completed(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("gemm_tflops")
def test_gemm_tflops(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("gemm_consistency")
def test_gemm_consistency(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("gemm_tflops_outlier")
def test_gemm_tflops_outlier(results: list[CheckResult]) -> None:
    assert_verdicts(results)
