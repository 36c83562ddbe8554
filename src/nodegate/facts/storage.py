"""mdadm arrays and superblocks, filesystem UUIDs: what the nvme role must never destroy."""

from __future__ import annotations

import re
from typing import TypedDict

from pyinfra.api.command import QuoteString, StringCommand
from pyinfra.api.facts import FactBase
from typing_extensions import override

from nodegate.facts.base import DictFact, key_values


class MdArray(TypedDict):
    uuid: str
    name: str | None
    level: str | None


class MdArrays(DictFact[str, MdArray]):
    """Assembled arrays, ``mdadm --detail --scan``: device -> uuid, name, level."""

    @override
    def requires_command(self) -> str:
        return "mdadm"

    @override
    def command(self) -> str:
        return "mdadm --detail --scan 2>/dev/null || true"

    @override
    def process(self, output: list[str]) -> dict[str, MdArray]:
        arrays: dict[str, MdArray] = {}
        for line in output:
            parts = line.split()
            if len(parts) < 2 or parts[0] != "ARRAY":
                continue
            fields = dict(p.split("=", 1) for p in parts[2:] if "=" in p)
            arrays[parts[1]] = {"uuid": fields.get("UUID", ""), "name": fields.get("name"),
                                "level": fields.get("level")}
        return arrays


class MdSuperblocks(DictFact[str, str]):
    """Member device -> array UUID for every given device that carries an md superblock.

    Read with ``mdadm --examine`` so an array that is not assembled (fresh boot, missing
    mdadm.conf) is still found: its disks are never reused for a new array.
    """

    @override
    def requires_command(self, devices: list[str]) -> str:
        return "mdadm"

    @override
    def command(self, devices: list[str]) -> StringCommand:
        bits: list[object] = ["for", "d", "in"]
        bits += [QuoteString(d) for d in devices]
        bits += ["; do", "u=$(mdadm --examine --brief \"$d\" 2>/dev/null | "
                 "sed -n 's/.*UUID=\\([^ ]*\\).*/\\1/p' | head -n1);",
                 "test -n \"$u\" && echo \"$d $u\";", "done;", "true"]
        return StringCommand(*bits)

    @override
    def process(self, output: list[str]) -> dict[str, str]:
        return key_values(output, last=True)  # a device path may hold a space


class BlockId(TypedDict, total=False):
    UUID: str
    TYPE: str


_KV = re.compile(r'(\w+)="([^"]*)"')


class Blkid(FactBase[BlockId | None]):
    """``blkid`` of one device: filesystem UUID and TYPE, or None when it holds none."""

    @override
    def requires_command(self, device: str) -> str:
        return "blkid"

    @override
    def command(self, device: str) -> StringCommand:
        return StringCommand("blkid", "-o", "full", QuoteString(device), "2>/dev/null", "||",
                             "true")

    @override
    def process(self, output: list[str]) -> BlockId | None:
        found: BlockId = {}
        for key, value in _KV.findall(" ".join(output)):
            if key in ("UUID", "TYPE"):
                found[key] = value  # type: ignore[literal-required]
        return found or None
