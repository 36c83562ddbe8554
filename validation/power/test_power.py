"""Battery: power group. PSUs and inlet from the BMC; draw under load from BMC and PDUs."""

import pytest

from nodegate.results import CheckResult
from nodegate.testing.asserts import assert_verdicts


@pytest.mark.check("psu_count")
def test_psu_count(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("psu_redundancy")
def test_psu_redundancy(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("inlet_temp")
def test_inlet_temp(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("bmc_power_sources")
def test_bmc_power_sources(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("psu_budget")
def test_psu_budget(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("circuit_load")
def test_circuit_load(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("bmc_gpu_power")
def test_bmc_gpu_power(results: list[CheckResult]) -> None:
    assert_verdicts(results)
