"""One lab per machine: a lock that serialises ``up``/``down`` and records who owns the network;
one user per md rehearsal VM directory (``vm_exclusive``).

The lab's network names (``ngl-*`` namespaces, ``ngl0``, 10.77.7.0/24) are machine-wide, but
``NODEGATE_LAB_DIR`` can point two checkouts at two lab dirs. Without this, a ``down`` from one
dir would tear the network out from under the other's running hosts, and two ``up`` runs at
once (several engineers share a machine) would race on the same links. A second lab beside
the first needs its own ``NODEGATE_LAB_INSTANCE``: its own names, subnet and lock.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from pathlib import Path

from nodegate import flock
from nodegate.errors import CannotRunError
from nodegate_lab import config

_TAG = str(config.INSTANCE) if config.INSTANCE else ""
#: Per lab instance (NODEGATE_LAB_INSTANCE): each instance has its own network names.
LOCK_FILE = Path(f"/run/nodegate-lab{_TAG}.lock")
OWNER_FILE = Path(f"/run/nodegate-lab{_TAG}.owner")
WAIT_S = 600.0


@contextlib.contextmanager
def exclusive(what: str, wait_s: float = WAIT_S) -> Iterator[None]:
    """Hold the machine's lab lock for ``what``; wait for another ``up``/``down`` to finish."""
    with flock.exclusive(
            LOCK_FILE, what="lab lock", wait_s=wait_s,
            busy=lambda pid: f"lab {what}: another `nodegate-lab up/down` (pid {pid}) still "
                             f"holds {LOCK_FILE} after {wait_s:.0f} s",
            on_wait=lambda: print(f"lab {what}: waiting for another `nodegate-lab up/down` "
                                  "to finish", flush=True)):
        yield


@contextlib.contextmanager
def vm_exclusive(directory: Path, wait_s: float = 0.0) -> Iterator[None]:
    """One user of an md VM directory at a time: a second ``mdvm up`` (or test run) would
    kill the first one's VM. A lock in /run per directory, waited for up to ``wait_s``."""
    digest = hashlib.sha256(str(directory.resolve()).encode()).hexdigest()[:8]
    lock = Path("/run") / f"nodegate-mdvm-{directory.name}-{digest}.lock"
    with flock.exclusive(lock, what="VM lock", wait_s=wait_s, poll_s=2.0,
                         busy=lambda pid: f"{directory} is in use (lock {lock}, pid {pid})"):
        yield


def owner() -> str | None:
    """The lab dir whose lab holds the network now, if any."""
    try:
        text = OWNER_FILE.read_text().strip()
    except OSError:
        return None
    return text or None


def claim() -> None:
    """Make this lab dir the network's owner; refuse while another lab dir's lab is up."""
    mine = str(config.lab_dir().resolve())
    current = owner()
    if current is not None and current != mine and (Path(current) / "hosts").is_dir() \
            and any((Path(current) / "hosts").iterdir()):
        raise CannotRunError(f"the lab network ({config.SUBNET_PREFIX}.0/24, "
                             f"{config.NS_PREFIX}*) belongs to the lab in {current}; run "
                             f"`NODEGATE_LAB_DIR={current} nodegate-lab down` first, or use "
                             "another NODEGATE_LAB_INSTANCE")
    OWNER_FILE.write_text(mine + "\n")


def owns_network() -> bool:
    """True when this lab dir may tear the network down (it owns it, or nobody does)."""
    current = owner()
    return current is None or current == str(config.lab_dir().resolve())


def release() -> None:
    if owns_network():
        OWNER_FILE.unlink(missing_ok=True)
