"""NVLink 5 boards: the ConnectX bridge's NVSwitch management functions (VPD ``SMDL=SW_MNG``)
are mlx5 InfiniBand devices beside the rails, and neither the rail map nor the nccl role's
``NCCL_IB_HCA`` may take them for rails.

The tree is the simulator's XE9680 one with one more mlx5 function under GPU 0's PCIe switch,
the same ConnectX-7 ids (15b3:1021, as the public detection scripts note), which the pairing
would otherwise pick as a rail. Its VPD is built to the PCI VPD layout (identifier string,
VPD-R keywords, RV checksum, end tag) with the Fabric Manager guide's vendor-specific field
``SMDL=SW_MNG``; no public dump of a real one was found, so the keyword carrying it (V3 here)
is an assumption, and the readers match the bytes anywhere, as FM's own start script does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from nodegate.facts.rdma import RdmaRails, rails
from nodegate.probes import rail_map
from nodegate.probes.nvml import normalize_bus_id
from nodegate.probes.rdma import read_rdma
from nodegate.sim.runtime import resolve_spec
from nodegate.sim.sysfs import write_tree


def pci_vpd(ident: bytes, fields: list[tuple[bytes, bytes]]) -> bytes:
    """A PCI VPD image: 0x82 identifier, 0x90 read-only keywords closed by RV, 0x78 end."""
    body = b"".join(key + bytes([len(value)]) + value for key, value in fields)
    head = b"\x82" + len(ident).to_bytes(2, "little") + ident
    ro_len = len(body) + 4  # + "RV", its length byte, its checksum byte
    start = head + b"\x90" + ro_len.to_bytes(2, "little") + body + b"RV\x01"
    checksum = (-sum(start)) & 0xFF  # every byte up to and including it sums to zero
    return start + bytes([checksum]) + b"\x78"


BRIDGE_VPD = pci_vpd(b"NVIDIA ConnectX-7 HGX baseboard bridge",
                     [(b"PN", b"MCX750500B-0D00"), (b"SN", b"MT0000X00000"),
                      (b"V3", b"SMDL=SW_MNG")])
NIC_VPD = pci_vpd(b"NVIDIA ConnectX-7 HHHL Adapter Card, 400Gb/s NDR IB",
                  [(b"PN", b"MCX75310AAS-NEAT"), (b"SN", b"MT0000X00001"), (b"V3", b"0")])


def tree(tmp_path: Path, vpd: bytes | None) -> Path:
    """The XE9680 tree plus ``mlx5_8``, function 1 beside GPU 0's rail NIC."""
    root = write_tree(resolve_spec("h100-hgx"), tmp_path / "sysfs")
    nic = (root / "class" / "infiniband" / "mlx5_0" / "device").resolve()
    (root / "class" / "infiniband" / "mlx5_0" / "device" / "vpd").write_bytes(NIC_VPD)
    lpf = nic.with_name(nic.name[:-1] + "1")
    shutil.copytree(nic, lpf, symlinks=True)
    (lpf / "infiniband" / "mlx5_0").rename(lpf / "infiniband" / "mlx5_8")
    (root / "class" / "infiniband" / "mlx5_8").symlink_to(
        os.path.relpath(lpf / "infiniband" / "mlx5_8", root / "class" / "infiniband"))
    if vpd is not None:
        (lpf / "vpd").write_bytes(vpd)
    return root


def test_the_vpd_image_is_well_formed() -> None:
    assert BRIDGE_VPD[0] == 0x82 and BRIDGE_VPD[-1] == 0x78
    assert sum(BRIDGE_VPD[:-1]) & 0xFF == 0
    assert rail_map.SW_MNG in BRIDGE_VPD and rail_map.SW_MNG not in NIC_VPD


def _build(root: Path) -> rail_map.RailMap:
    ids = [(f"gpu{i}", f"{normalize_bus_id(g['pci_bus_id'])}.0")
           for i, g in enumerate(resolve_spec("h100-hgx")["gpus"])]
    return rail_map.build(root, ids, read_rdma(root).devices)


def test_rail_map_leaves_the_management_function_out(tmp_path: Path) -> None:
    found = _build(tree(tmp_path, BRIDGE_VPD))
    assert [d.name for d in found.rails] == [f"mlx5_{i}" for i in range(8)]
    assert found.gpus[0].nics == ["mlx5_0"]
    data = found.to_json()
    assert data["nccl_ib_hca"] == "=" + ",".join(f"mlx5_{i}:1" for i in range(8))
    assert data["nvswitch_management"] == ["mlx5_8"] and data["unpaired_rails"] == []


def test_without_the_marker_it_would_be_a_rail(tmp_path: Path) -> None:
    """The control: the same function with an ordinary NIC's VPD (or none) pairs with GPU 0."""
    for vpd in (NIC_VPD, None):
        found = _build(tree(tmp_path / str(vpd is None), vpd))
        assert found.gpus[0].nics == ["mlx5_0", "mlx5_8"]
        assert found.nvswitch_management == []


def _fact(root: Path) -> dict:  # type: ignore[type-arg]
    fact = RdmaRails()
    out = subprocess.run(["sh", "-c", fact.command()], capture_output=True, text=True,
                         env={**os.environ, "NODEGATE_SYSFS_ROOT": str(root)}, check=True)
    return fact.process(out.stdout.splitlines())


def test_nccl_ib_hca_leaves_the_management_function_out(tmp_path: Path) -> None:
    fact = _fact(tree(tmp_path / "a", BRIDGE_VPD))
    assert fact["hcas"]["mlx5_8"].get("sw_mng") is True
    assert "sw_mng" not in fact["hcas"]["mlx5_0"]
    got = rails(fact, ["mlx5_*"])
    assert got.hca_ports == [f"mlx5_{i}:1" for i in range(8)] and got.unpaired == []
    control = rails(_fact(tree(tmp_path / "b", NIC_VPD)), ["mlx5_*"])
    assert "mlx5_8:1" in control.hca_ports


def test_a_fifo_where_the_vpd_belongs_is_refused_not_read(tmp_path: Path) -> None:
    root = tree(tmp_path, vpd=None)
    vpd = root / "class" / "infiniband" / "mlx5_8" / "device" / "vpd"
    vpd.unlink()  # the copy of the rail NIC's
    os.mkfifo(vpd)  # a plain read would block here for ever: no writer ever opens it
    assert rail_map.nvswitch_management(root, "mlx5_8") is False
    vpd.unlink()
    vpd.write_bytes(BRIDGE_VPD)
    assert rail_map.nvswitch_management(root, "mlx5_8") is True
    vpd.write_bytes(BRIDGE_VPD + b"\0" * rail_map.VPD_MAX_BYTES)  # past PCI VPD's size
    assert rail_map.nvswitch_management(root, "mlx5_8") is False
