"""Kernel modules with versions: what is loaded now, and what a reboot would load."""

from __future__ import annotations

from typing import TypedDict

from pyinfra.api.command import QuoteString, StringCommand
from pyinfra.api.facts import FactBase
from typing_extensions import override

from nodegate.facts.base import DictFact, key_values


class ModuleInfo(TypedDict):
    version: str | None
    license: str | None
    filename: str | None


class LoadedModuleVersions(DictFact[str, str]):
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
    def process(self, output: list[str]) -> dict[str, str]:
        return key_values(output)


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


#: Asked through NVML with the agent's Python where neither the module's sysfs/proc files nor
#: nvidia-smi exist (the lab's simulated board has only libnvidia-ml).
_NVML_DRIVER = ("import pynvml as n\nn.nvmlInit()\nv = n.nvmlSystemGetDriverVersion()\n"
                "print(v.decode() if isinstance(v, bytes) else v)\n")


class RunningDriverVersion(FactBase[str | None]):
    """The NVIDIA driver version running now (the loaded kernel module), None when no driver
    answers: ``/sys/module/nvidia/version``, else nvidia-smi, else NVML through ``python``.

    Compared with the installed packages it says whether a reboot is due; unlike modinfo it
    also reads a driver whose module this kernel does not show (a container, the lab).
    """

    @override
    def command(self, python: str = "/opt/nodegate/venv/bin/python") -> StringCommand:
        return StringCommand(
            "if test -r /sys/module/nvidia/version; then cat /sys/module/nvidia/version;",
            "elif command -v nvidia-smi >/dev/null 2>&1; then",
            "nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1;",
            "elif test -x", QuoteString(python), "; then",
            QuoteString(python), "-c", QuoteString(_NVML_DRIVER), "2>/dev/null || true;",
            "fi",
        )

    @override
    def process(self, output: list[str]) -> str | None:
        for line in output:
            text = line.strip()
            if text and text[0].isdigit():
                return text
        return None


class BootId(FactBase[str | None]):
    """This boot's id (``/proc/sys/kernel/random/boot_id``): a new one proves a reboot.

    Uptime does not: in a container /proc/uptime is the host kernel's, so pyinfra's
    ``server.reboot`` (it waits for the uptime to drop) waits out its whole timeout there.
    """

    @override
    def command(self) -> str:
        return "cat /proc/sys/kernel/random/boot_id"

    @override
    def process(self, output: list[str]) -> str | None:
        return output[0].strip() if output and output[0].strip() else None
