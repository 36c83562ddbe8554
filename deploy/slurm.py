"""The Slurm cluster alone: ``pyinfra inventory.py deploy/slurm.py``.

slurm_controller on the host that has ``slurm_controller_enabled`` (slurmctld, slurm.conf and
gres.conf from the inventory, new nodes drained ``nodegate: not validated``), then slurm_node
on every GPU node (configless slurmd). pyinfra runs the k-th operation of every host
together; the controller's drain is an earlier operation than any node's first slurmd start
(roles/slurm_controller.py), so a new node registers already drained. ``nodegate-lab up``
runs this file; deploy.py runs the same roles inside the full bring-up.
"""

from __future__ import annotations

from pyinfra.context import host

import nodegate.pyinfra_compat  # noqa: F401  (a lost SSH connection fails that host only)
from roles.ops.common import is_deploy_file
from roles.slurm_controller import slurm_controller
from roles.slurm_node import slurm_node


def slurm() -> None:
    """The controller role on hosts without a hardware profile, slurm_node on GPU nodes."""
    if not host.data.get("nodegate_profile_data"):
        slurm_controller()
        return
    slurm_node()


if is_deploy_file(globals()):
    slurm()
