"""Battery: load group. PCIe link generation under load (an idle link trains down)."""

import pytest

from nodegate.results import CheckResult
from nodegate.testing.asserts import assert_verdicts


@pytest.mark.check("pcie_gen_under_load")
def test_pcie_gen_under_load(results: list[CheckResult]) -> None:
    assert_verdicts(results)
