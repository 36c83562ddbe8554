"""Battery: gpu group. One line per check: the judge decides, the test asserts."""

import pytest

from nodegate.battery.asserts import assert_verdict
from nodegate.results import CheckResult

pytestmark = [pytest.mark.gpu, pytest.mark.quick]


@pytest.mark.check("gpu_count")
def test_gpu_count(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("gpu_reachable")
def test_gpu_reachable(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("gpu_model")
def test_gpu_model(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("gpu_pci_device_id")
def test_gpu_pci_device_id(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("driver_version")
def test_driver_version(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("vbios_uniform")
def test_vbios_uniform(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("inforom_uniform")
def test_inforom_uniform(result: CheckResult) -> None:
    assert_verdict(result)
