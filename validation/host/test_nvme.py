"""Battery: host group. One line per check: the judge decides, the test asserts."""

import pytest

from nodegate.results import CheckResult
from nodegate.testing.asserts import assert_verdicts


@pytest.mark.check("nvme_array")
def test_nvme_array(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("nvme_mount")
def test_nvme_mount(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("nvme_critical_warning")
def test_nvme_critical_warning(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("nvme_spare")
def test_nvme_spare(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("nvme_media_errors")
def test_nvme_media_errors(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("nvme_wear")
def test_nvme_wear(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("nvme_temperature")
def test_nvme_temperature(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("nvme_unsafe_shutdowns")
def test_nvme_unsafe_shutdowns(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("nvme_firmware")
def test_nvme_firmware(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("nvme_namespace_size")
def test_nvme_namespace_size(results: list[CheckResult]) -> None:
    assert_verdicts(results)
