"""The lab tests' one lab: built (base included, on a fresh machine) once per session.

Skips with the reason when the machine cannot host a lab: not root, no systemd-nspawn or
debootstrap, or a lab someone else brought up is running (the lab's network is global).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest


def lab_skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "the lab needs root (namespaces, mounts, loop devices)"
    for tool in ("systemd-nspawn", "debootstrap", "ip", "ssh", "losetup"):
        if shutil.which(tool) is None:
            return f"{tool} missing: install src/nodegate/lab/host-packages.txt"
    return None


@pytest.fixture(scope="session")
def lab_up() -> Iterator[object]:
    """``lab up --nodes 2`` with a fault on node2; ``lab down`` afterwards."""
    reason = lab_skip_reason()
    if reason:
        pytest.skip(reason)
    from nodegate.lab import lab

    if lab.existing_members():
        pytest.skip("a lab is already up here; `nodegate lab down` first (its network is global)")
    result = lab.up(2, ["node2:gpu-missing@gpu2"])
    try:
        yield result
    finally:
        lab.down()
