"""Battery: load group, standard level. GEMM throughput and silent data corruption."""

import pytest

from nodegate.battery.asserts import assert_verdict
from nodegate.results import CheckResult

pytestmark = [pytest.mark.load, pytest.mark.standard]


@pytest.mark.check("gemm_completed")
def test_gemm_completed(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("gemm_tflops")
def test_gemm_tflops(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("gemm_consistency")
def test_gemm_consistency(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("gemm_tflops_outlier")
def test_gemm_tflops_outlier(result: CheckResult) -> None:
    assert_verdict(result)
