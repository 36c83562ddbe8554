"""Multi-node collectives with a known-good node:
``pyinfra inventory.py deploy/multinode.py --data gate_multinode_peer=NODE``.

The GPU hosts of the run other than the peer run with it in groups of
``gate_multinode_group_size`` nodes, the peer included (0, the default: all of them at once, as
a job spanning them would; 2: one pair at a time, so no pair shares the peer's NICs with
another). A group's nodes run ``nodegate multinode --nnodes N`` together over torchrun's
rendezvous at the peer's address: all_reduce, all_gather, reduce_scatter and alltoall. Each
node under test is judged on each collective's bus bandwidth at the profile's size and keeps
the report
(``multinode-latest.json``); ``deploy/join.py`` then requires it to pass. The peer must be a
node already in service: its own result is not judged here.
"""

from __future__ import annotations

from pyinfra.api.deploy import deploy
from pyinfra.api.exceptions import DeployError
from pyinfra.context import host

import nodegate.pyinfra_compat  # noqa: F401  (a lost SSH connection fails that host only)
from roles.defaults import role_defaults
from roles.ops import gate
from roles.ops.common import is_deploy_file


def group_plan(peer: str, gpu_hosts: list[str], size: int = 0) -> list[list[str]]:
    """The new nodes of each group run with ``peer``, in the order the groups run; ``size``
    counts the peer (0: one group of everyone)."""
    others = sorted(name for name in gpu_hosts if name != peer)
    if size == 1 or size < 0:
        raise DeployError(f"gate_multinode_group_size {size}: 0 (all at once) or at least 2")
    per = size - 1 if size else max(1, len(others))
    return [others[i:i + per] for i in range(0, len(others), per)]


def run_hosts() -> dict[str, str]:
    """GPU hosts of this run (``--limit`` respected) -> the address the other side dials."""
    state = host.state
    limit = set(state.limit_hosts or [])
    out: dict[str, str] = {}
    for member in state.inventory:
        if limit and member not in limit:
            continue
        if member.data.get("nodegate_profile_data"):  # a GPU node, not the controller
            out[member.name] = str(member.data.get("ssh_hostname") or member.name)
    return out


@deploy("nodegate multinode (collectives with a known-good node)",
        data_defaults={**role_defaults("gate"), **role_defaults("agent")})
def multinode_gate(fail_host: bool = True) -> None:
    peer = host.data.get("gate_multinode_peer")
    if not peer:
        host.noop("no gate_multinode_peer: no multi-node check")
        return
    if not host.data.get("nodegate_profile_data"):
        host.noop("not a GPU node (no hardware profile): no multi-node check")
        return
    addresses = run_hosts()
    if peer not in addresses:
        raise DeployError(f"{host.name}: gate_multinode_peer {peer!r} is not a GPU host of this "
                          f"run (inventory and --limit: {', '.join(sorted(addresses))})")
    size = int(host.data.get("gate_multinode_group_size") or 0)
    for index, members in enumerate(group_plan(str(peer), list(addresses), size)):
        # every host calls this once per group, so the n-th call is the same operation on all
        gate.multinode_group(
            name=f"gate: multinode collectives {' + '.join(members)} + {peer}",
            nodegate_bin=f"{host.data.get('agent_venv')}/bin/nodegate",
            profile_path=str(host.data.get("agent_profile_path")),
            report_dir=str(host.data.get("agent_report_dir")),
            fetch_dir=str(host.data.get("gate_fetch_dir")), peer=str(peer), members=members,
            addresses=addresses, port=int(host.data.get("gate_multinode_port")) + index,
            join_timeout_s=float(host.data.get("gate_multinode_timeout_s")),
            fail_host=fail_host)


if is_deploy_file(globals()):
    multinode_gate()
