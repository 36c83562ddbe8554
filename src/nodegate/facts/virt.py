"""Whether the node is a container: what a role may not touch there (the kernel is the host's)."""

from __future__ import annotations

from pyinfra.api.facts import FactBase
from typing_extensions import override


class Container(FactBase[str | None]):
    """The container technology the node runs in (``systemd-nspawn``, ``docker``, ``lxc``...),
    from ``systemd-detect-virt --container``; None on bare metal or a VM.

    Inside a container the kernel, its modules, the initramfs, the boot loader and PCIe
    config space belong to the host, so the roles skip them (with a message) instead of
    failing.
    """

    @override
    def command(self) -> str:
        return ("systemd-detect-virt --container 2>/dev/null || "
                "{ test -f /run/.containerenv && echo podman; } || "
                "{ test -f /.dockerenv && echo docker; } || true")

    @override
    @staticmethod
    def default() -> str | None:
        return None

    @override
    def process(self, output: list[str]) -> str | None:
        value = output[0].strip() if output else ""
        return None if value in ("", "none") else value
