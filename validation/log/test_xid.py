"""Battery: log group. One line per check: the judge decides, the test asserts."""

import pytest

from nodegate.results import CheckResult
from nodegate.testing.asserts import assert_verdicts


@pytest.mark.check("xid_events")
def test_xid_events(results: list[CheckResult]) -> None:
    assert_verdicts(results)
