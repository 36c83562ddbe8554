"""Battery: gpu group. One line per check: the judge decides, the test asserts."""

import pytest

from nodegate.battery.asserts import assert_verdict
from nodegate.results import CheckResult

pytestmark = [pytest.mark.gpu, pytest.mark.quick]


@pytest.mark.check("pcie_link")
def test_pcie_link(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("pcie_replays")
def test_pcie_replays(result: CheckResult) -> None:
    assert_verdict(result)
