"""Battery: host group. One line per check: the judge decides, the test asserts."""

import pytest

from nodegate.battery.asserts import assert_verdicts
from nodegate.results import CheckResult


@pytest.mark.check("nvme_array")
def test_nvme_array(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("nvme_mount")
def test_nvme_mount(results: list[CheckResult]) -> None:
    assert_verdicts(results)
