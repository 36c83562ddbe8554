"""Battery: gpu group. One line per check: the judge decides, the test asserts."""

import pytest

from nodegate.results import CheckResult
from nodegate.testing.asserts import assert_verdicts


@pytest.mark.check("fabric_state")
def test_fabric_state(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("nvlink_state")
def test_nvlink_state(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("nvlink_crc_errors")
def test_nvlink_crc_errors(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("nvlink_replay_errors")
def test_nvlink_replay_errors(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("nvlink_recovery_errors")
def test_nvlink_recovery_errors(results: list[CheckResult]) -> None:
    assert_verdicts(results)
