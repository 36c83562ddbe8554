"""The sysfs probe and the network judge on a real capture and on hand-built trees."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from nodegate.judge.network import judge_network, select_rails
from nodegate.probes.pcie_tree import PciPath, same_switch
from nodegate.probes.rdma import parse_link_speed, parse_rate, parse_state, read_rdma
from nodegate.profiles.loader import resolve_profile
from nodegate.results import Verdict

DATA = Path(__file__).parent / "data"


@pytest.fixture
def capture(tmp_path: Path) -> Path:
    """gpud's real H100 tree, placed where the kernel puts it."""
    shutil.copytree(DATA / "gpud-h100", tmp_path / "class" / "infiniband", symlinks=True)
    return tmp_path


def test_kernel_formats_parse() -> None:
    assert parse_state("4: ACTIVE") == (4, "ACTIVE")
    assert parse_state("5: LinkUp") == (5, "LinkUp")
    assert parse_state("ACTIVE") is None
    assert parse_rate("400 Gb/sec (4X NDR)") == 400.0
    assert parse_rate("200 Gb/sec (2X NDR)") == 200.0
    assert parse_rate("2.5 Gb/sec (1X SDR)") == 2.5
    assert parse_rate("400") is None
    assert parse_link_speed("32.0 GT/s PCIe") == 32.0
    assert parse_link_speed("8 GT/s") == 8.0
    assert parse_link_speed("Unknown") is None


def test_capture_reads_every_port(capture: Path) -> None:
    snap = read_rdma(capture)
    names = [d.name for d in snap.devices]
    assert names == ["mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8",
                     "mlx5_9", "mlx5_bond_0"]
    cx7 = snap.devices[0]
    assert (cx7.fw_ver, cx7.board_id, cx7.hca_type) == ("28.41.1000", "MT_0000000838", "MT4129")
    port = cx7.ports[0]
    assert (port.state, port.phys_state, port.rate_gbps, port.link_layer) == (
        "ACTIVE", "LinkUp", 400.0, "InfiniBand")
    assert set(port.counters) == {"link_downed", "link_error_recovery", "symbol_error",
                                  "port_rcv_errors", "port_xmit_discards",
                                  "local_link_integrity_errors",
                                  "excessive_buffer_overrun_errors"}
    assert "out_of_buffer" in port.hw_counters
    bond = snap.devices[-1].ports[0]
    assert (bond.rate_gbps, bond.link_layer) == (200.0, "Ethernet")
    # what the capture lacks is recorded, not invented
    assert cx7.pci is None and "device" in cx7.problems
    assert cx7.problems["node_guid"] == "missing"


def test_capture_judged(capture: Path) -> None:
    profile = resolve_profile("xe9680-h100")
    snap = read_rdma(capture)
    rails = select_rails(snap, profile.data["network"]["rails"])
    assert [d.name for d in rails][-1] == "mlx5_9"  # the bond is not a rail
    results = judge_network(snap, None, profile, gpu_problem="no GPUs in a capture")
    by = {(r.check, r.entity): r for r in results}
    assert by[("ib_rail_count", "node")].verdict == Verdict.PASS
    for dev in ("mlx5_0", "mlx5_9"):
        assert by[("ib_port_state", f"{dev}.port1")].verdict == Verdict.PASS
        assert by[("ib_port_rate", f"{dev}.port1")].verdict == Verdict.PASS
        assert by[("ib_link_layer", f"{dev}.port1")].verdict == Verdict.PASS
        assert by[("ib_firmware", dev)].verdict == Verdict.PASS
        # no PCIe tree in the capture: unmeasured is ERROR, never PASS
        assert by[("ib_hca_pcie_link", dev)].verdict == Verdict.ERROR
    # link_downed 255 is the 8-bit counter's ceiling: growth is unknowable
    flaps = by[("ib_link_flaps", "mlx5_1.port1")]
    assert flaps.verdict == Verdict.ERROR and "ceiling" in flaps.evidence["reason"]
    assert by[("ib_link_flaps", "mlx5_0.port1")].verdict == Verdict.PASS
    assert by[("ib_topology", "node")].verdict == Verdict.ERROR


def test_missing_and_garbled_files_are_errors(capture: Path) -> None:
    port = capture / "class" / "infiniband" / "mlx5_4" / "ports" / "1"
    (port / "state").unlink()
    (port / "rate").write_text("fast\n")
    (port / "counters" / "symbol_error").unlink()
    profile = resolve_profile("xe9680-h100")
    results = judge_network(read_rdma(capture), None, profile)
    by = {(r.check, r.entity): r for r in results}
    assert by[("ib_port_state", "mlx5_4.port1")].verdict == Verdict.ERROR
    rate = by[("ib_port_rate", "mlx5_4.port1")]
    assert rate.verdict == Verdict.ERROR and "unparsable" in rate.evidence["reason"]
    assert by[("ib_symbol_errors", "mlx5_4.port1")].verdict == Verdict.ERROR
    assert by[("ib_port_state", "mlx5_5.port1")].verdict == Verdict.PASS


def test_firmware_split_fails_the_node(capture: Path) -> None:
    (capture / "class" / "infiniband" / "mlx5_6" / "fw_ver").write_text("28.39.2048\n")
    results = judge_network(read_rdma(capture), None, resolve_profile("xe9680-h100"))
    fw = [r for r in results if r.check == "ib_firmware"]
    assert [(r.entity, r.verdict) for r in fw] == [("node", Verdict.FAIL)]


def test_no_rdma_class_is_an_error(tmp_path: Path) -> None:
    results = judge_network(read_rdma(tmp_path), None, resolve_profile("xe9680-h100"))
    assert [(r.check, r.verdict) for r in results] == [("ib_rail_count", Verdict.ERROR)]


def test_profile_without_rails_skips(tmp_path: Path) -> None:
    results = judge_network(read_rdma(tmp_path), None, resolve_profile("hgx-a100-80gb"))
    assert [(r.check, r.verdict) for r in results] == [("ib_rail_count", Verdict.SKIP)]


def test_same_switch_needs_more_than_the_root_port() -> None:
    gpu = PciPath("pci0000:15", ("0000:15:01.0", "0000:16:00.0", "0000:17:00.0", "0000:18:00.0"))
    nic = PciPath("pci0000:15", ("0000:15:01.0", "0000:16:00.0", "0000:17:01.0", "0000:19:00.0"))
    riser = PciPath("pci0000:15", ("0000:15:03.0", "0000:1a:00.0"))
    sibling = PciPath("pci0000:15", ("0000:15:01.0", "0000:1b:00.0"))
    assert same_switch(gpu, nic)
    assert not same_switch(gpu, riser)
    assert not same_switch(gpu, sibling)  # meeting at the root port only
