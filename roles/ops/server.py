"""The node as a whole: a follow-up command, the kernel module's state, and the reboot a driver
or boot setting needs, taken only when nothing runs on the node (pyinfra's
``operations/server.py`` holds the stock ``reboot`` this replaces)."""

from __future__ import annotations

import time
from collections.abc import Generator
from typing import Any

from pyinfra import logger
from pyinfra.api.command import FunctionCommand, StringCommand
from pyinfra.api.host import Host
from pyinfra.api.operation import operation
from pyinfra.context import host
from pyinfra.facts.files import File

from nodegate.cluster.slurm import is_drained
from nodegate.facts.gpu import GpuProcesses, SlurmNodeState, scontrol_failure
from nodegate.facts.kernel import (
    BootId,
    InstalledModule,
    LoadedModuleVersions,
    RunningDriverVersion,
)
from nodegate.versions import Version
from roles.ops.common import fail_here

#: Where a role marks that a boot setting changed (base: kernel arguments, nouveau), so the
#: next allowed reboot takes it.
REBOOT_MARKER = "/run/nodegate/reboot-required"


@operation()
def run_when(command: StringCommand) -> Generator[Any, None, None]:
    """One quoted command, for ``_if=other_op.did_change`` follow-ups (update-grub...)."""
    yield command


def stale_module(module: str) -> tuple[str, str] | None:
    """(loaded, installed) versions of ``module`` when the kernel runs another version than
    the one on disk (a driver change waiting for its reboot), else None."""
    loaded = host.get_fact(LoadedModuleVersions).get(module)
    on_disk = host.get_fact(InstalledModule, module=module)
    if loaded and on_disk and on_disk["version"] and Version(loaded) != Version(on_disk["version"]):
        return str(loaded), str(on_disk["version"])
    return None


def reboot_reasons(module: str, driver_version: str | None = None,
                   python: str | None = None) -> list[str]:
    """Why this node needs a reboot: the loaded module is not the installed one, the running
    driver is not ``driver_version`` (the version the role just installed), or a boot setting
    changed (base role marker). An absent module is not a reason: modprobe loads it."""
    reasons = []
    stale = stale_module(module)
    if stale:
        reasons.append(f"{module} {stale[0]} is loaded but {stale[1]} is installed")
    elif driver_version and python:
        running = host.get_fact(RunningDriverVersion, python=python)
        if running and Version(running) != Version(driver_version):
            reasons.append(f"driver {running} is running but {driver_version} is installed")
    if host.get_fact(File, path=REBOOT_MARKER):
        reasons.append(f"boot settings changed ({REBOOT_MARKER})")
    return reasons


def reboot_refusal(python: str, slurm_node: str, drained_override: bool = False) -> str | None:
    """Why rebooting this node now would hurt work on it, or None when it is safe.

    Safe means no compute process on any GPU and, for a node Slurm knows, drained (any drain
    reason: nodegate's or an administrator's). A node Slurm does not know (no ``scontrol``,
    or not in the cluster yet: a bring-up) runs no jobs. GPU processes that cannot be listed
    while the module is loaded refuse too: unknown is not idle. ``drained_override``
    (``nvidia_driver_drained``) vouches for the drain, never for the processes.
    """
    processes = host.get_fact(GpuProcesses, python=python)
    if processes is None and module_loaded("nvidia"):
        return ("GPU processes cannot be listed (no nvidia-smi, no NVML) while the nvidia "
                "module is loaded")
    if processes:
        listed = ", ".join(f"pid {p['pid']} {p['name']}" for p in processes[:5])
        return f"{len(processes)} GPU process(es) running ({listed}); drain first"
    if drained_override:
        return None
    state = host.get_fact(SlurmNodeState, node=slurm_node)
    failure = scontrol_failure(state)
    if failure:
        return f"Slurm cannot say whether {slurm_node} is drained ({failure}); not rebooting"
    if state and not is_drained(state):
        return f"Slurm node {slurm_node} is {state}, not drained; drain first"
    return None


def module_loaded(module: str) -> bool:
    """Whether ``module`` is loaded in the node's kernel now."""
    return module in host.get_fact(LoadedModuleVersions)


@operation()
def reboot_if_needed(allow: bool, python: str, slurm_node: str, *, drained_override: bool = False,
                     module: str = "nvidia", driver_version: str | None = None,
                     reboot_timeout: int = 900) -> Generator[Any, None, None]:
    """Reboot only when the node needs it, this run allows it, and nothing is running on it.

    The GPU processes and the Slurm state are read in this operation, so while executing they
    are read right before the reboot (they are never kept: nodegate.fact_cache); a busy
    node fails this host with the reason instead.
    """
    reasons = reboot_reasons(module, driver_version, python)
    if not reasons:
        host.noop(f"no reboot needed ({module} loaded = installed)")
        return
    if not allow:
        message = (f"reboot needed but not allowed for this run: {'; '.join(reasons)} "
                   "(rerun with --data nvidia_driver_allow_reboot=true)")
        logger.warning(f"{host.name}: {message}")
        host.noop(message)
        return
    refusal = reboot_refusal(python, slurm_node, drained_override)
    if refusal:
        yield from fail_here(f"reboot refused ({'; '.join(reasons)}): {refusal}")
        return
    yield from reboot_and_wait(reboot_timeout)


def reboot_and_wait(timeout_s: int, interval_s: float = 2.0) -> Generator[Any, None, None]:
    """Reboot and wait, at most ``timeout_s``, until the node answers with a new boot id.

    Not pyinfra's ``server.reboot``: it proves the reboot by a smaller uptime, which never
    comes where /proc/uptime is the host kernel's (a container: the lab), so it waited out
    its whole timeout there. The boot id is new after every boot, on metal and in containers.
    """
    before: list[str | None] = []

    def remember(state: Any, host: Host) -> bool:
        before.append(host.get_fact(BootId))
        return before[0] is not None

    yield FunctionCommand(remember, (), {})
    yield StringCommand("( sleep 1 && reboot ) </dev/null >/dev/null 2>&1 &")

    def wait(state: Any, host: Host) -> bool:
        deadline = time.monotonic() + timeout_s
        time.sleep(min(5.0, timeout_s))
        host.disconnect()
        while time.monotonic() < deadline:
            host.connect(show_errors=False)
            if host.connected:
                now = host.get_fact(BootId)
                if now and now != before[0]:
                    logger.info(f"{host.name}: back after the reboot (boot id {now[:8]})")
                    return True
                host.disconnect()  # still going down: this connection is the old boot's
            time.sleep(interval_s)
        logger.error(f"{host.name}: did not come back with a new boot id within "
                     f"{timeout_s}s of the reboot")
        return False

    yield FunctionCommand(wait, (), {})


__all__ = ["REBOOT_MARKER", "module_loaded", "reboot_and_wait", "reboot_if_needed",
           "reboot_reasons", "reboot_refusal", "run_when", "stale_module"]
