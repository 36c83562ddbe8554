"""Battery: log group. One line per check: the judge decides, the test asserts."""

import pytest

from nodegate.battery.asserts import assert_verdict
from nodegate.results import CheckResult

pytestmark = [pytest.mark.log, pytest.mark.quick]


@pytest.mark.check("xid_events")
def test_xid_events(result: CheckResult) -> None:
    assert_verdict(result)
