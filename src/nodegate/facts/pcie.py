"""PCIe Access Control Services state per bridge, from ``lspci -vvv``."""

from __future__ import annotations

import re

from typing_extensions import override

from nodegate.facts.base import DictFact

_DEVICE = re.compile(r"^(?P<bdf>(?:[0-9a-f]{4}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])\s")


class AcsState(DictFact[str, list[str]]):
    """Bridge BDF -> ACS controls that are enabled (``ACSCtl:`` flags with ``+``).

    An empty list means ACS is off on that bridge, which GPUDirect P2P through a PCIe switch
    needs; bridges without the ACS capability are absent.
    """

    @override
    def requires_command(self) -> str:
        return "lspci"

    @override
    def command(self) -> str:
        return "lspci -D -vvv 2>/dev/null | grep -E '^[0-9a-f]|ACSCtl:'"

    @override
    def process(self, output: list[str]) -> dict[str, list[str]]:
        state: dict[str, list[str]] = {}
        current: str | None = None
        for line in output:
            match = _DEVICE.match(line)
            if match:
                current = match.group("bdf")
                continue
            if current and "ACSCtl:" in line:
                flags = line.split("ACSCtl:", 1)[1].split()
                state[current] = [f.rstrip("+") for f in flags if f.endswith("+")]
        return state
