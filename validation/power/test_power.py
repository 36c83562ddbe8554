"""Battery: power group. PSUs and inlet from the BMC; draw under load from BMC and PDUs."""

import pytest

from nodegate.battery.asserts import assert_verdict
from nodegate.results import CheckResult

pytestmark = [pytest.mark.power]


@pytest.mark.quick
@pytest.mark.check("psu_count")
def test_psu_count(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.quick
@pytest.mark.check("psu_redundancy")
def test_psu_redundancy(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.quick
@pytest.mark.check("inlet_temp")
def test_inlet_temp(result: CheckResult) -> None:
    assert_verdict(result)
