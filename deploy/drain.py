"""Drain nodes in Slurm before maintenance: ``pyinfra inventory.py deploy/drain.py
--data drain_reason="driver upgrade" [--limit HOST]``.

The reason is recorded as ``nodegate: maintenance <reason>`` so nodegate's own periodic health
resumes the node once it passes again; a node already draining is left alone. Then
``--data nvidia_driver_drained=true`` lets deploy/upgrade_driver.py change its driver.
"""

from __future__ import annotations

from pyinfra.api.command import QuoteString, StringCommand
from pyinfra.api.deploy import deploy
from pyinfra.context import host
from pyinfra.operations import server

import nodegate.pyinfra_compat  # noqa: F401  (a lost SSH connection fails that host only)
from nodegate.cluster.slurm import parse_state
from nodegate.facts.gpu import SlurmNodeState
from roles._common import is_deploy_file


@deploy("nodegate drain (Slurm)", data_defaults={"drain_reason": "maintenance"})
def drain() -> None:
    slurm = host.data.get("nodegate_slurm") or {}
    node = slurm.get("node_name")
    if not node:
        host.noop("no Slurm node name in the site data: nothing to drain")
        return
    state = host.get_fact(SlurmNodeState, node=str(node))
    if state is not None and "DRAIN" in parse_state(state)[1]:
        host.noop(f"{node} already {state}")
        return
    reason = f"nodegate: maintenance {host.data.get('drain_reason')}"
    command = StringCommand("scontrol", "update", QuoteString(f"NodeName={node}"),
                            "State=DRAIN", QuoteString(f"Reason={reason}"))
    server.shell(name=f"drain {node} in Slurm", commands=[command])  # type: ignore[list-item]


if is_deploy_file(globals()):
    drain()
