"""The lab tests' one lab: built (base included, on a fresh machine) once per session.

Skips with the reason when the machine cannot host a lab: not root, no systemd-nspawn or
mmdebstrap, or another lab is in the way. The lab's network (bridge, 10.77.7.0/24, the
uplink veth) is global to this machine, so only one lab can run at a time whatever
``NODEGATE_LAB_DIR`` says: the tests never tear down a lab they did not bring up, and they
stay away from the default lab while ``/tmp/nodegate-lab-in-use`` exists (made by whoever
deploys to it). ``NODEGATE_LAB_INSTANCE=1 pytest tests/lab`` runs a second lab beside it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

IN_USE = Path("/tmp/nodegate-lab-in-use")


def lab_skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "the lab needs root (namespaces, mounts, loop devices)"
    for tool in ("systemd-nspawn", "mmdebstrap", "ip", "ssh", "losetup"):
        if shutil.which(tool) is None:
            return f"{tool} missing: install lab/src/nodegate_lab/host-packages.txt"
    return None


def lab_busy_reason() -> str | None:
    """Why bringing a lab up now would disturb someone else's, or None."""
    from nodegate_lab import config, lab

    if IN_USE.exists() and config.INSTANCE == 0:  # the shared default lab only
        return f"{IN_USE} exists: someone is deploying to the lab"
    if lab.existing_members():
        return "a lab is already up here; `nodegate-lab down` first (its network is global)"
    if Path("/sys/class/net", config.UPLINK).exists() or \
            Path("/run/netns", config.BRIDGE_NS).exists():
        return (f"another lab's network ({config.UPLINK}, {config.BRIDGE_NS}) is up, "
                "from a different NODEGATE_LAB_DIR")
    return None


@pytest.fixture(scope="session")
def lab_up() -> Iterator[object]:
    """``lab up --nodes 2`` with a fault on node2; ``lab down`` afterwards."""
    reason = lab_skip_reason() or lab_busy_reason()
    if reason:
        pytest.skip(reason)
    from nodegate_lab import lab

    try:
        result = lab.up(2, ["node2:gpu-missing@gpu2"])
        yield result
    finally:
        lab.down()
