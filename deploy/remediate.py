"""Remediate the nodes nodegate drained: ``pyinfra inventory.py deploy/remediate.py
[--limit HOST] [--data remediate_dry_run=true]``.

One step of ``nodegate remediate`` on each node (docs/remediation.md) where the site or a
partition opted in: ``remediate_enabled`` in the site's data (all nodes) or a site group's
(a partition's nodes); left None it is the node profile's ``remediation.enabled``. An explicit
true passes ``--enable``, so a site turns remediation on without re-rendering profiles.

What the control side decides before anything runs on a node, from ``scontrol show node``:

* not drained: nothing. Remediation only carries on nodegate's own drain and never takes a
  node out of service, so the drain budget stays the gate's: a node the budget left in service
  (its Comment marked) is not touched, and nothing here spends more of it;
* drained by anyone else (a reason not starting ``nodegate:``): never touched (the node's
  own command refuses it too);
* drained by nodegate: the node's command, with the power poller's EnvironmentFile loaded as
  the scheduled check loads it (its ``env:`` references are the BMC's credentials for a power
  cycle: names only ever appear here, values never). Exit 1 (the node needs a person: RMA, a
  failed action) fails the host so the run's summary names it.

``remediate_dry_run=true`` passes ``--dry-run``: the node says what it would do, changes
nothing.
"""

from __future__ import annotations

from shlex import quote

from pyinfra.api.deploy import deploy
from pyinfra.context import host
from pyinfra.operations import server

import nodegate.pyinfra_compat  # noqa: F401  (a lost SSH connection fails that host only)
from nodegate.cluster.reasons import is_nodegate_reason
from nodegate.cluster.slurm import parse_state
from nodegate.facts.gpu import SlurmNode
from roles.agent import health_env_file, remediate_words
from roles.defaults import role_defaults
from roles.ops.common import is_deploy_file, knob, refuse
from roles.ops.slurm import slurm_member


def remediate_command(node: str, *, enable: bool) -> str:
    """The node's command line: the poller's credentials loaded (when installed), then one
    remediation step."""
    line = " ".join(quote(w) for w in remediate_words(node, enable=enable))
    env_file = health_env_file()
    if env_file is None:
        return line
    # NAME=value lines taken literally, as the scheduled check loads them (agent role)
    return (f"if [ -r {env_file} ]; then while IFS= read -r l; do case \"$l\" in "
            f"[A-Za-z_]*=*) export \"$l\";; esac; done < {env_file}; fi; {line}")


@deploy("nodegate remediate (one step per drained node)",
        data_defaults={**role_defaults("remediate"), **role_defaults("agent")})
def remediate() -> None:
    node = slurm_member()
    if not node:
        host.noop("not a Slurm node: nothing nodegate drained to remediate")
        return
    enabled = knob("remediate_enabled", "remediation.enabled")
    if not enabled:
        host.noop(f"{node}: remediation not enabled (remediate_enabled, or the profile's "
                  "remediation.enabled)")
        return
    shown = host.get_fact(SlurmNode, node=node)
    if shown is None or shown.get("error"):
        refuse(f"cannot read {node} in Slurm: "
               + str((shown or {}).get("error") or "Slurm does not know it"))
        return
    token, reason = str(shown.get("state") or ""), shown.get("reason")
    if "DRAIN" not in parse_state(token)[1]:
        host.noop(f"{node} {token}: not drained, nothing to remediate (remediation never "
                  "takes a node out of service)")
        return
    if not is_nodegate_reason(reason):
        host.noop(f"{node} {token} ({reason}): drained by someone else; never touched")
        return
    explicit = host.data.get("remediate_enabled") is True
    server.shell(name=f"nodegate remediate {node}"
                 + (" (dry run)" if knob("remediate_dry_run") else ""),
                 commands=[remediate_command(node, enable=explicit)])


if is_deploy_file(globals()):
    remediate()
