"""Battery: load group. DDP training steps."""

import pytest

from nodegate.results import CheckResult
from nodegate.testing.asserts import assert_verdicts


@pytest.mark.check("burnin_completed")
def test_burnin_completed(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("burnin_loss")
def test_burnin_loss(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("burnin_straggler")
def test_burnin_straggler(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("burnin_tokens_per_s")
def test_burnin_tokens_per_s(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("burnin_tflops")
def test_burnin_tflops(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("burnin_param_consistency")
def test_burnin_param_consistency(results: list[CheckResult]) -> None:
    assert_verdicts(results)
