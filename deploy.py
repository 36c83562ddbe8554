"""The bring-up: ``pyinfra inventory.py deploy.py``. Every role in order, then the gate.

Roles (roles/*.py, knobs and defaults in roles/defaults.py): base, nvidia_driver, fabricmanager,
network, nccl, dcgm, nvme, agent, pdu_monitor, slurm_node (off without a controller); the Slurm
controller (a host without a profile) gets slurm_controller (off unless enabled). Then the gate:
deploy/validate.py runs the battery at ``gate_level`` on the node and fetches its JSON report to
reports/<host>/ on this machine, and deploy/join.py resumes the node in Slurm on a fresh pass or
drains it with the failing check as the reason. With ``--data gate_multinode_peer=NODE`` (a node
already in service), deploy/multinode.py runs an all-reduce between each other node and it
before the join, and the join requires it to pass. A failing battery fails the host (after it
was drained).

Common switches: ``--dry`` (plan only), ``--data nvidia_driver_allow_reboot=true``,
``--data gate_enabled=false``, ``--limit HOST``.
"""

from __future__ import annotations

from pyinfra.context import host

import nodegate.pyinfra_compat  # noqa: F401  (a lost SSH connection fails that host only)
from deploy.join import join_gate
from deploy.multinode import multinode_gate
from deploy.validate import validate_gate
from roles.agent import agent
from roles.base import base
from roles.dcgm import dcgm
from roles.defaults import DEFAULTS
from roles.fabricmanager import fabricmanager
from roles.nccl import nccl
from roles.network import network
from roles.nvidia_driver import nvidia_driver
from roles.nvme import nvme
from roles.ops.common import is_deploy_file
from roles.pdu_monitor import pdu_monitor
from roles.slurm_controller import slurm_controller
from roles.slurm_node import slurm_node

ROLES = (base, nvidia_driver, fabricmanager, network, nccl, dcgm, nvme, agent, pdu_monitor,
         slurm_node)


def bring_up() -> None:
    """The roles in order, then the gate; a host refused by a role gets nothing after it.

    Hosts without a hardware profile (the Slurm controller, a mirror) are not GPU nodes: they
    get slurm_controller only, which acts where ``slurm_controller_enabled`` is set (its drain
    of new nodes is an earlier operation than their slurmd start: roles/slurm_controller.py)."""
    if not host.data.get("nodegate_profile_data"):
        slurm_controller()
        return
    for role in ROLES:
        if host.data.get("nodegate_refused"):
            return
        role()
    if host.data.get("nodegate_refused") or not host.data.get("gate_enabled",
                                                              DEFAULTS["gate_enabled"]):
        return
    if not host.data.get("gate_join", DEFAULTS["gate_join"]):
        validate_gate()
        multinode_gate()
        return
    # a failing battery must still reach the join gate, which drains the node in Slurm and
    # then fails the host
    validate_gate(fail_host=False)
    multinode_gate(fail_host=False)
    join_gate()


if is_deploy_file(globals()):
    bring_up()
