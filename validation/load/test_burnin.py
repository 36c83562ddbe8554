"""Battery: load group, acceptance level. DDP training steps."""

import pytest

from nodegate.battery.asserts import assert_verdict
from nodegate.results import CheckResult

pytestmark = [pytest.mark.load, pytest.mark.acceptance]


@pytest.mark.check("burnin_completed")
def test_burnin_completed(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("burnin_loss")
def test_burnin_loss(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("burnin_straggler")
def test_burnin_straggler(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("burnin_tokens_per_s")
def test_burnin_tokens_per_s(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("burnin_tflops")
def test_burnin_tflops(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("burnin_param_consistency")
def test_burnin_param_consistency(result: CheckResult) -> None:
    assert_verdict(result)
