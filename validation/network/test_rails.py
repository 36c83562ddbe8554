"""Battery: network group (RDMA rails). One line per check: the judge decides, the test asserts."""

import pytest

from nodegate.results import CheckResult
from nodegate.testing.asserts import assert_verdicts


@pytest.mark.check("ib_rail_count")
def test_ib_rail_count(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("ib_port_state")
def test_ib_port_state(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("ib_port_rate")
def test_ib_port_rate(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("ib_link_layer")
def test_ib_link_layer(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("ib_hca_pcie_link")
def test_ib_hca_pcie_link(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("ib_firmware")
def test_ib_firmware(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("ib_netdev")
def test_ib_netdev(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("ib_topology")
def test_ib_topology(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("ib_rail_numa")
def test_ib_rail_numa(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("ib_link_flaps")
def test_ib_link_flaps(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("ib_link_recoveries")
def test_ib_link_recoveries(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("ib_symbol_errors")
def test_ib_symbol_errors(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("ib_rcv_errors")
def test_ib_rcv_errors(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("ib_xmit_discards")
def test_ib_xmit_discards(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("ib_link_integrity_errors")
def test_ib_link_integrity_errors(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("ib_buffer_overruns")
def test_ib_buffer_overruns(results: list[CheckResult]) -> None:
    assert_verdicts(results)
