"""Battery: host group. One line per check: the judge decides, the test asserts."""

import pytest

from nodegate.battery.asserts import assert_verdict
from nodegate.results import CheckResult

pytestmark = [pytest.mark.host, pytest.mark.quick]


@pytest.mark.check("nouveau_absent")
def test_nouveau_absent(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("nvidia_module")
def test_nvidia_module(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("persistenced_service")
def test_persistenced_service(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("fabricmanager_service")
def test_fabricmanager_service(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("gpudirect_rdma")
def test_gpudirect_rdma(result: CheckResult) -> None:
    assert_verdict(result)
