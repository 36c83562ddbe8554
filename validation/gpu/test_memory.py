"""Battery: gpu group. One line per check: the judge decides, the test asserts."""

import pytest

from nodegate.results import CheckResult
from nodegate.testing.asserts import assert_verdicts


@pytest.mark.check("ecc_dbe_volatile")
def test_ecc_dbe_volatile(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("ecc_dbe_aggregate")
def test_ecc_dbe_aggregate(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("ecc_sbe_volatile")
def test_ecc_sbe_volatile(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("ecc_sbe_aggregate")
def test_ecc_sbe_aggregate(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("remap_pending")
def test_remap_pending(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("remap_failure")
def test_remap_failure(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("remap_uncorrectable")
def test_remap_uncorrectable(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("retired_pages")
def test_retired_pages(results: list[CheckResult]) -> None:
    assert_verdicts(results)
