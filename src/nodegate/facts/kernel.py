"""Kernel modules with versions: what is loaded now, and what a reboot would load."""

from __future__ import annotations

from typing import TypedDict

from pyinfra.api.command import QuoteString, StringCommand
from pyinfra.api.facts import FactBase
from typing_extensions import override


class ModuleInfo(TypedDict):
    version: str | None
    license: str | None
    filename: str | None


class LoadedModuleVersions(FactBase[dict[str, str]]):
    """Loaded module -> version, from ``/sys/module/*/version`` (only modules that have one).

    pyinfra's KernelModules has no versions; the driver role needs the loaded nvidia version
    to decide whether a reboot is due.
    """

    @override
    def command(self) -> str:
        return (
            "for f in /sys/module/*/version; do test -r \"$f\" || continue; "
            "m=${f%/version}; echo \"${m##*/} $(cat \"$f\")\"; done"
        )

    @override
    @staticmethod
    def default() -> dict[str, str]:
        return {}

    @override
    def process(self, output: list[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        for line in output:
            name, _, version = line.strip().partition(" ")
            if name and version:
                out[name] = version.strip()
        return out


class InstalledModule(FactBase[ModuleInfo | None]):
    """``modinfo`` of a module on disk for the running kernel: version, license, file.

    The license tells open ("Dual MIT/GPL") from proprietary ("NVIDIA") kernel modules.
    """

    @override
    def requires_command(self, module: str) -> str:
        return "modinfo"

    @override
    def command(self, module: str) -> StringCommand:
        return StringCommand("modinfo", QuoteString(module), "2>/dev/null", "||", "true")

    @override
    def process(self, output: list[str]) -> ModuleInfo | None:
        info: ModuleInfo = {"version": None, "license": None, "filename": None}
        for line in output:
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("version", "license", "filename") and info[key] is None:  # type: ignore[literal-required]
                info[key] = value.strip()  # type: ignore[literal-required]
        return info if info["filename"] else None
