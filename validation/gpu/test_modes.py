"""Battery: gpu group. One line per check: the judge decides, the test asserts."""

import pytest

from nodegate.battery.asserts import assert_verdict
from nodegate.results import CheckResult

pytestmark = [pytest.mark.gpu, pytest.mark.quick]


@pytest.mark.check("persistence_mode")
def test_persistence_mode(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("mig_mode")
def test_mig_mode(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("compute_mode")
def test_compute_mode(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("ecc_mode")
def test_ecc_mode(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("power_limit")
def test_power_limit(result: CheckResult) -> None:
    assert_verdict(result)
