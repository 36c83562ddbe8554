"""Battery: gpu group. One line per check: the judge decides, the test asserts."""

import pytest

from nodegate.battery.asserts import assert_verdict
from nodegate.results import CheckResult

pytestmark = [pytest.mark.gpu, pytest.mark.quick]


@pytest.mark.check("ecc_dbe_volatile")
def test_ecc_dbe_volatile(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("ecc_dbe_aggregate")
def test_ecc_dbe_aggregate(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("ecc_sbe_volatile")
def test_ecc_sbe_volatile(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("ecc_sbe_aggregate")
def test_ecc_sbe_aggregate(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("remap_pending")
def test_remap_pending(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("remap_failure")
def test_remap_failure(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("remap_uncorrectable")
def test_remap_uncorrectable(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("retired_pages")
def test_retired_pages(result: CheckResult) -> None:
    assert_verdict(result)
