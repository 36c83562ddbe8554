"""Battery: gpu group. One line per check: the judge decides, the test asserts."""

import pytest

from nodegate.results import CheckResult
from nodegate.testing.asserts import assert_verdicts


@pytest.mark.check("clock_events")
def test_clock_events(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("idle_temperature")
def test_idle_temperature(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("foreign_processes")
def test_foreign_processes(results: list[CheckResult]) -> None:
    assert_verdicts(results)
