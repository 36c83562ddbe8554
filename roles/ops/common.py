"""What every role and entry point shares: the target OS (read once), knob lookup, templates,
shell quoting, and the two ways to stop a host (``refuse`` while preparing, ``verdict`` while
executing).

Branching on the OS happens here and only here: roles ask ``target_os()`` for the package
manager, the initramfs and boot-loader commands, and NVIDIA's repository name, and never
compare distribution names themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pyinfra import logger
from pyinfra.api.command import FunctionCommand, QuoteString, StringCommand
from pyinfra.api.exceptions import DeployError, PyinfraError
from pyinfra.api.host import Host
from pyinfra.context import host
from pyinfra.facts.server import LinuxDistribution

ROOT = Path(__file__).resolve().parents[2]  # the checkout: roles/ops/common.py -> .
TEMPLATES = ROOT / "templates"

Family = Literal["debian", "rhel"]


@dataclass(frozen=True)
class TargetOS:
    """The facts about an OS that the roles act on, decided once per host."""

    family: Family
    distro: str              # ubuntu | debian | rhel | rocky
    major: int
    codename: str | None
    cuda_slug: str           # NVIDIA's repository directory: ubuntu2204, rhel9, debian12
    initramfs: tuple[str, ...]
    mdadm_conf: str
    kernel_headers: str      # package with headers for the running kernel ({kernel} filled)
    python_venv_package: str | None

    @property
    def is_debian(self) -> bool:
        return self.family == "debian"


SUPPORTED = {("ubuntu", 22), ("ubuntu", 24), ("debian", 12), ("rhel", 9), ("rocky", 9),
             ("almalinux", 9)}


def target_os() -> TargetOS:
    """The host's OS from pyinfra's LinuxDistribution fact; unsupported ones stop here."""
    dist = host.get_fact(LinuxDistribution)
    meta = {k.upper(): v for k, v in (dist.get("release_meta") or {}).items()}
    distro = str(meta.get("ID") or dist.get("name") or "").lower().strip('"')
    distro = {"redhat": "rhel"}.get(distro, distro)
    major = dist.get("major")
    if (distro, major) not in SUPPORTED:
        raise DeployError(
            f"{host.name}: unsupported OS {dist.get('name')} {major} (nodegate supports "
            "Ubuntu 22.04/24.04, RHEL/Rocky 9, Debian 12 for the lab)")
    assert isinstance(major, int)
    codename = meta.get("VERSION_CODENAME") or meta.get("CODENAME")
    if distro in ("ubuntu", "debian"):
        return TargetOS(
            family="debian", distro=distro, major=major, codename=codename,
            cuda_slug=f"ubuntu{major}04" if distro == "ubuntu" else f"debian{major}",
            initramfs=("update-initramfs", "-u"), mdadm_conf="/etc/mdadm/mdadm.conf",
            kernel_headers="linux-headers-{kernel}", python_venv_package="python3-venv")
    return TargetOS(
        family="rhel", distro=distro, major=major, codename=None, cuda_slug=f"rhel{major}",
        initramfs=("dracut", "-f", "--regenerate-all"), mdadm_conf="/etc/mdadm.conf",
        kernel_headers="kernel-devel-{kernel}", python_venv_package=None)


def container() -> str | None:
    """The container this node runs in (``systemd-nspawn``...), None on metal or a VM.

    Roles skip what belongs to the host's kernel there (modules, initramfs, boot loader,
    sysctls, PCIe config space), each with a message saying so; decided from the node's
    facts, never from the site's name.
    """
    from nodegate.facts.virt import Container

    value = host.get_fact(Container)
    return str(value) if value else None


def profile() -> dict[str, Any]:
    """This host's resolved profile (inventory.py resolved it), or {} for non-GPU hosts."""
    data = host.data.get("nodegate_profile_data")
    return dict(data) if isinstance(data, dict) else {}


def knob(name: str, profile_path: str | None = None, site: str | None = None) -> Any:
    """A knob: the inventory/group/``--data`` value, else the profile (``driver.version``),
    else the site entry (``nccl.socket_ifname`` = ``nodegate_nccl["socket_ifname"]``).

    Profile- and site-backed knobs default to None in roles/defaults.py, so any non-None
    value here was set by the operator and wins.
    """
    value = host.data.get(name)
    if value is not None:
        return value
    if profile_path:
        value = _dig(profile(), profile_path)
        if value is not None:
            return value
    if site:
        section, _, key = site.partition(".")
        return _dig(host.data.get(f"nodegate_{section}") or {}, key)
    return None


def _dig(data: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(data, dict):
            return None
        data = data.get(part)
    return data


def template(*parts: str) -> str:
    """Absolute path of a template under templates/ (pyinfra renders it with jinja2)."""
    return str(TEMPLATES.joinpath(*parts))


def cmd(*bits: str | QuoteString) -> StringCommand:
    """A shell command whose plain strings are fixed words and QuoteStrings are data."""
    return StringCommand(*bits)


def q(value: object) -> QuoteString:
    """Quote a value for the shell through pyinfra (never f-strings into a command)."""
    return QuoteString(str(value))


#: Why a host was failed (``verdict``, ``refuse``) in this run, by host name (a rollout's
#: summary).
FAILURES: dict[str, str] = {}


def refuse(message: str, target: Host | None = None) -> None:
    """Stop this host (or ``target``, another inventory host a role found wrong) before
    anything changes on it, with a message saying why.

    The host is marked failed during the prepare phase, so none of its operations run while
    the other hosts carry on.
    """
    who = target if target is not None else host
    full = f"{who.name}: nodegate refused: {message}"
    logger.error(full)
    who.data.nodegate_refused = message
    FAILURES[who.name] = message
    try:
        host.state.fail_hosts({who})  # type: ignore[no-untyped-call]
    except PyinfraError as exc:  # the last active host: end the run with our message
        if who is host:
            raise DeployError(full) from exc


def verdict(decide: Callable[[Host], str | None]) -> FunctionCommand:
    """A command that, when it runs, asks ``decide`` and fails this host with the message it
    returns (None: the host carries on). The one way an operation stops its host once the
    run executes; before that, while operations are prepared, ``refuse`` is the one way.

    pyinfra takes a Python command's return value as its status only when the function's
    parameters are literally named ``state`` and ``host``; any other signature's result is
    ignored. That convention is pyinfra's, not public API, so it lives here alone.
    """

    def _verdict(state: Any, host: Host) -> bool:
        message = decide(host)
        if message is None:
            return True
        logger.error(f"{host.name}: {message}")
        FAILURES[host.name] = message
        return False

    return FunctionCommand(_verdict, (), {})


def fail_here(message: str) -> Generator[Any, None, None]:
    """Fail this host at execution time with ``message`` (the other hosts carry on)."""
    yield verdict(lambda _host: message)


def is_deploy_file(namespace: dict[str, Any]) -> bool:
    """True when pyinfra runs a module as a deploy file (``pyinfra inv roles/nccl.py``,
    ``pyinfra inv deploy/join.py``): the one test every role and entry point uses.

    pyinfra executes deploy files without ``__name__`` in their namespace (so a bare
    ``__name__`` there resolves to the builtins module's, ``"builtins"``); an import (from
    deploy.py or a test) has its own, so importing a module never runs it.
    """
    return bool(namespace.get("__name__", "builtins") == "builtins")
