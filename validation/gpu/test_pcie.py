"""Battery: gpu group. One line per check: the judge decides, the test asserts."""

import pytest

from nodegate.results import CheckResult
from nodegate.testing.asserts import assert_verdicts


@pytest.mark.check("pcie_link")
def test_pcie_link(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("pcie_replays")
def test_pcie_replays(results: list[CheckResult]) -> None:
    assert_verdicts(results)
