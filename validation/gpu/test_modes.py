"""Battery: gpu group. One line per check: the judge decides, the test asserts."""

import pytest

from nodegate.results import CheckResult
from nodegate.testing.asserts import assert_verdicts


@pytest.mark.check("persistence_mode")
def test_persistence_mode(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("mig_mode")
def test_mig_mode(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("compute_mode")
def test_compute_mode(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("ecc_mode")
def test_ecc_mode(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("power_limit")
def test_power_limit(results: list[CheckResult]) -> None:
    assert_verdicts(results)
