"""The bring-up: ``pyinfra inventory.py deploy.py``. Every role in order, then the gate.

Roles (roles/*.py, knobs and defaults in roles/defaults.py): base, nvidia_driver,
fabricmanager, nccl, dcgm, nvme, agent, pdu_monitor. Then ``validation_gate`` runs
``nodegate health`` on the node and fetches its JSON report to reports/<host>/ on this machine;
a failing verdict fails the host. The gate issue replaces this hook with deploy/validate.py and
deploy/join.py (full battery, then Slurm join/drain): keep its name and signature.

Common switches: ``--dry`` (plan only), ``--data nvidia_driver_allow_reboot=true``,
``--data gate_enabled=false``, ``--limit HOST``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))

from pyinfra.api.deploy import deploy
from pyinfra.context import host

from roles import _ops
from roles.agent import agent
from roles.base import base
from roles.dcgm import dcgm
from roles.defaults import role_defaults
from roles.fabricmanager import fabricmanager
from roles.nccl import nccl
from roles.nvidia_driver import nvidia_driver
from roles.nvme import nvme
from roles.pdu_monitor import pdu_monitor

ROLES = (base, nvidia_driver, fabricmanager, nccl, dcgm, nvme, agent, pdu_monitor)


@deploy("nodegate validation gate (nodegate health on the node)",
        data_defaults={**role_defaults("gate"), **role_defaults("agent")})
def validation_gate() -> None:
    """Hook for the gate issue: run the quick battery on the node, fetch its report."""
    if not host.data.get("gate_enabled"):
        host.noop("validation gate disabled (gate_enabled=false)")
        return
    _ops.health_gate(name="gate: nodegate health",
                     nodegate_bin=f"{host.data.get('agent_venv')}/bin/nodegate",
                     profile_path=str(host.data.get("agent_profile_path")),
                     fetch_dir=str(host.data.get("gate_fetch_dir")),
                     extra_args=[])


def bring_up() -> None:
    """The roles in order, then the gate; a host refused by a role gets nothing after it."""
    for role in ROLES:
        if host.data.get("nodegate_refused"):
            return
        role()
    if not host.data.get("nodegate_refused"):
        validation_gate()


if "__name__" not in globals() or __name__ == "builtins":
    bring_up()
