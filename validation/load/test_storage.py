"""Battery: load group. The NVMe array under fio, and DCGM's diagnostic where installed."""

import pytest

from nodegate.results import CheckResult
from nodegate.testing.asserts import assert_verdicts


@pytest.mark.check("nvme_seq_read")
def test_nvme_seq_read(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("nvme_seq_write")
def test_nvme_seq_write(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("nvme_rand_read")
def test_nvme_rand_read(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("dcgm_diag")
def test_dcgm_diag(results: list[CheckResult]) -> None:
    assert_verdicts(results)
