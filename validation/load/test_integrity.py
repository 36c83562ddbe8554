"""Battery: load group. Did the copies and the all-reduce deliver the right bytes?"""

import pytest

from nodegate.results import CheckResult
from nodegate.testing.asserts import assert_verdicts


@pytest.mark.check("hbm_copy_verified")
def test_hbm_copy_verified(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("h2d_copy_verified")
def test_h2d_copy_verified(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("d2h_copy_verified")
def test_d2h_copy_verified(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("p2p_copy_verified")
def test_p2p_copy_verified(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("allreduce_verified")
def test_allreduce_verified(results: list[CheckResult]) -> None:
    assert_verdicts(results)
