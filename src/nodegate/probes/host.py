"""Operating-system state the battery's host group judges: modules, services, packages,
kernel command line, PCIe ACS, /etc/nccl.conf, the NVMe array and its mount.

Every read goes through ``HostProbe(root)`` so tests point it at a captured tree; on a node
the root is ``/``. Services and packages are asked of systemctl and dpkg-query/rpm, whose
answers are what an operator would see.
"""

from __future__ import annotations

import gzip
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

PCI_EXT_CAP_ACS = 0x000D
#: ACS control bits that break GPU peer-to-peer when set on a bridge above the GPUs:
#: source validation, translation blocking, P2P request redirect, completion redirect,
#: upstream forwarding, egress control.
ACS_P2P_BREAKING_BITS = 0x003F


class AcsUnreadable(Exception):
    """A bridge's extended config space could not be read, so ACS is unknown, not absent."""


@dataclass(frozen=True)
class KernelConfig:
    """The running kernel's build options and the file they came from."""

    path: str
    options: dict[str, str]


@dataclass(frozen=True)
class MdArray:
    name: str
    level: str
    state: str  # "active" / "inactive"
    devices: list[str]
    healthy: bool  # every member up ([UU..])


@dataclass(frozen=True)
class Mount:
    device: str
    mountpoint: str
    fstype: str
    options: list[str]


class HostProbe:
    def __init__(self, root: Path = Path("/"), *, run_commands: bool = True) -> None:
        self.root = root
        self.run_commands = run_commands

    def _read(self, path: str) -> str | None:
        try:
            return (self.root / path.lstrip("/")).read_text(errors="replace")
        except OSError:
            return None

    def loaded_modules(self) -> set[str]:
        text = self._read("/proc/modules") or ""
        return {line.split()[0] for line in text.splitlines() if line.strip()}

    def module_version(self, module: str) -> str | None:
        text = self._read(f"/sys/module/{module}/version")
        return text.strip() if text else None

    def container(self) -> str | None:
        """The container manager when this host is a container (systemd writes the file)."""
        text = self._read("/run/systemd/container")
        return text.strip() or None if text is not None else None

    def kernel_cmdline(self) -> list[str]:
        return (self._read("/proc/cmdline") or "").split()

    def kernel_release(self) -> str | None:
        """``uname -r`` of the running kernel (the name of its /boot/config file)."""
        text = self._read("/proc/sys/kernel/osrelease")
        return text.strip() or None if text is not None else None

    def kernel_config(self) -> KernelConfig | None:
        """The running kernel's .config: /boot/config-$(uname -r), else /proc/config.gz.

        None when neither can be read (the answer is unknown, not "unsupported")."""
        release = self.kernel_release()
        if release:
            text = self._read(f"/boot/config-{release}")
            if text is not None:
                return KernelConfig(f"/boot/config-{release}", _parse_config(text))
        try:
            raw = (self.root / "proc/config.gz").read_bytes()
            text = gzip.decompress(raw).decode(errors="replace")
        except (OSError, EOFError, gzip.BadGzipFile):
            return None
        return KernelConfig("/proc/config.gz", _parse_config(text))

    def nvidia_module_flavour(self) -> str | None:
        """"open" or "proprietary" for the loaded nvidia module; None when unknown.

        The loaded module names itself in /proc/driver/nvidia/version ("NVIDIA UNIX Open
        Kernel Module for x86_64 ..." for the open modules); the module on disk says so in
        its license (``modinfo``: "Dual MIT/GPL" open, "NVIDIA" proprietary)."""
        text = self._read("/proc/driver/nvidia/version")
        if text and "NVRM version" in text:
            return "open" if "Open Kernel Module" in text else "proprietary"
        license_ = self._command(["modinfo", "-F", "license", "nvidia"])
        if license_ == "Dual MIT/GPL":
            return "open"
        if license_ == "NVIDIA":
            return "proprietary"
        return None

    def _command(self, argv: list[str], timeout_s: float = 10.0) -> str | None:
        if not self.run_commands:
            return None
        exe = shutil.which(argv[0])
        if exe is None:
            return None
        try:
            proc = subprocess.run([exe, *argv[1:]], capture_output=True, text=True,
                                  timeout=timeout_s, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return proc.stdout.strip()

    def service_state(self, unit: str) -> str | None:
        """systemctl is-active: active, inactive, failed...; None when there is no systemd."""
        return self._command(["systemctl", "is-active", unit]) or None

    def package_version(self, package: str) -> str | None:
        out = self._command(["dpkg-query", "-W", "-f=${Status}|${Version}", package])
        if out and "|" in out:
            status, version = out.split("|", 1)
            return version if status.endswith(" installed") else None
        out = self._command(["rpm", "-q", "--qf", "%{VERSION}-%{RELEASE}", package])
        if out and "not installed" not in out:
            return out
        return None

    def nccl_conf(self) -> dict[str, str] | None:
        text = self._read("/etc/nccl.conf")
        if text is None:
            return None
        out = {}
        for raw in text.splitlines():
            line = raw.split("#", 1)[0].strip()
            if "=" in line:
                key, value = line.split("=", 1)
                out[key.strip()] = value.strip()
        return out

    def md_arrays(self) -> list[MdArray]:
        text = self._read("/proc/mdstat") or ""
        arrays: list[MdArray] = []
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if not line.startswith("md"):
                continue
            name, _, rest = line.partition(" : ")
            fields = rest.split()
            state = fields[0] if fields else "unknown"
            level = fields[1] if len(fields) > 1 and state == "active" else "unknown"
            devices = [f.split("[")[0] for f in fields[2:]] if state == "active" else []
            status = lines[i + 1] if i + 1 < len(lines) else ""
            healthy = state == "active" and ("_" not in status.split("[")[-1]
                                             if "[" in status else True)
            arrays.append(MdArray(name.strip(), level, state, devices, healthy))
        return arrays

    def mounts(self) -> list[Mount]:
        text = self._read("/proc/mounts") or ""
        out = []
        for line in text.splitlines():
            parts = line.split()
            if len(parts) >= 4:
                out.append(Mount(parts[0], parts[1], parts[2], parts[3].split(",")))
        return out

    def pci_bridges_above(self, bus_id: str) -> list[str]:
        """BDFs of the PCIe bridges between a GPU and the root complex (sysfs path walk)."""
        device = self.root / "sys/bus/pci/devices" / bus_id.lower()
        try:
            real = device.resolve(strict=True)
        except OSError:
            return []
        bridges = []
        for parent in real.parents:
            name = parent.name
            if name.startswith("pci"):
                break
            if ":" in name and "." in name:
                bridges.append(name)
        return bridges

    def acs_control(self, bdf: str) -> int | None:
        """The ACS control register of a PCIe function, read from its config space; None
        when the function has no ACS capability.

        Raises AcsUnreadable when the extended config space cannot be seen: sysfs gives
        non-root readers only the first 64 bytes, and a function that stopped answering reads
        all ones. Either way ACS is unknown, which must not look like "no ACS"."""
        path = self.root / "sys/bus/pci/devices" / bdf / "config"
        try:
            config = path.read_bytes()
        except OSError as exc:
            raise AcsUnreadable(f"{path.relative_to(self.root)}: {exc.strerror or exc}") \
                from exc
        if len(config) <= 64:
            raise AcsUnreadable(f"only {len(config)} bytes of config space readable "
                                "(extended capabilities need root)")
        if len(config) <= 0x100:
            return None  # conventional config space only: no extended capabilities, no ACS
        offset = 0x100
        seen = 0
        while offset >= 0x100 and offset + 8 <= len(config) and seen < 64:
            header = int.from_bytes(config[offset:offset + 4], "little")
            if header == 0xFFFFFFFF:
                raise AcsUnreadable("extended config space reads all ones "
                                    "(function not answering)")
            if header == 0:
                return None
            if header & 0xFFFF == PCI_EXT_CAP_ACS:
                return int.from_bytes(config[offset + 6:offset + 8], "little")
            offset = (header >> 20) & 0xFFC
            seen += 1
        return None


def _parse_config(text: str) -> dict[str, str]:
    """``CONFIG_X=y`` lines; "# CONFIG_X is not set" lines are simply absent."""
    out = {}
    for line in text.splitlines():
        if line.startswith("CONFIG_") and "=" in line:
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out
