"""Battery: gpu group. One line per check: the judge decides, the test asserts."""

import pytest

from nodegate.battery.asserts import assert_verdict
from nodegate.results import CheckResult

pytestmark = [pytest.mark.gpu, pytest.mark.quick]


@pytest.mark.check("fabric_state")
def test_fabric_state(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("nvlink_state")
def test_nvlink_state(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("nvlink_crc_errors")
def test_nvlink_crc_errors(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("nvlink_replay_errors")
def test_nvlink_replay_errors(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("nvlink_recovery_errors")
def test_nvlink_recovery_errors(result: CheckResult) -> None:
    assert_verdict(result)
