"""Battery: host group. One line per check: the judge decides, the test asserts."""

import pytest

from nodegate.results import CheckResult
from nodegate.testing.asserts import assert_verdicts


@pytest.mark.check("iommu_mode")
def test_iommu_mode(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("pcie_acs")
def test_pcie_acs(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("nccl_conf")
def test_nccl_conf(results: list[CheckResult]) -> None:
    assert_verdicts(results)
