"""The node's RDMA ports as the network role needs them: device, port, link layer, netdev.

Read from sysfs (``/sys/class/infiniband/*/ports/*``) in one shell pass, like the battery's
probe (``nodegate.probes.rdma``) but only what the role acts on: which Ethernet netdev a RoCE
port runs over (its GID table's ``ndevs/0``), that netdev's MTU, and the RoCE type-of-service
rdma_cm gives new connections (configfs, only where a directory was made for the device).
"""

from __future__ import annotations

from typing import TypedDict

from typing_extensions import override

from nodegate.bounds import digits
from nodegate.facts.base import ListFact


class RdmaPortInfo(TypedDict):
    device: str
    port: int
    link_layer: str
    netdev: str | None
    mtu: int | None
    tos: int | None  # rdma_cm default_roce_tos; None: not configured (configfs entry absent)


_SCRIPT = (
    "for p in /sys/class/infiniband/*/ports/*; do test -d \"$p\" || continue; "
    "d=${p%/ports/*}; d=${d##*/}; n=${p##*/}; "
    "ll=$(cat \"$p/link_layer\" 2>/dev/null); "
    "nd=$(cat \"$p/gid_attrs/ndevs/0\" 2>/dev/null); "
    "mtu=; test -n \"$nd\" && mtu=$(cat \"/sys/class/net/$nd/mtu\" 2>/dev/null); "
    "tos=$(cat \"/sys/kernel/config/rdma_cm/$d/ports/$n/default_roce_tos\" 2>/dev/null); "
    "echo \"$d|$n|$ll|$nd|$mtu|$tos\"; done"
)


class RocePorts(ListFact[RdmaPortInfo]):
    """Every RDMA port, sorted as sysfs lists them; [] without RDMA devices."""

    @override
    def command(self) -> str:
        return _SCRIPT

    @override
    def process(self, output: list[str]) -> list[RdmaPortInfo]:
        out: list[RdmaPortInfo] = []
        for line in output:
            parts = line.strip().split("|")
            if len(parts) != 6 or not parts[1].isdigit():
                continue
            device, port, layer, netdev, mtu, tos = parts
            out.append(RdmaPortInfo(device=device, port=int(port), link_layer=layer,
                                    netdev=netdev or None,
                                    mtu=digits(mtu),
                                    tos=digits(tos)))
        return out
