"""Battery: load group. The whole-HBM pattern test (acceptance)."""

import pytest

from nodegate.results import CheckResult
from nodegate.testing.asserts import assert_verdicts


@pytest.mark.check("hbm_patterns_completed")
def test_hbm_patterns_completed(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("hbm_patterns")
def test_hbm_patterns(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("hbm_patterns_gbps")
def test_hbm_patterns_gbps(results: list[CheckResult]) -> None:
    assert_verdicts(results)
