"""This host as Slurm knows it: its node name, whether the gate joins it, and the drain budget
its health gates pass on (the Slurm side itself is nodegate.cluster; the roles that configure
slurmd and slurmctld are roles/slurm_node.py and roles/slurm_controller.py)."""

from __future__ import annotations

from pyinfra.context import host


def slurm_node_name() -> str:
    """This host's name in Slurm (the site's ``slurm.node_name``, else the inventory name, as
    slurm_controller lists it). What Slurm says of it is read by this name before any drain,
    wait or reboot; a host Slurm does not know reads as not in Slurm."""
    return str((host.data.get("nodegate_slurm") or {}).get("node_name") or host.name)


def slurm_member() -> str | None:
    """``slurm_node_name()`` where this host is a Slurm node by its data (a site
    ``slurm.node_name``, or the slurm_node role configures its slurmd), else None: where the
    gate is scheduled and the join runs."""
    if (host.data.get("nodegate_slurm") or {}).get("node_name") or \
            host.data.get("slurm_node_controller"):
        return slurm_node_name()
    return None


def slurm_name_mismatch() -> str | None:
    """Why this host's Slurm name cannot be right, or None. Where nodegate configures slurmd
    (``slurm_node_controller``), slurm.conf has no ``NodeHostname``: slurmd registers as its
    short host name, so a ``slurm.node_name`` that differs (a typo) would put a gate or drain
    on another node, or on none. Checked on the node itself, so a ``--limit`` run, which the
    controller does not see, is caught too."""
    from pyinfra.facts.server import Hostname

    if not host.data.get("slurm_node_controller"):
        return None
    name = slurm_node_name()
    own = str(host.get_fact(Hostname) or "").strip().split(".")[0]
    if not own or own == name:
        return None
    return (f"slurm.node_name {name!r} is not this host's name {own!r}: slurmd registers as "
            f"{own!r} (nodegate's slurm.conf has no NodeHostname), so its scheduled gate "
            f"would act on {name!r}, another node or none; a typo in the site file? Nothing "
            "was changed")


def gate_args() -> list[str]:
    """``--textfile-dir DIR`` for a health gate on this node, always (its decision and hold as
    metrics: docs/monitoring.md), with ``--drain-budget F`` in front where the site sets
    ``slurm.drain_budget`` (docs/gate.md, "The drain budget"): the scheduled gate (agent role)
    and Slurm's HealthCheckProgram (slurm_node role) both pass them."""
    from roles.defaults import DEFAULTS

    textfile = host.data.get("agent_textfile_dir") or DEFAULTS["agent_textfile_dir"]
    budget = (host.data.get("nodegate_slurm") or {}).get("drain_budget")
    words = [] if budget is None else ["--drain-budget", f"{float(budget):g}"]
    return [*words, "--textfile-dir", str(textfile)]


__all__ = ["gate_args", "slurm_member", "slurm_name_mismatch", "slurm_node_name"]
