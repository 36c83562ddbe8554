"""Battery: load group, acceptance level. Thermal and power under load."""

import pytest

from nodegate.battery.asserts import assert_verdict
from nodegate.results import CheckResult

pytestmark = [pytest.mark.load, pytest.mark.acceptance]


@pytest.mark.check("soak_completed")
def test_soak_completed(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("thermal_peak")
def test_thermal_peak(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("mem_temp_peak")
def test_mem_temp_peak(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("thermal_events")
def test_thermal_events(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("power_under_load")
def test_power_under_load(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("clock_floor")
def test_clock_floor(result: CheckResult) -> None:
    assert_verdict(result)
