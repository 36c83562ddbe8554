"""The node's RDMA rails as the nccl role needs them: which HCA ports sit behind a GPU's switch.

One shell read of sysfs (``$NODEGATE_SYSFS_ROOT`` on a simulated node, else ``/sys``): the
resolved PCIe path of every NVIDIA display/3D controller (PCI class 0x0300/0x0302; NVSwitches
are bridges, 0x0680, and stay out) and of every ``class/infiniband`` device with its ports'
link layers. ``rails()`` pairs them as the battery's rail map does (``probes.rail_map``: the
HCAs meeting a GPU deepest, below a switch), so ``NCCL_IB_HCA`` names the same rails the
``network`` checks judge, in GPU (PCI bus) order, before nodegate itself is on the node.
An HCA whose VPD carries ``SMDL=SW_MNG`` is an NVSwitch management function of an NVLink 5
board (``probes.rail_map``: the sources), never a rail, so never in ``NCCL_IB_HCA``.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any

from pyinfra.api.facts import FactBase
from typing_extensions import override

from nodegate.probes.pcie_tree import parse_pci_path, shared_bridges

_COMMAND = r"""r="${NODEGATE_SYSFS_ROOT:-/sys}"
d=$(cd "$r/devices" 2>/dev/null && pwd -P) || exit 0
echo "root $d"
for f in "$r"/bus/pci/devices/*; do
  [ -r "$f/class" ] && [ -r "$f/vendor" ] || continue
  case "$(cat "$f/vendor"):$(cat "$f/class")" in
    0x10de:0x0300*|0x10de:0x0302*) echo "gpu $(readlink -f "$f")";;
  esac
done
for h in "$r"/class/infiniband/*; do
  [ -e "$h/device" ] || continue
  n=${h##*/}
  echo "hca $n $(readlink -f "$h/device")"
  grep -qaF 'SMDL=SW_MNG' "$h/device/vpd" 2>/dev/null && echo "swmng $n"
  for p in "$h"/ports/*; do
    [ -r "$p/link_layer" ] && echo "port $n ${p##*/} $(cat "$p/link_layer")"
  done
done"""


class RdmaRails(FactBase[dict[str, Any]]):
    """``{"gpus": [pcie path], "hcas": {name: {"path": pcie path, "ports": {n: link layer}}}}``
    with paths below ``<root>/devices`` (``pci0000:15/0000:15:01.0/.../0000:18:00.0``), and
    ``"sw_mng": True`` on an NVSwitch management function; empty when the node has no sysfs
    tree to read."""

    @override
    def command(self) -> str:
        return _COMMAND

    @override
    @staticmethod
    def default() -> dict[str, Any]:
        return {"gpus": [], "hcas": {}}

    @override
    def process(self, output: list[str]) -> dict[str, Any]:
        out = self.default()
        root = ""
        for line in output:
            kind, _, rest = line.strip().partition(" ")
            if kind == "root":
                root = rest.rstrip("/") + "/"
            elif kind == "gpu" and rest.startswith(root):
                out["gpus"].append(rest[len(root):])
            elif kind == "hca":
                name, _, path = rest.partition(" ")
                out["hcas"][name] = {"path": path[len(root):] if path.startswith(root) else None,
                                     "ports": {}}
            elif kind == "swmng" and rest in out["hcas"]:
                out["hcas"][rest]["sw_mng"] = True
            elif kind == "port":
                name, port, layer = [*rest.split(" ", 2), "", ""][:3]
                if name in out["hcas"] and port.isdigit():
                    out["hcas"][name]["ports"][port] = layer
        return out


@dataclass(frozen=True)
class Rails:
    hca_ports: list[str]  # "mlx5_0:1", in GPU order
    unpaired: list[str]  # rail HCAs behind no GPU's switch
    gpus: int


def rails(fact: dict[str, Any], devices: list[str] | None = None) -> Rails:
    """The HCA ports behind each GPU's switch (GPUs in PCI bus order, NVML's and
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID``'s), limited to the profile's ``network.rails.devices``
    globs; NVSwitch management functions (``sw_mng``) are no rail and left out."""
    globs = devices or ["*"]
    hcas = {name: (parse_pci_path(h.get("path")), h.get("ports") or {})
            for name, h in (fact.get("hcas") or {}).items()
            if not h.get("sw_mng") and any(fnmatch.fnmatchcase(name, g) for g in globs)}
    gpus = sorted((p for p in (parse_pci_path(g) for g in fact.get("gpus") or []) if p),
                  key=lambda p: p.bdf)
    ports: list[str] = []
    paired: set[str] = set()
    for gpu in gpus:
        depth = {n: len(shared_bridges(gpu, path)) for n, (path, _) in hcas.items() if path}
        best = max(depth.values(), default=0)
        if best < 2:  # meeting at the root port or above is not "behind the same switch"
            continue
        for name in sorted(n for n, d in depth.items() if d == best):
            paired.add(name)
            for port in sorted(hcas[name][1], key=int):
                if f"{name}:{port}" not in ports:
                    ports.append(f"{name}:{port}")
    return Rails(ports, sorted(set(hcas) - paired), len(gpus))
