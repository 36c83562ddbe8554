"""Battery: load group. HBM, host<->device, P2P, all-reduce and the other collectives."""

import pytest

from nodegate.results import CheckResult
from nodegate.testing.asserts import assert_verdicts


@pytest.mark.check("memory_completed")
def test_memory_completed(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("hbm_bandwidth")
def test_hbm_bandwidth(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("hbm_bandwidth_outlier")
def test_hbm_bandwidth_outlier(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("h2d_bandwidth")
def test_h2d_bandwidth(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("d2h_bandwidth")
def test_d2h_bandwidth(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("h2d_bandwidth_outlier")
def test_h2d_bandwidth_outlier(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("d2h_bandwidth_outlier")
def test_d2h_bandwidth_outlier(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("p2p_completed")
def test_p2p_completed(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("p2p_unidir")
def test_p2p_unidir(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("p2p_bidir")
def test_p2p_bidir(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("p2p_unidir_outlier")
def test_p2p_unidir_outlier(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("p2p_bidir_outlier")
def test_p2p_bidir_outlier(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("allreduce_completed")
def test_allreduce_completed(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("allreduce_busbw")
def test_allreduce_busbw(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("collectives_completed")
def test_collectives_completed(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("allgather_busbw")
def test_allgather_busbw(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("reducescatter_busbw")
def test_reducescatter_busbw(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("alltoall_busbw")
def test_alltoall_busbw(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("broadcast_busbw")
def test_broadcast_busbw(results: list[CheckResult]) -> None:
    assert_verdicts(results)
