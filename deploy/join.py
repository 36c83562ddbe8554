"""Join validated nodes to Slurm, drain the others: ``pyinfra inventory.py deploy/join.py``.

On each GPU node, ``nodegate gate --mode join`` reads the node's own latest report for
``gate_level``: a fresh PASS resumes the node (``scontrol update State=RESUME``), anything else
drains it with ``nodegate: <first failing check>``. With ``gate_multinode_peer`` set, every node
but the peer must also have a fresh passing ``multinode`` report (deploy/multinode.py). An
administrator's drain is never touched.
Idempotent: a node already in the right state counts as no change.
"""

from __future__ import annotations

from pyinfra.api.deploy import deploy
from pyinfra.context import host

import nodegate.pyinfra_compat  # noqa: F401  (a lost SSH connection fails that host only)
from roles.defaults import role_defaults
from roles.ops import gate
from roles.ops.common import is_deploy_file
from roles.ops.slurm import slurm_member


@deploy("nodegate join (Slurm resume or drain from the node's report)",
        data_defaults={**role_defaults("gate"), **role_defaults("agent")})
def join_gate() -> None:
    node = slurm_member()
    if not host.data.get("nodegate_profile") or not node:
        host.noop("no GPU profile or no Slurm node name: nothing to join")
        return
    if not host.data.get("gate_join"):
        host.noop("join disabled (gate_join=false)")
        return
    peer = host.data.get("gate_multinode_peer")
    # the multi-node check judges the other nodes against the peer, so the peer needs none
    require = ("multinode",) if peer and peer != host.name else ()
    gate.join_gate(name="gate: Slurm join/drain",
                   nodegate_bin=f"{host.data.get('agent_venv')}/bin/nodegate",
                   level=str(host.data.get("gate_level")), node=node,
                   report_dir=str(host.data.get("agent_report_dir")), require=require)


if is_deploy_file(globals()):
    join_gate()
