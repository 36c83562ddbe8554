"""Drain nodes in Slurm before maintenance: ``pyinfra inventory.py deploy/drain.py
--data drain_reason="driver upgrade" [--limit HOST]``.

The node's own ``nodegate hold --maintenance <reason>`` drains it ``nodegate: maintenance
<reason>``, recorded in the node's holds record (``nodegate.cluster.holds``) and
compare-and-set like every drain nodegate makes. A maintenance hold is lifted only by a
re-qualification after the change (a passing standard or acceptance report newer than the
hold, at a join or the next gate run) or by a person: a passing quick health check never
lifts it. A node already draining is left alone. Then ``--data nvidia_driver_drained=true``
lets deploy/upgrade_driver.py change its driver.
"""

from __future__ import annotations

from pyinfra.api.command import QuoteString, StringCommand
from pyinfra.api.deploy import deploy
from pyinfra.context import host
from pyinfra.operations import server

import nodegate.pyinfra_compat  # noqa: F401  (a lost SSH connection fails that host only)
from nodegate.cluster.slurm import parse_state
from nodegate.facts.gpu import SlurmNodeState, scontrol_failure
from roles.defaults import role_defaults
from roles.ops.common import is_deploy_file, refuse
from roles.ops.slurm import slurm_member


@deploy("nodegate drain (Slurm)", data_defaults={**role_defaults("agent"),
                                                 "drain_reason": "maintenance"})
def drain() -> None:
    node = slurm_member()
    if not node:
        host.noop("not a Slurm node (no slurm.node_name, no slurm_node_controller): "
                  "nothing to drain")
        return
    state = host.get_fact(SlurmNodeState, node=node)
    failure = scontrol_failure(state)
    if failure or state is None:
        refuse(f"cannot drain {node}: "
               + (failure or "Slurm does not know it (or no scontrol here)"))
        return
    if "DRAIN" in parse_state(state)[1]:
        host.noop(f"{node} already {state}")
        return
    nodegate = f"{host.data.get('agent_venv')}/bin/nodegate"
    command = StringCommand(QuoteString(nodegate), "hold", "--node", QuoteString(node),
                            "--maintenance", QuoteString(str(host.data.get("drain_reason"))))
    server.shell(name=f"drain {node} in Slurm", commands=[command])  # type: ignore[list-item]


if is_deploy_file(globals()):
    drain()
