"""Battery: load group, standard level. HBM, host<->device, P2P, all-reduce."""

import pytest

from nodegate.battery.asserts import assert_verdict
from nodegate.results import CheckResult

pytestmark = [pytest.mark.load, pytest.mark.standard]


@pytest.mark.check("memory_completed")
def test_memory_completed(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("hbm_bandwidth")
def test_hbm_bandwidth(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("hbm_bandwidth_outlier")
def test_hbm_bandwidth_outlier(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("h2d_bandwidth")
def test_h2d_bandwidth(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("d2h_bandwidth")
def test_d2h_bandwidth(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("h2d_bandwidth_outlier")
def test_h2d_bandwidth_outlier(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("d2h_bandwidth_outlier")
def test_d2h_bandwidth_outlier(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("p2p_completed")
def test_p2p_completed(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("p2p_unidir")
def test_p2p_unidir(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("p2p_bidir")
def test_p2p_bidir(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("p2p_unidir_outlier")
def test_p2p_unidir_outlier(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("p2p_bidir_outlier")
def test_p2p_bidir_outlier(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("allreduce_completed")
def test_allreduce_completed(result: CheckResult) -> None:
    assert_verdict(result)


@pytest.mark.check("allreduce_busbw")
def test_allreduce_busbw(result: CheckResult) -> None:
    assert_verdict(result)
