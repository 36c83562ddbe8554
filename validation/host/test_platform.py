"""Battery: host group. One line per check: the judge decides, the test asserts."""

import pytest

from nodegate.battery.asserts import assert_verdict
from nodegate.results import CheckResult

pytestmark = [pytest.mark.host, pytest.mark.quick]


@pytest.mark.check("iommu_mode")
def test_iommu_mode(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("pcie_acs")
def test_pcie_acs(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("nccl_conf")
def test_nccl_conf(result: CheckResult) -> None:
    assert_verdict(result)
