"""Move nodes to a new driver: ``pyinfra inventory.py deploy/upgrade_driver.py
--data nvidia_driver_version=570.172.08 [--data nvidia_driver_allow_reboot=true]``.

Runs the driver and fabric manager roles only (the fabric manager must follow the driver
exactly), then the gate. Nodes with GPU processes are refused unless drained first
(deploy/drain.py, or ``--data nvidia_driver_drained=true`` once their jobs are gone); use
``--serial`` or ``--limit`` to roll through a partition.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "deploy"))

from join import join_gate  # noqa: E402
from pyinfra.context import host  # noqa: E402
from validate import validate_gate  # noqa: E402

import nodegate.pyinfra_compat  # noqa: E402, F401  (a lost SSH connection fails that host only)
from roles.fabricmanager import fabricmanager  # noqa: E402
from roles.nvidia_driver import nvidia_driver  # noqa: E402


def upgrade() -> None:
    """Driver, then fabric manager, then the gate, on GPU nodes only."""
    if not host.data.get("nodegate_profile_data"):
        host.noop("not a GPU node (no hardware profile): no driver")
        return
    nvidia_driver()
    if not host.data.get("nodegate_refused"):
        fabricmanager()
    if not host.data.get("nodegate_refused"):
        validate_gate(fail_host=False)
        join_gate()


if "__name__" not in globals():
    upgrade()
