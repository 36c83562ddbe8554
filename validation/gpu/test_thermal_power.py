"""Battery: gpu group. One line per check: the judge decides, the test asserts."""

import pytest

from nodegate.battery.asserts import assert_verdict
from nodegate.results import CheckResult

pytestmark = [pytest.mark.gpu, pytest.mark.quick]


@pytest.mark.check("clock_events")
def test_clock_events(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("idle_temperature")
def test_idle_temperature(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("foreign_processes")
def test_foreign_processes(result: CheckResult) -> None:
    assert_verdict(result)
