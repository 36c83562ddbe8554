"""Battery: gpu group. One line per check: the judge decides, the test asserts."""

import pytest

from nodegate.results import CheckResult
from nodegate.testing.asserts import assert_verdicts


@pytest.mark.check("gpu_count")
def test_gpu_count(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("gpu_reachable")
def test_gpu_reachable(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("gpu_model")
def test_gpu_model(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("gpu_pci_device_id")
def test_gpu_pci_device_id(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("gpu_memory")
def test_gpu_memory(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("driver_version")
def test_driver_version(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("vbios_uniform")
def test_vbios_uniform(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("inforom_uniform")
def test_inforom_uniform(results: list[CheckResult]) -> None:
    assert_verdicts(results)
