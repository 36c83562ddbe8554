"""Battery: host group. One line per check: the judge decides, the test asserts."""

import pytest

from nodegate.results import CheckResult
from nodegate.testing.asserts import assert_verdicts


@pytest.mark.check("nouveau_absent")
def test_nouveau_absent(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("nvidia_module")
def test_nvidia_module(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("persistenced_service")
def test_persistenced_service(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("fabricmanager_service")
def test_fabricmanager_service(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("gpudirect_rdma")
def test_gpudirect_rdma(results: list[CheckResult]) -> None:
    assert_verdicts(results)
