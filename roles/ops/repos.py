"""Package repositories: NVIDIA's keyring package, a mirror's keyring, a DNF module stream;
what has to be in place before ``packages.ensure_packages`` can find a build."""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import Any

from pyinfra.api.operation import operation
from pyinfra.context import host
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.files import File

from nodegate.facts.packages import DnfModuleState
from roles.ops.common import cmd, q
from roles.ops.packages import apt


@operation()
def deb_from_url(package: str, url: str) -> Generator[Any, None, None]:
    """Install a .deb from a URL once (NVIDIA's cuda-keyring), when the package is absent.

    Not pyinfra's ``apt.deb``: it keeps the download in /tmp and reads its version on every run
    to upgrade; a keyring only has to be present, and nothing is left behind."""
    if package in host.get_fact(DebPackages):
        host.noop(f"{package} installed")
        return
    tmp = f"/tmp/nodegate-{package}.deb"
    yield cmd("curl", "-fsSL", "-o", q(tmp), q(url))
    yield apt("apt-get", "install", "-y", "-q", q(tmp))  # waits for the dpkg lock
    yield cmd("rm", "-f", q(tmp))


@operation()
def fetch_keyring(url: str, dest: str) -> Generator[Any, None, None]:
    """An apt keyring from a URL (armoured or not), once."""
    if host.get_fact(File, path=dest):
        host.noop(f"{dest} present")
        return
    yield cmd("mkdir", "-p", q(str(Path(dest).parent)))
    yield cmd("curl", "-fsSL", q(url), "|", "gpg", "--dearmor", "--yes", "-o", q(dest))


@operation()
def dnf_module_stream(module: str, stream: str) -> Generator[Any, None, None]:
    """Enable ``module:stream`` (EL8/9 modularity), resetting another enabled stream first:
    NVIDIA's EL9 repository publishes each driver branch as a stream of ``nvidia-driver``
    (``570-open``, ``570-dkms``), and without it dnf offers only the default stream's
    packages. Not pyinfra's ``dnf.packages``: it has no module support."""
    state = host.get_fact(DnfModuleState, module=module)
    if state.get("stream") == stream and state.get("state") == "enabled":
        host.noop(f"{module}:{stream} enabled")
        return
    if state.get("state") == "enabled":
        yield cmd("dnf", "-y", "-q", "module", "reset", q(module))
    yield cmd("dnf", "-y", "-q", "module", "enable", q(f"{module}:{stream}"))


__all__ = ["deb_from_url", "dnf_module_stream", "fetch_keyring"]
