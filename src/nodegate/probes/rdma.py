"""RDMA devices (InfiniBand and RoCE HCAs) as sysfs shows them, under a root the caller picks.

Everything comes from ``<root>/class/infiniband`` (default root ``/sys``), so tests give the
probe a captured tree and the simulator writes one beside its board. No tool is run and no
library is loaded: this is on the cron path.

The values keep the kernel's own formats (``drivers/infiniband/core/sysfs.c``): ``state``
"4: ACTIVE", ``phys_state`` "5: LinkUp", ``rate`` "400 Gb/sec (4X NDR)", ``link_layer``
"InfiniBand" or "Ethernet", GIDs as eight colon-separated hex groups and their types ("IB/RoCE
v1", "RoCE v2") under ``gid_attrs/types``. A file that is missing or unreadable, or whose text
does not parse, is recorded in ``problems`` under its path, so the judge can say ERROR for that
rail instead of passing a value nobody read.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from nodegate.bounds import ascii_int
from nodegate.probes.pcie_tree import PciPath, pci_path_of

ENV_SYSFS_ROOT = "NODEGATE_SYSFS_ROOT"

#: The error counters every IB port has (``ports/N/counters``), judged by growth.
ERROR_COUNTERS: tuple[str, ...] = (
    "link_downed", "link_error_recovery", "symbol_error", "port_rcv_errors",
    "port_xmit_discards", "local_link_integrity_errors", "excessive_buffer_overrun_errors",
)
#: Bit width of each counter in the IBA PortCounters attribute the kernel reads them from:
#: they stop at 2^w - 1 instead of wrapping, so a counter at its ceiling has unknown growth.
COUNTER_BITS: dict[str, int] = {
    "link_downed": 8, "link_error_recovery": 8, "symbol_error": 16, "port_rcv_errors": 16,
    "port_xmit_discards": 16, "local_link_integrity_errors": 4,
    "excessive_buffer_overrun_errors": 4,
}
#: Error counters a driver without a PMA (rdma_rxe: no ``ports/N/counters``) keeps under the
#: same name in ``hw_counters``: rxe counts ``link_downed`` when its netdev goes down.
SOFT_COUNTERS: tuple[str, ...] = ("link_downed",)
#: GIDs that are unset read as all zeroes; they are not listed.
_ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
_STATE = re.compile(r"^(\d+):\s*(\S.*)$")
_RATE = re.compile(r"^(\d+(?:\.\d+)?) Gb/sec(?: \((\d+)X ?([A-Z0-9]*)\))?$")
_LINK_SPEED = re.compile(r"^(\d+(?:\.\d+)?) GT/s")


def default_sysfs_root() -> Path:
    """``$NODEGATE_SYSFS_ROOT`` (the simulator's tree) or ``/sys``."""
    return Path(os.environ.get(ENV_SYSFS_ROOT) or "/sys")


@dataclass(frozen=True)
class Gid:
    index: int
    gid: str
    type: str | None  # "RoCE v2", "IB/RoCE v1"; None where gid_attrs is absent (old kernels)


@dataclass
class RdmaPort:
    device: str
    port: int
    state: str | None = None  # "ACTIVE"
    phys_state: str | None = None  # "LinkUp"
    rate_gbps: float | None = None
    rate_text: str | None = None
    link_layer: str | None = None
    lid: str | None = None
    gids: list[Gid] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    hw_counters: dict[str, int] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)

    @property
    def entity(self) -> str:
        return f"{self.device}.port{self.port}"


@dataclass
class PcieLink:
    current_speed_gts: float | None = None
    current_width: int | None = None
    max_speed_gts: float | None = None
    max_width: int | None = None


@dataclass
class NetDev:
    name: str
    mtu: int | None
    operstate: str | None


@dataclass
class RdmaDevice:
    name: str
    fw_ver: str | None = None
    board_id: str | None = None
    node_guid: str | None = None
    hca_type: str | None = None
    pci: PciPath | None = None  # where the HCA sits in the PCIe tree
    numa_node: int | None = None  # -1 = the firmware gave the kernel none
    pcie: PcieLink = field(default_factory=PcieLink)
    netdevs: list[NetDev] = field(default_factory=list)
    ports: list[RdmaPort] = field(default_factory=list)
    problems: dict[str, str] = field(default_factory=dict)
    #: a software RDMA device's netdev (rdma_rxe, siw: no ``device`` link, a ``parent`` file)
    parent: str | None = None


@dataclass
class RdmaSnapshot:
    root: str
    devices: list[RdmaDevice]
    problem: str | None = None  # the class directory itself could not be listed


class _Reader:
    """Reads files under one directory and notes, per relative path, why one gave nothing."""

    def __init__(self, base: Path, problems: dict[str, str], prefix: str) -> None:
        self.base, self.problems, self.prefix = base, problems, prefix

    def text(self, rel: str, *, optional: bool = False) -> str | None:
        try:
            return (self.base / rel).read_text(errors="replace").strip()
        except FileNotFoundError:
            if not optional:
                self.problems[f"{self.prefix}{rel}"] = "missing"
        except OSError as exc:
            self.problems[f"{self.prefix}{rel}"] = f"unreadable: {exc.strerror or exc}"
        return None

    def bad(self, rel: str, text: str) -> None:
        self.problems[f"{self.prefix}{rel}"] = f"unparsable: {text!r}"

    def integer(self, rel: str, *, optional: bool = False) -> int | None:
        text = self.text(rel, optional=optional)
        if text is None:
            return None
        try:
            return ascii_int(text, base=0) if text.startswith("0x") else ascii_int(text)
        except ValueError:
            self.bad(rel, text)
            return None


def parse_state(text: str) -> tuple[int, str] | None:
    """``4: ACTIVE`` -> (4, "ACTIVE"); also the phys_state form ``5: LinkUp``."""
    match = _STATE.match(text.strip())
    return (int(match.group(1)), match.group(2).strip()) if match else None


def parse_rate(text: str) -> float | None:
    """``400 Gb/sec (4X NDR)`` -> 400.0; ``2.5 Gb/sec (1X SDR)`` -> 2.5."""
    match = _RATE.match(text.strip())
    return float(match.group(1)) if match else None


def parse_link_speed(text: str) -> float | None:
    """PCIe ``current_link_speed``: ``32.0 GT/s PCIe`` (5.x kernels), ``8 GT/s`` (older)."""
    match = _LINK_SPEED.match(text.strip())
    return float(match.group(1)) if match else None


def read_rdma(root: Path | None = None) -> RdmaSnapshot:
    """Every RDMA device under ``<root>/class/infiniband``, sorted by name (mlx5_2 before
    mlx5_10)."""
    root = default_sysfs_root() if root is None else root
    klass = root / "class" / "infiniband"
    try:
        names = sorted((p.name for p in klass.iterdir()), key=_natural)
    except FileNotFoundError:
        return RdmaSnapshot(str(root), [], problem=f"{klass} does not exist (no RDMA driver "
                                                   "loaded, or no HCA)")
    except OSError as exc:
        return RdmaSnapshot(str(root), [], problem=f"{klass}: {exc.strerror or exc}")
    return RdmaSnapshot(str(root), [_device(root, klass / name, name) for name in names])


def _natural(name: str) -> tuple[object, ...]:
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def _device(root: Path, path: Path, name: str) -> RdmaDevice:
    dev = RdmaDevice(name)
    read = _Reader(path, dev.problems, "")
    dev.fw_ver = read.text("fw_ver")
    software = not os.path.lexists(path / "device") and (path / "parent").is_file()
    if software:  # rxe/siw live under devices/virtual and name their netdev in ``parent``
        dev.parent = read.text("parent")
        dev.problems["device"] = f"a software RDMA device over {dev.parent}: no PCIe function"
        if dev.parent:
            dev.netdevs = _netdevs(root / "class" / "net", dev.problems, only=dev.parent)
    dev.board_id = read.text("board_id", optional=software)
    dev.node_guid = read.text("node_guid")
    dev.hca_type = read.text("hca_type", optional=True)
    pci = pci_path_of(root, path / "device")
    if software:
        pass
    elif isinstance(pci, str):
        dev.problems["device"] = pci
    else:
        dev.pci = pci
        dev.numa_node = read.integer("device/numa_node")
        dev.pcie = PcieLink(
            _speed(read, "device/current_link_speed"), read.integer("device/current_link_width"),
            _speed(read, "device/max_link_speed"), read.integer("device/max_link_width"))
        dev.netdevs = _netdevs(path / "device" / "net", dev.problems)
    try:
        ports = sorted(int(p.name) for p in (path / "ports").iterdir() if p.name.isdigit())
    except OSError as exc:
        dev.problems["ports"] = "missing" if isinstance(exc, FileNotFoundError) else \
            f"unreadable: {exc.strerror or exc}"
        ports = []
    dev.ports = [_port(path / "ports" / str(n), name, n) for n in ports]
    return dev


def _speed(read: _Reader, rel: str) -> float | None:
    text = read.text(rel)
    if text is None:
        return None
    speed = parse_link_speed(text)
    if speed is None:
        read.bad(rel, text)
    return speed


def _netdevs(net: Path, problems: dict[str, str], only: str | None = None) -> list[NetDev]:
    """The HCA's network interfaces (IPoIB for InfiniBand, the Ethernet port for RoCE);
    ``only``: the one a software device runs over, in ``class/net``."""
    try:
        names = sorted(p.name for p in net.iterdir() if only is None or p.name == only)
    except FileNotFoundError:
        return []  # an IB port without IPoIB has no netdev: nothing to judge, not a fault
    except OSError as exc:
        problems["device/net"] = f"unreadable: {exc.strerror or exc}"
        return []
    out = []
    for name in names:
        read = _Reader(net / name, problems, f"device/net/{name}/")
        out.append(NetDev(name, read.integer("mtu"), read.text("operstate")))
    return out


def _port(path: Path, device: str, number: int) -> RdmaPort:
    port = RdmaPort(device, number)
    read = _Reader(path, port.problems, f"ports/{number}/")
    for key in ("state", "phys_state"):
        text = read.text(key)
        parsed = parse_state(text) if text is not None else None
        if text is not None and parsed is None:
            read.bad(key, text)
        setattr(port, key, parsed[1] if parsed else None)
    port.rate_text = read.text("rate")
    if port.rate_text is not None:
        port.rate_gbps = parse_rate(port.rate_text)
        if port.rate_gbps is None:
            read.bad("rate", port.rate_text)
    port.link_layer = read.text("link_layer")
    port.lid = read.text("lid", optional=True)
    port.gids = _gids(path)
    port.hw_counters = _hw_counters(path, read)
    pma = (path / "counters").is_dir()
    for counter in ERROR_COUNTERS:
        if not pma and counter in SOFT_COUNTERS and counter in port.hw_counters:
            port.counters[counter] = port.hw_counters[counter]
            continue
        value = read.integer(f"counters/{counter}")
        if value is not None:
            port.counters[counter] = value
    return port


def _hw_counters(path: Path, read: _Reader) -> dict[str, int]:
    """Driver-specific counters (mlx5: out_of_buffer, rnr_nak_retry_err; rxe: link_downed)."""
    out: dict[str, int] = {}
    hw = path / "hw_counters"
    if hw.is_dir():
        for item in sorted(hw.iterdir()):
            value = read.integer(f"hw_counters/{item.name}", optional=True)
            if value is not None:
                out[item.name] = value
    return out


def _gids(path: Path) -> list[Gid]:
    """The GID table's set entries with their types (RoCE v2 where gid_attrs says so)."""
    out = []
    try:
        entries = sorted(int(p.name) for p in (path / "gids").iterdir() if p.name.isdigit())
    except OSError:
        return []
    for index in entries:
        try:
            gid = (path / "gids" / str(index)).read_text().strip()
        except OSError:
            continue  # the kernel answers EINVAL for empty RoCE slots
        if not gid or gid == _ZERO_GID:
            continue
        try:
            kind: str | None = (path / "gid_attrs" / "types" / str(index)).read_text().strip()
        except OSError:
            kind = None
        out.append(Gid(index, gid, kind or None))
    return out
