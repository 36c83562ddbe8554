"""The GPU -> rail NIC -> NUMA node -> CPU cores map of one node, from sysfs and NVML bus ids.

A GPU's rails are the RDMA devices below its closest PCIe switch: of the HCAs that meet the
GPU below a switch (not only at the root port), those that meet it deepest. Ranks follow the
GPUs' NVML order, which is PCI bus order (what ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` gives a job).

On NVLink 5 HGX boards (B200/B300) the NVSwitches are reached through the baseboard's
ConnectX bridge, whose limited functions appear as mlx5 InfiniBand devices beside the rails.
They are NVSwitch management ports for Fabric Manager and NVLSM, never rails: the Fabric
Manager guide tells them apart by a vendor-specific VPD field ``SMDL`` whose value is
``SW_MNG`` (quoted in siderolabs/extensions' fabric manager wrapper). FM's start script, the
GPU operator's NVLink 5 detection (NVIDIA/gpu-operator#2781: ``/sys/class/infiniband/*/
device/vpd``) and Bottlerocket's ghostdog all match those bytes anywhere in the binary VPD,
and so does this: which V-keyword carries the field is in no public capture found, so the
keyword is not parsed. A VPD that cannot be read (it needs root) counts as not SW_MNG.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodegate.errors import ConfigError
from nodegate.fileio import read_bytes
from nodegate.probes.pcie_tree import (
    PciPath,
    cpulist_of,
    numa_node_of,
    pci_path_of_bdf,
    shared_bridges,
)
from nodegate.probes.rdma import RdmaDevice

MAP_SCHEMA = "nodegate.rail-map/1"
MAP_FILE = "rail-map.json"
#: The VPD text that marks an NVSwitch management function (module docstring).
SW_MNG = b"SMDL=SW_MNG"
#: PCI VPD's largest size (its address field is 15 bits), the cap of one read.
VPD_MAX_BYTES = 32 * 1024


@dataclass
class GpuRails:
    entity: str  # gpu3 (NVML index)
    bdf: str  # 0000:18:00.0
    pci: PciPath | None
    numa_node: int | None
    nics: list[str] = field(default_factory=list)  # rail devices below its closest switch
    problem: str | None = None  # why its place in the tree is unknown


@dataclass
class RailMap:
    gpus: list[GpuRails]
    rails: list[RdmaDevice]
    cpulists: dict[int, str | None]
    nvswitch_management: list[str] = field(default_factory=list)  # SW_MNG, left out

    def gpus_of(self, device: str) -> list[GpuRails]:
        return [g for g in self.gpus if device in g.nics]

    def to_json(self, node: str | None = None) -> dict[str, Any]:
        """What a job launcher reads: per rank its GPU, NICs (``dev:port``), NUMA node, CPUs."""
        by_name = {d.name: d for d in self.rails}
        ranks = []
        for rank, gpu in enumerate(self.gpus):
            nics = []
            for name in gpu.nics:
                dev = by_name[name]
                nics.append({"device": name, "ports": [p.port for p in dev.ports],
                             "link_layer": sorted({p.link_layer for p in dev.ports
                                                   if p.link_layer}),
                             "netdevs": [n.name for n in dev.netdevs],
                             "numa_node": dev.numa_node,
                             "pcie_path": dev.pci.text() if dev.pci else None})
            ranks.append({"rank": rank, "gpu": gpu.entity, "gpu_bus_id": gpu.bdf,
                          "gpu_pcie_path": gpu.pci.text() if gpu.pci else None,
                          "numa_node": gpu.numa_node,
                          "cpus": self.cpulists.get(gpu.numa_node)
                          if gpu.numa_node is not None else None,
                          "nics": nics})
        hca = []
        for gpu in self.gpus:
            for name in gpu.nics:
                for port in by_name[name].ports:
                    if f"{name}:{port.port}" not in hca:
                        hca.append(f"{name}:{port.port}")
        return {"schema": MAP_SCHEMA, "node": node, "ranks": ranks,
                # "=": an exact match, so mlx5_1 does not also select mlx5_10 (NCCL docs)
                "nccl_ib_hca": "=" + ",".join(hca) if hca else "",
                "unpaired_rails": [d.name for d in self.rails if not self.gpus_of(d.name)],
                "nvswitch_management": list(self.nvswitch_management)}


def nvswitch_management(root: Path, device: str) -> bool:
    """Whether RDMA ``device`` is an NVSwitch management function (VPD ``SMDL=SW_MNG``)."""
    try:  # PCI VPD is at most 32 KiB; the one reader refuses a FIFO or device planted there
        vpd = read_bytes(root / "class" / "infiniband" / device / "device" / "vpd",
                         kind="config", limit=VPD_MAX_BYTES)
    except (OSError, ConfigError):
        return False
    return SW_MNG in vpd


def build(root: Path, gpu_bus_ids: list[tuple[str, str]], rails: list[RdmaDevice]) -> RailMap:
    """``gpu_bus_ids``: (entity, sysfs BDF) in NVML order; ``rails``: the profile's rail HCAs,
    less the NVSwitch management functions among them."""
    managing = [d.name for d in rails if nvswitch_management(root, d.name)]
    rails = [d for d in rails if d.name not in managing]
    gpus = []
    for entity, bdf in gpu_bus_ids:
        path = pci_path_of_bdf(root, bdf)
        numa = numa_node_of(root, bdf)
        problem = path if isinstance(path, str) else (numa if isinstance(numa, str) else None)
        gpu = GpuRails(entity, bdf, path if isinstance(path, PciPath) else None,
                       numa if isinstance(numa, int) else None, problem=problem)
        if gpu.pci is not None:
            gpu.nics = _closest(gpu.pci, rails)
        gpus.append(gpu)
    nodes = {g.numa_node for g in gpus if g.numa_node is not None and g.numa_node >= 0}
    return RailMap(gpus, rails, {n: cpulist_of(root, n) for n in sorted(nodes)}, managing)


def _closest(gpu: PciPath, rails: list[RdmaDevice]) -> list[str]:
    depth = {d.name: len(shared_bridges(gpu, d.pci)) for d in rails if d.pci is not None}
    best = max(depth.values(), default=0)
    if best < 2:  # meeting at the root port or above is not "behind the same switch"
        return []
    return [name for name, d in depth.items() if d == best]
