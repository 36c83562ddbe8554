"""Where a PCI function sits in the PCIe tree, from sysfs symlinks, and the CPUs of a NUMA node.

``<root>/bus/pci/devices/<bdf>`` and ``<root>/class/infiniband/<dev>/device`` are symlinks into
``<root>/devices/pci<domain>:<bus>/<root port>/<switch port>/.../<bdf>``: the chain of
bridge functions between the host bridge and the device is the device's PCIe path. Two devices
whose paths share more than the root port meet below a PCIe switch (nvidia-smi topo's PIX or
PXB), which is where NCCL wants a GPU's rail NIC.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from nodegate.bounds import ascii_int

_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


@dataclass(frozen=True)
class PciPath:
    host_bridge: str  # "pci0000:15"
    chain: tuple[str, ...]  # root port first, the device itself last

    @property
    def bdf(self) -> str:
        return self.chain[-1]

    @property
    def bridges(self) -> tuple[str, ...]:
        return self.chain[:-1]

    def text(self) -> str:
        return "/".join((self.host_bridge, *self.chain))


def shared_bridges(a: PciPath, b: PciPath) -> tuple[str, ...]:
    """The bridges above both ``a`` and ``b``, root port first."""
    if a.host_bridge != b.host_bridge:
        return ()
    out = []
    for x, y in zip(a.bridges, b.bridges, strict=False):
        if x != y:
            break
        out.append(x)
    return tuple(out)


def same_switch(a: PciPath, b: PciPath) -> bool:
    """True when ``a`` and ``b`` meet below a switch, not only at (or above) the root port."""
    return len(shared_bridges(a, b)) >= 2


def pci_path_of(root: Path, link: Path) -> PciPath | str:
    """The PCIe path of the device ``link`` (a sysfs symlink) points to, or why there is none."""
    try:
        real = link.resolve(strict=True)
        devices = (root / "devices").resolve(strict=True)
    except OSError as exc:
        return f"{link.relative_to(root) if link.is_relative_to(root) else link}: " \
               f"{'missing' if isinstance(exc, FileNotFoundError) else exc.strerror or exc}"
    try:
        parts = real.relative_to(devices).parts
    except ValueError:
        return f"{link} resolves outside {devices}"
    if not parts or not parts[0].startswith("pci"):
        return f"{link} resolves to {real}, not below a PCI host bridge"
    chain = tuple(p for p in parts[1:] if _BDF.match(p))
    if not chain or chain[-1] != real.name:
        return f"{link} resolves to {real}, which is not a PCI function"
    return PciPath(parts[0], chain)


def parse_pci_path(text: str | None) -> PciPath | None:
    """``pci0000:15/0000:15:01.0/.../0000:18:00.0`` (a path below ``devices/``, as
    ``PciPath.text`` writes it) back to a PciPath; None when it is not one."""
    parts = (text or "").strip("/").split("/")
    chain = tuple(p for p in parts[1:] if _BDF.match(p))
    if not parts[0].startswith("pci") or not chain or chain[-1] != parts[-1]:
        return None
    return PciPath(parts[0], chain)


def pci_path_of_bdf(root: Path, bdf: str) -> PciPath | str:
    return pci_path_of(root, root / "bus" / "pci" / "devices" / bdf.lower())


def numa_node_of(root: Path, bdf: str) -> int | str:
    """The function's NUMA node (``-1``: the firmware gave none), or why it is unknown."""
    path = root / "bus" / "pci" / "devices" / bdf.lower() / "numa_node"
    try:
        return ascii_int(path.read_text().strip())
    except (OSError, ValueError) as exc:
        return f"bus/pci/devices/{bdf.lower()}/numa_node: " \
               f"{'missing' if isinstance(exc, FileNotFoundError) else exc}"


def cpulist_of(root: Path, node: int) -> str | None:
    """``devices/system/node/node<N>/cpulist`` (``0-55,112-167``), or None when unreadable."""
    try:
        return (root / "devices" / "system" / "node" / f"node{node}" / "cpulist").read_text() \
            .strip() or None
    except OSError:
        return None
