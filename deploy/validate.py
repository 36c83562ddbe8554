"""Validate every inventory host: ``pyinfra inventory.py deploy/validate.py [--limit HOST]``.

Runs the battery on each node in parallel through pyinfra (batches and ``--limit`` as usual)
at ``gate_level`` (quick -> ``nodegate health``; standard/acceptance -> ``nodegate validate``)
and fetches each node's JSON report to ``<gate_fetch_dir>/<host>/<level>-latest.json``. A host
whose battery fails is marked failed; the others carry on.

    pyinfra inventory.py deploy/validate.py --data gate_level=acceptance
"""

from __future__ import annotations

from pyinfra.api.deploy import deploy
from pyinfra.context import host

import nodegate.pyinfra_compat  # noqa: F401  (a lost SSH connection fails that host only)
from nodegate.cluster.evidence import widen_checks
from nodegate.vocabulary import LEVELS
from roles.defaults import role_defaults
from roles.ops import gate
from roles.ops.common import is_deploy_file


@deploy("nodegate validate (the battery on the node)",
        data_defaults={**role_defaults("gate"), **role_defaults("agent")})
def validate_gate(fail_host: bool = True) -> None:
    if not host.data.get("nodegate_profile"):
        host.noop("not a GPU node (no profile): nothing to validate")
        return
    level = str(host.data.get("gate_level"))
    if level not in LEVELS:
        raise ValueError(f"{host.name}: gate_level must be one of {', '.join(LEVELS)}, "
                         f"not {level!r}")
    bin_path = f"{host.data.get('agent_venv')}/bin/nodegate"
    # the agent's health args may narrow --checks (gpu,log): the join judges this run, so
    # every group it requires runs (nodegate.cluster.evidence)
    extra = widen_checks([str(a) for a in host.data.get("agent_health_args") or []], level)
    if level == "quick":
        gate.health_gate(name="gate: nodegate health", nodegate_bin=bin_path,
                         profile_path=str(host.data.get("agent_profile_path")),
                         fetch_dir=str(host.data.get("gate_fetch_dir")), extra_args=extra,
                         fail_host=fail_host)
        return
    extra = ["--level", level, "--duration-scale", str(host.data.get("gate_duration_scale")),
             *extra]
    gate.health_gate(name=f"gate: nodegate validate --level {level}", nodegate_bin=bin_path,
                     profile_path=str(host.data.get("agent_profile_path")),
                     fetch_dir=str(host.data.get("gate_fetch_dir")), extra_args=extra,
                     subcommand="validate", level=level, fail_host=fail_host)


if is_deploy_file(globals()):
    validate_gate()
