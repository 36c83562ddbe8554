"""The rail probe and judge on a real Soft-RoCE (rdma_rxe) sysfs capture (data/README-rxe.md).

Software RDMA devices have no PCIe function and no PMA counters: a profile that declares
Soft-RoCE rails (``network.rails.soft_roce``, the testbed's) SKIPs those checks; any other
profile still gets ERROR for what it cannot read.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest

from nodegate.judge.network import judge_network
from nodegate.probes.rdma import read_rdma
from nodegate.profiles import Profile, resolve_profile
from nodegate.results import Verdict

CAPTURE = Path(__file__).parent / "data" / "rxe-softroce-sys"


def _verdicts(root: Path, profile: Profile | None = None) -> dict[str, Verdict]:
    results = judge_network(read_rdma(root), None, profile or resolve_profile("softroce-vm"))
    return {f"{r.check}[{r.entity}]": r.verdict for r in results}


@pytest.fixture
def healthy(tmp_path: Path) -> Path:
    """The capture (taken before the role ran: eth1 at 1500) with eth1 at the profile's 9000,
    as the role leaves it."""
    root = tmp_path / "sys"
    shutil.copytree(CAPTURE, root)
    (root / "class/net/eth1/mtu").write_text("9000\n")
    return root


def test_rxe_is_read_through_its_parent_netdev(healthy: Path) -> None:
    snapshot = read_rdma(healthy)
    (dev,) = snapshot.devices
    assert dev.name == "rxe0" and dev.parent == "eth1" and dev.pci is None
    assert [(n.name, n.mtu, n.operstate) for n in dev.netdevs] == [("eth1", 9000, "up")]
    (port,) = dev.ports
    assert (port.state, port.phys_state, port.rate_gbps, port.link_layer) == \
        ("ACTIVE", "LinkUp", 100.0, "Ethernet")
    assert port.counters == {"link_downed": 0}  # from hw_counters: rxe has no PMA
    assert "sent_pkts" in port.hw_counters
    # rxe speaks RoCE v2 only: the link-local and the IPv4-mapped GID are both v2
    assert [g.type for g in port.gids] == ["RoCE v2", "RoCE v2"]


def test_the_softroce_profile_passes_the_healthy_capture(healthy: Path) -> None:
    verdicts = _verdicts(healthy)
    for check in ("ib_rail_count[node]", "ib_port_state[rxe0.port1]",
                  "ib_port_rate[rxe0.port1]", "ib_link_layer[rxe0.port1]",
                  "ib_netdev[rxe0.port1]", "ib_link_flaps[rxe0.port1]"):
        assert verdicts[check] == Verdict.PASS, check
    assert verdicts["ib_hca_pcie_link[rxe0]"] == Verdict.SKIP
    assert verdicts["ib_symbol_errors[rxe0.port1]"] == Verdict.SKIP
    assert not {k for k, v in verdicts.items() if v in (Verdict.FAIL, Verdict.ERROR)}


def test_without_soft_roce_declared_what_rxe_lacks_is_error(healthy: Path) -> None:
    data = copy.deepcopy(resolve_profile("softroce-vm").data)
    del data["network"]["rails"]["soft_roce"]
    verdicts = _verdicts(healthy, Profile("hw-roce", data))
    assert verdicts["ib_hca_pcie_link[rxe0]"] == Verdict.ERROR
    assert verdicts["ib_symbol_errors[rxe0.port1]"] == Verdict.ERROR
    assert verdicts["ib_link_flaps[rxe0.port1]"] == Verdict.PASS  # link_downed was read


def test_mtu_mismatch_and_flap_total_on_the_capture(healthy: Path) -> None:
    assert _verdicts(CAPTURE)["ib_netdev[rxe0.port1]"] == Verdict.FAIL  # captured at 1500
    root = healthy
    (root / "class/infiniband/rxe0/ports/1/hw_counters/link_downed").write_text("1\n")
    verdicts = _verdicts(root)
    assert verdicts["ib_netdev[rxe0.port1]"] == Verdict.PASS
    assert verdicts["ib_link_flaps[rxe0.port1]"] == Verdict.WARN  # a total, no earlier report
