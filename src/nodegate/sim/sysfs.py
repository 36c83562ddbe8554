"""A sysfs tree for the simulated board: its GPUs and one ConnectX-7 rail per GPU in the PCIe
layout of an XE9680-style HGX node, written where ``NODEGATE_SYSFS_ROOT`` points.

Per GPU on bus B (slot order): a host bridge ``pci0000:<B-3>``, root port ``<B-3>:01.0``, a
PCIe switch (upstream ``<B-2>:00.0``, downstream ports ``<B-1>:00.0`` and ``<B-1>:01.0``), the
GPU at ``B:00.0`` and its NIC ``mlx5_<slot>`` at ``<B+1>:00.0``. Files carry the kernel's
formats (see ``nodegate.probes.rdma``); links are relative, so the tree can move. Faults in
``board["nic_faults"]`` (``nodegate.sim.faults``) change what one NIC shows.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from nodegate.sim.scenario import Board, parse_bus_id

#: ConnectX-7 single-port OSFP (MT4129), firmware as in a public H100 capture (gpud testdata).
FW_VER = "28.41.1000"
BOARD_ID = "MT_0000000838"
HCA_TYPE = "MT4129"
#: 4X rate names the kernel prints per rate (drivers/infiniband/core/sysfs.c rate_show).
IB_4X = {10: "SDR", 20: "DDR", 40: "QDR", 56: "FDR", 100: "EDR", 200: "HDR", 400: "NDR",
         800: "XDR"}
#: CPUs per NUMA node of a dual 56-core Sapphire Rapids host with SMT (XE9680 top bin).
CPULISTS = {0: "0-55,112-167", 1: "56-111,168-223"}
COUNTERS = ("link_downed", "link_error_recovery", "symbol_error", "port_rcv_errors",
            "port_xmit_discards", "local_link_integrity_errors",
            "excessive_buffer_overrun_errors", "port_xmit_data", "port_rcv_data")
HW_COUNTERS = ("out_of_buffer", "rnr_nak_retry_err", "local_ack_timeout_err",
               "packet_seq_err", "duplicate_request")


def nic_count(board: Board) -> int:
    return len(board["gpus"])


def write_tree(board: Board, root: Path) -> Path:
    """(Re)write the tree under ``root`` and return it."""
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    faults: dict[str, dict[str, Any]] = board.get("nic_faults", {})
    for slot, gpu in enumerate(board["gpus"]):
        dom, bus, _, _ = parse_bus_id(gpu["pci_bus_id"])
        numa = int(gpu.get("numa_node", -1))
        host = f"pci{dom:04x}:{bus - 3:02x}"
        rootport = f"{dom:04x}:{bus - 3:02x}:01.0"
        up, down_gpu, down_nic = (f"{dom:04x}:{bus - 2:02x}:00.0", f"{dom:04x}:{bus - 1:02x}:00.0",
                                  f"{dom:04x}:{bus - 1:02x}:01.0")
        switch = root / "devices" / host / rootport / up
        _function(root, root / "devices" / host / rootport, numa, speed="32.0 GT/s PCIe",
                  width=16, ids=ROOT_PORT)
        for bridge in (switch, switch / down_gpu, switch / down_nic):
            _function(root, bridge, numa, speed="32.0 GT/s PCIe", width=16)
        if not gpu.get("missing"):
            _function(root, switch / down_gpu / f"{dom:04x}:{bus:02x}:00.0", numa,
                      speed="32.0 GT/s PCIe", width=16, ids=GPU_ID)
        fault = faults.get(str(slot), {})
        nic_bus = f"{dom:04x}:{bus + 1:02x}:00.0"
        nic_dir = switch / down_nic / nic_bus
        if fault.get("wrong_switch"):  # a riser slot on its own root port, no switch
            other = root / "devices" / host / f"{dom:04x}:{bus - 3:02x}:03.0"
            _function(root, other, numa, speed="32.0 GT/s PCIe", width=16, ids=ROOT_PORT)
            nic_dir = other / f"{dom:04x}:{bus + 2:02x}:00.0"
        if fault.get("removed"):
            continue
        _nic(root, nic_dir, slot, fault.get("numa_node", numa), fault)
    for node, cpus in CPULISTS.items():
        _write(root / "devices" / "system" / "node" / f"node{node}" / "cpulist", cpus)
    return root


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def _link(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(target, link.parent))


#: (vendor, device, class) in the kernel's sysfs formats: Intel root port, Broadcom PEX switch
#: port, H100 SXM5 (3D controller), ConnectX-7 (InfiniBand controller); pci.ids names them.
ROOT_PORT = ("0x8086", "0x352a", "0x060400")
SWITCH_PORT = ("0x1000", "0xc030", "0x060400")
GPU_ID = ("0x10de", "0x2330", "0x030200")
NIC_ID = ("0x15b3", "0x1021", "0x020700")


def _function(root: Path, path: Path, numa: int, *, speed: str, width: int,
              ids: tuple[str, str, str] = SWITCH_PORT) -> None:
    """One PCI function: ids, numa_node and link files, and its bus/pci/devices link."""
    for key, value in zip(("vendor", "device", "class"), ids, strict=True):
        _write(path / key, value)
    _write(path / "numa_node", str(numa))
    for key, value in (("current_link_speed", speed), ("max_link_speed", speed),
                       ("current_link_width", str(width)), ("max_link_width", str(width))):
        _write(path / key, value)
    link = root / "bus" / "pci" / "devices" / path.name
    if not link.is_symlink():
        _link(link, path)


def _nic(root: Path, pci: Path, slot: int, numa: int, fault: dict[str, Any]) -> None:
    name = f"mlx5_{slot}"
    _function(root, pci, numa, speed="32.0 GT/s PCIe", width=16, ids=NIC_ID)
    dev = pci / "infiniband" / name
    guid = f"a088:c203:00{slot:02x}:{0x5a00 + slot:04x}"
    _write(dev / "fw_ver", FW_VER)
    _write(dev / "board_id", BOARD_ID)
    _write(dev / "hca_type", HCA_TYPE)
    _write(dev / "node_guid", guid)
    _link(dev / "device", pci)
    _link(root / "class" / "infiniband" / name, dev)
    netdev = pci / "net" / f"ibp{int(pci.name.split(':')[1], 16)}s0"
    _write(netdev / "mtu", "4092")  # IPoIB datagram mode with a 4096-byte IB MTU
    port = dev / "ports" / "1"
    down = fault.get("down")
    _write(netdev / "operstate", "down" if down else "up")
    _write(port / "state", "1: DOWN" if down else "4: ACTIVE")
    _write(port / "phys_state", "2: Polling" if down else "5: LinkUp")
    rate = 10 if down else int(fault.get("rate", 400))
    _write(port / "rate", f"{rate} Gb/sec (4X {IB_4X[rate]})")
    _write(port / "link_layer", "InfiniBand")
    _write(port / "lid", f"0x{0x1a0 + slot:x}")
    _write(port / "gids" / "0", f"fe80:0000:0000:0000:{guid}")
    _write(port / "gids" / "1", "0000:0000:0000:0000:0000:0000:0000:0000")
    _write(port / "gid_attrs" / "types" / "0", "IB/RoCE v1")
    for counter in COUNTERS:
        _write(port / "counters" / counter, str(fault.get("counters", {}).get(counter, 0)))
    for counter in HW_COUNTERS:
        _write(port / "hw_counters" / counter, "0")
