"""slurm_controller: slurmctld with the cluster's slurm.conf and gres.conf, served configless.

Opt-in: off unless ``slurm_controller_enabled`` is set on the controller host (site host
``data:`` or ``--data``); the nodes' side is roles/slurm_node.py. What it sets up:

- ``slurmctld`` and ``munge`` (EL9: EPEL's ``slurm-slurmctld``), the munge key by reference
  (``slurm_controller_munge_key_file``: a path on the machine running pyinfra, as slurm_node's;
  uploaded munge 0400, compared by checksum, never printed).
- ``/etc/slurm/slurm.conf`` rendered from the inventory: ``SlurmctldParameters=
  enable_configless`` (the nodes' slurmd fetch it with ``--conf-server``), one ``NodeName``
  line per host of ``slurm_controller_nodes_group`` (its ``slurm.node_name``, address, CPUs,
  RealMemory, ``Gres=gpu:N``), one partition of them all, and slurm_node's hooks as
  ``HealthCheckProgram``/``Prolog``/``Epilog``.
- ``/etc/slurm/gres.conf`` with every node's lines (``NodeName=<node> Name=gpu
  File=/dev/nvidiaN Cores=...``) from that node's own ``GpuPlacements`` fact. It must live
  here: a configless slurmd reads gres.conf only from what slurmctld serves, never a
  node-local file (observed with Slurm 22.05 in the lab: roles/slurm_node.py says how).
  A node's ``slurm_node_gres_autodetect`` gives ``NodeName=<node> AutoDetect=nvml`` instead;
  Debian 12's build cannot do it (its plugins hold ``gpu_generic.so``, no ``gpu_nvml.so``;
  ``slurmd -G`` on a lab node with ``AutoDetect=nvml``: "We were configured with nvml
  functionality, but that lib wasn't found on the system", then the explicit lines).
- slurmctld started; on a change, restarted when the node set changed (22.05 adds or removes
  nodes only on a restart) and ``scontrol reconfigure`` in any case, which also pushes the
  new files to every configless slurmd.
- **A node new to slurm.conf is drained** ``nodegate: not validated`` right after slurmctld
  knows it, before its slurmd registers. "New" is read from the controller's current
  slurm.conf (its ``NodeName=`` lines), so a rerun drains nothing and a node the gate resumed
  stays in service; the reason starts ``nodegate:``, so the gate's resume lifts it
  (docs/gate.md). pyinfra 3 orders operations across hosts in waves (the k-th operation of
  every host, ``State.get_op_order``), not controller first: the drain is one operation and
  at most the 12th of this role, and slurm_node starts slurmd at its 14th or later, so in
  deploy/slurm.py and deploy.py the drain always runs before a new node's first slurmd start
  (tests/roles/test_slurm_controller.py holds that count).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any

from pyinfra.api.deploy import deploy
from pyinfra.api.exceptions import DeployError
from pyinfra.api.host import Host
from pyinfra.context import ctx_host, host
from pyinfra.facts.files import FindInFile
from pyinfra.facts.hardware import Cpus, Memory
from pyinfra.facts.server import Hostname
from pyinfra.facts.systemd import SystemdStatus
from pyinfra.operations import files, server, systemd

from nodegate.facts.gpu import CpuTopology, GpuPlacements
from nodegate.facts.virt import Container
from roles.defaults import DEFAULTS, role_defaults
from roles.ops.common import is_deploy_file, knob, refuse, target_os
from roles.ops.files import put_secret, put_template
from roles.ops.packages import ensure_packages
from roles.slurm_node import (
    EPILOG,
    HEALTHCHECK,
    MUNGE_KEY,
    PROLOG,
    SLURM_LOG_DIR,
    SLURMD_SPOOL,
    gres_lines,
    read_munge_key,
)

SLURM_CONF = "/etc/slurm/slurm.conf"
GRES_CONF = "/etc/slurm/gres.conf"
STATE_DIR = "/var/lib/slurm/slurmctld"
#: The drain a node new to slurm.conf starts with: nodegate's own, so the gate may lift it.
INITIAL_REASON = "nodegate: not validated"
_NODE_LINE = re.compile(r"^NodeName=(\S+)")


@dataclass(frozen=True)
class SlurmNode:
    """One node as slurm.conf and gres.conf name it."""

    name: str
    address: str
    cpus: int | None
    topology: str          # " Sockets=2 CoresPerSocket=56 ThreadsPerCore=2", or ""
    real_memory: int | None
    gpus: int
    gpu_type: str | None  # slurm.conf's Gres=gpu:TYPE:N must match gres.conf's Type=
    gres: list[str]  # gres.conf lines, NodeName= included
    how: str         # where the gres lines came from (a comment in gres.conf)


def _node_knob(node: Host, name: str, profile_path: str | None = None) -> Any:
    """A slurm_node knob as that node's own deploy would read it: its data, its profile, then
    the default (another host's deploy does not apply slurm_node's data defaults)."""
    value = node.data.get(name)
    if value is None and profile_path:
        value = node.data.get("nodegate_profile_data") or {}
        for part in profile_path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
    return DEFAULTS[name] if value is None else value


def node_entry(node: Host) -> SlurmNode:
    """A node's slurm.conf and gres.conf lines, from its data and its own facts."""
    name = str((node.data.get("nodegate_slurm") or {}).get("node_name") or node.name)
    address = str(node.data.get("ssh_hostname") or node.name)
    count = int(_node_knob(node, "slurm_node_gpu_count", "gpu.count") or 0)
    gpu_type = _node_knob(node, "slurm_node_gpu_type")
    with ctx_host.use(node):
        in_container = node.get_fact(Container)
        placements = [] if in_container else node.get_fact(GpuPlacements)
        cpus = _node_knob(node, "slurm_node_cpus")
        topology = ""
        if not cpus:  # the node's own count and layout, as slurmd will find them
            layout = node.get_fact(CpuTopology)
            cpus = layout["cpus"] if layout else node.get_fact(Cpus)
            if layout:
                topology = (f" Sockets={layout['sockets']} CoresPerSocket="
                            f"{layout['cores_per_socket']} ThreadsPerCore="
                            f"{layout['threads_per_core']}")
        memory = _node_knob(node, "slurm_node_real_memory")
        if memory is None:  # under what slurmd will count, or the node registers INVALID
            total = node.get_fact(Memory)
            memory = int(total * 0.95) if total else None
    if _node_knob(node, "slurm_node_gres_autodetect"):
        how = "AutoDetect=nvml: slurmd reads files, cores and links from NVML."
        lines = ["AutoDetect=nvml"]
    elif placements:
        how = ("cores from each GPU's socket (GpuPlacements: the driver's device minors, the "
               "slot's local_cpulist).")
        lines = gres_lines(placements, count, gpu_type)
        count = len(placements)
    else:
        why = f"a container ({in_container})" if in_container else "no driver loaded"
        how = f"no GPU topology readable ({why}): device files only, no core binding."
        lines = gres_lines([], count, gpu_type)
    return SlurmNode(name, address, int(cpus) if cpus else None, topology,
                     int(memory) if memory else None, count,
                     str(gpu_type) if gpu_type else None,
                     [f"NodeName={name} {line}" for line in lines], how)


def _nodes() -> list[SlurmNode]:
    group = str(knob("slurm_controller_nodes_group"))
    members = [h for h in host.state.inventory if group in h.groups]
    if not members:
        raise DeployError(f"{host.name}: slurm_controller: inventory group {group!r} "
                          "(slurm_controller_nodes_group) has no hosts")
    return [node_entry(m) for m in members]


def _site(key: str, fallback: str) -> str:
    return str((host.data.get("nodegate_site_slurm") or {}).get(key) or fallback)


def known_nodes() -> set[str]:
    """The NodeName= entries of the controller's current slurm.conf (none before the first
    run): what slurmctld already has, so only the others start drained."""
    lines = host.get_fact(FindInFile, path=SLURM_CONF, pattern="^NodeName=") or []
    return {m.group(1) for line in lines if (m := _NODE_LINE.match(line))}


@deploy("nodegate slurm_controller: slurmctld, slurm.conf and gres.conf for configless nodes",
        data_defaults=role_defaults("slurm_controller"))
def slurm_controller() -> None:
    if not knob("slurm_controller_enabled"):
        host.noop("not the Slurm controller (slurm_controller_enabled): no slurmctld")
        return
    try:
        key = read_munge_key("slurm_controller")
        nodes = _nodes()
    except DeployError as exc:
        refuse(str(exc).removeprefix(f"{host.name}: "))
        return
    os_ = target_os()
    packages = ["slurmctld", "munge"] if os_.is_debian else ["slurm-slurmctld", "munge"]
    ensure_packages("slurm_controller", packages)
    munge_key = put_secret(name="slurm_controller: munge key (by reference)",
                           dest=MUNGE_KEY, text=key, owner="munge", mode="400")
    systemd.service(name="slurm_controller: munge enabled and running",
                    service="munge.service", running=True, enabled=True)
    systemd.service(name="slurm_controller: munge restarted (the cluster's key replaced its own)",
                    service="munge.service", restarted=True, _if=munge_key.did_change)
    for path in (STATE_DIR, SLURM_LOG_DIR):
        files.directory(name=f"slurm_controller: {path}", path=path, user="slurm",
                        group="slurm", mode="755")
    known = known_nodes()
    new = [n.name for n in nodes if n.name not in known]
    node_set_changed = known != {n.name for n in nodes}
    conf = put_template(
        name="slurm_controller: slurm.conf (served to the nodes: enable_configless)",
        src="slurm_controller/slurm.conf.j2", dest=SLURM_CONF,
        cluster=knob("slurm_controller_cluster_name") or _site("cluster_name", "nodegate"),
        partition=knob("slurm_controller_partition") or _site("partition", "gpu"),
        ctld_host=str(host.get_fact(Hostname) or host.name).split(".")[0],
        ctld_address=str(host.data.get("ssh_hostname") or host.name),
        port=knob("slurm_controller_port"), state_dir=STATE_DIR, spool=SLURMD_SPOOL,
        log_dir=SLURM_LOG_DIR, proctrack=knob("slurm_controller_proctrack"),
        task_plugin=knob("slurm_controller_task_plugin"),
        return_to_service=knob("slurm_controller_return_to_service"),
        healthcheck=HEALTHCHECK if knob("slurm_controller_health_check") else None,
        healthcheck_interval=knob("slurm_controller_health_check_interval"),
        prolog=PROLOG if knob("slurm_controller_prolog_epilog") else None, epilog=EPILOG,
        extra=list(knob("slurm_controller_extra_lines") or []), nodes=nodes)
    gres = put_template(name="slurm_controller: gres.conf with every node's GPUs",
                        src="slurm_controller/gres.conf.j2", dest=GRES_CONF, nodes=nodes)
    running = bool((host.get_fact(SystemdStatus) or {}).get("slurmctld.service"))
    systemd.service(name="slurm_controller: slurmctld enabled and running",
                    service="slurmctld.service", running=True, enabled=True)
    if running and node_set_changed:  # 22.05 takes a new node list only on a restart
        systemd.service(name="slurm_controller: slurmctld restarted (the node set changed)",
                        service="slurmctld.service", restarted=True, _if=conf.did_change)
    if running:
        server.shell(name="slurm_controller: scontrol reconfigure (the nodes fetch the new files)",
                     commands=[_when_answering("scontrol", "reconfigure")],
                     _if=lambda: conf.did_change() or gres.did_change())
    if new:  # one operation, whatever the count: see the module docstring on the order
        server.shell(name="slurm_controller: nodes new to Slurm drained until validated",
                     commands=[_when_answering(
                         "scontrol", "update", f"NodeName={','.join(new)}", "State=DRAIN",
                         f"Reason={INITIAL_REASON}")])


def _when_answering(*argv: str, tries: int = 60) -> str:
    """``argv`` retried for up to ~30 s: slurmctld's unit is active a moment before it
    answers RPCs (after a start or restart); the last try's error is the operation's."""
    command = shlex.join(argv)
    return f"for i in $(seq {tries}); do {command} && exit 0; sleep 0.5; done; {command}"


if is_deploy_file(globals()):
    slurm_controller()
