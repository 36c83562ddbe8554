"""systemd units: a start that explains its failure, and the units that need the NVIDIA kernel
module (pyinfra's ``operations/systemd.py`` runs the rest: ``systemd.service``)."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from pyinfra.api.command import StringCommand
from pyinfra.api.operation import operation
from pyinfra.context import host
from pyinfra.facts.systemd import SystemdEnabled, SystemdStatus

from roles.ops.common import cmd, container, q
from roles.ops.server import module_loaded, stale_module

JOURNAL_LINES = 20


def start_or_explain(unit: str, lines: int = JOURNAL_LINES) -> StringCommand:
    """``systemctl start`` that, when the unit fails, prints which unit and its last journal
    lines to stderr (pyinfra shows a failed command's output) and fails the host."""
    why = f"nodegate: {unit} failed to start; its last {lines} journal lines:"
    return cmd("systemctl", "start", q(unit), "||", "{", "echo", q(why), ">&2", ";",
               "journalctl", "--no-pager", "-o", "short-precise", "-n", str(lines), "-u",
               q(unit), ">&2", ";", "exit", "1", ";", "}")


@operation()
def driver_service(unit: str, module: str = "nvidia") -> Generator[Any, None, None]:
    """Start and enable a unit that needs the NVIDIA kernel module (nvidia-persistenced).

    Ordered after the driver: on metal the module is loaded first (``modprobe``), and while
    a stale module is loaded (a driver change waiting for its reboot) the unit is only
    enabled, since the new daemon cannot talk to the old module; it starts at that boot.
    A start that fails names the unit and its journal lines and fails the host.
    """
    start = not host.get_fact(SystemdStatus, services=[unit]).get(unit)
    if not start:
        host.noop(f"{unit} is running")
    elif not container():
        stale = stale_module(module)
        if stale:
            host.noop(f"{unit} starts at the next boot: {module} {stale[0]} is loaded but "
                      f"{stale[1]} is installed")
            start = False
        elif not module_loaded(module):
            yield cmd("modprobe", q(module))
    if start:
        yield start_or_explain(unit)
    if not host.get_fact(SystemdEnabled, services=[unit]).get(unit):
        yield cmd("systemctl", "enable", q(unit))
    else:
        host.noop(f"{unit} is enabled")


__all__ = ["JOURNAL_LINES", "driver_service", "start_or_explain"]
