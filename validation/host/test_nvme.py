"""Battery: host group. One line per check: the judge decides, the test asserts."""

import pytest

from nodegate.battery.asserts import assert_verdict
from nodegate.results import CheckResult

pytestmark = [pytest.mark.host, pytest.mark.quick]


@pytest.mark.check("nvme_array")
def test_nvme_array(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("nvme_mount")
def test_nvme_mount(result: CheckResult) -> None:
    assert_verdict(result)
