"""One cgroup subtree per lab host, so the hosts' systemds never share unit cgroups.

This machine's PID 1 is not systemd and nspawn runs with ``--keep-unit``, so every nspawn
starts in the root cgroup and makes its ``supervisor``/``payload`` subgroups there: all
containers then got ``/payload`` as their cgroup namespace root and every guest systemd used
the same ``/system.slice/<unit>.service``. When 8 hosts started a short oneshot
(nvidia-persistenced) in lockstep, one guest removed the emptied cgroup while another was
attaching its child to it: ``status=219/CGROUP``, "Failed to attach to cgroup ...: No such
file or directory", and the deploy failed on a random subset of hosts.

The supervisor moves itself into ``nodegate-lab<N>/<host>`` in each writable hierarchy
(cgroup2, and name=systemd on a hybrid setup) before it starts nspawn, which then nests its
subgroups there; ``lab down`` removes those subtrees.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from nodegate_lab import config

MOUNTS = Path("/proc/self/mounts")


def hierarchies(mounts: str | None = None) -> list[Path]:
    """Mount points of the cgroup hierarchies systemd writes: cgroup2 and v1 name=systemd."""
    text = MOUNTS.read_text() if mounts is None else mounts
    found: list[Path] = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        target, fstype, options = fields[1], fields[2], fields[3].split(",")
        systemd_writes = fstype == "cgroup2" or (fstype == "cgroup" and "name=systemd" in options)
        if systemd_writes and "ro" not in options:
            found.append(Path(target))
    return found


def instance_group() -> str:
    """This lab instance's parent cgroup (relative to a hierarchy root)."""
    return f"nodegate-lab{config.INSTANCE}"


def host_group(host: str) -> str:
    """One host's cgroup (relative to a hierarchy root): ``nodegate-lab<N>/<host>``."""
    return f"{instance_group()}/{host}"


def enter(group: str, pid: int | None = None, roots: list[Path] | None = None) -> list[Path]:
    """Move ``pid`` (default: this process) into ``group`` in every writable hierarchy.

    Returns the cgroup directories it joined; raises OSError when one cannot be made or
    joined (the caller must not boot a host into the shared root cgroup).
    """
    joined: list[Path] = []
    for root in hierarchies() if roots is None else roots:
        target = root / group
        target.mkdir(parents=True, exist_ok=True)
        (target / "cgroup.procs").write_text(f"{pid or os.getpid()}\n")
        joined.append(target)
    return joined


def remove(group: str, roots: list[Path] | None = None, wait_s: float = 3.0) -> list[str]:
    """rmdir ``group`` and everything under it, deepest first, in every hierarchy; the
    paths that could not be removed (a process still in them after ``wait_s``: a stopped
    supervisor may take a moment to exit) are returned."""
    deadline = time.monotonic() + wait_s
    while True:
        left = _remove_once(group, roots)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def _remove_once(group: str, roots: list[Path] | None) -> list[str]:
    left: list[str] = []
    for root in hierarchies() if roots is None else roots:
        top = root / group
        if not top.is_dir():
            continue
        dirs = sorted((p for p in top.rglob("*") if p.is_dir()),
                      key=lambda p: len(p.parts), reverse=True)
        for path in [*dirs, top]:
            try:
                path.rmdir()
            except FileNotFoundError:
                continue
            except OSError:
                left.append(str(path))
    return left


def leftovers(roots: list[Path] | None = None) -> list[str]:
    """This instance's cgroup directories still present (``lab down`` must leave none)."""
    return [f"cgroup {root / instance_group()}"
            for root in (hierarchies() if roots is None else roots)
            if (root / instance_group()).is_dir()]
