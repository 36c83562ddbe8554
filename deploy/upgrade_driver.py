"""Move nodes to a new driver: ``pyinfra inventory.py deploy/upgrade_driver.py
--data nvidia_driver_version=570.172.08 [--data nvidia_driver_allow_reboot=true]``.

Runs the driver and fabric manager roles only (the fabric manager must follow the driver
exactly), then the gate. Nodes with GPU processes are refused unless drained first
(deploy/drain.py, or ``--data nvidia_driver_drained=true`` once their jobs are gone); use
``--serial`` or ``--limit`` to roll through a partition.
"""

from __future__ import annotations

from pyinfra.context import host

import nodegate.pyinfra_compat  # noqa: F401  (a lost SSH connection fails that host only)
from deploy.join import join_gate
from deploy.validate import validate_gate
from roles.fabricmanager import fabricmanager
from roles.nvidia_driver import nvidia_driver


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
