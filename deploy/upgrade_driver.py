"""Move nodes to a new driver: ``pyinfra inventory.py deploy/upgrade_driver.py
--data nvidia_driver_version=580.65.06 --data nvidia_driver_allow_reboot=true``.

Everything that follows from the version moves with it: the driver (its branch taken from the
version when only the version is given), the fabric manager and NSCQ of that branch, and the
profile the agent installed (/etc/nodegate/profile.json), so the node is then judged at the
new pins. Before any package moves, the version the node leaves is recorded on it
(/var/lib/nodegate/upgrade.json) and the node is drained ``nodegate: upgrade <from> -> <to>``
(an administrator's drain is kept); the periodic health leaves such a node alone. Then the
reboot (when the running driver is not the installed one, the run allows it and nothing runs
on the GPUs), the gate at ``gate_level``, and the join: a pass resumes the node, a failure
drains it with the failing check. A failed install leaves it drained with the upgrade reason.

Nodes with GPU processes are refused unless drained first (deploy/drain.py, or
``--data nvidia_driver_drained=true`` once their jobs are gone). For a partition in batches,
with a wait for running jobs, use deploy/rolling_upgrade.py.
"""

from __future__ import annotations

from typing import Any

from pyinfra.api.deploy import deploy
from pyinfra.context import host

import nodegate.pyinfra_compat  # noqa: F401  (a lost SSH connection fails that host only)
from deploy.join import join_gate
from deploy.validate import validate_gate
from roles.agent import agent
from roles.defaults import role_defaults
from roles.fabricmanager import fabricmanager
from roles.nvidia_driver import desired, driver_packages, gpu_busy_reason, nvidia_driver
from roles.ops.common import is_deploy_file, knob, target_os
from roles.ops.packages import package_plan
from roles.ops.slurm import slurm_node_name
from roles.ops.upgrade import begin_upgrade, installed_driver, open_upgrade_from


@deploy("nodegate upgrade: record the driver left, drain",
        data_defaults=role_defaults("nvidia_driver"))
def begin() -> bool:
    """Record and drain when the driver packages are not at the target yet; False when they
    are (nothing to begin)."""
    os_ = target_os()
    _branch, version, modules = desired()
    packages = list(knob("nvidia_driver_packages") or driver_packages(
        os_, str(knob("nvidia_driver_source")), _branch, modules))
    wrong, _unheld = package_plan(os_, packages, version)
    if not wrong or gpu_busy_reason(str(knob("nvidia_driver_python"))):
        return False  # nothing to do, or the driver role refuses the busy node next
    node = slurm_node_name()
    previous = open_upgrade_from(node) or installed_driver(os_, packages, _branch)
    begin_upgrade(name=f"upgrade: record the driver left and drain ({version})",
                  node=node, previous=previous, target=version)
    return True


def upgrade_node(**guard: Any) -> None:
    """Driver, fabric manager, the agent's profile, then the gate and the join. ``guard``:
    pyinfra global arguments (``_if``) for every operation (the rolling upgrade's)."""
    nvidia_driver(**guard)
    if host.data.get("nodegate_refused"):
        return
    fabricmanager(**guard)
    if host.data.get("nodegate_refused"):
        return
    agent(**guard)
    validate_gate(fail_host=False, **guard)
    join_gate(**guard)


def upgrade() -> None:
    if not host.data.get("nodegate_profile_data"):
        host.noop("not a GPU node (no hardware profile): no driver")
        return
    begin()
    upgrade_node()


if is_deploy_file(globals()):
    upgrade()
