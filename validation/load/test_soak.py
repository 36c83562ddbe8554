"""Battery: load group. Thermal and power under load."""

import pytest

from nodegate.results import CheckResult
from nodegate.testing.asserts import assert_verdicts


@pytest.mark.check("soak_completed")
def test_soak_completed(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("thermal_peak")
def test_thermal_peak(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("mem_temp_peak")
def test_mem_temp_peak(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("thermal_events")
def test_thermal_events(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("power_under_load")
def test_power_under_load(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("clock_floor")
def test_clock_floor(results: list[CheckResult]) -> None:
    assert_verdicts(results)
