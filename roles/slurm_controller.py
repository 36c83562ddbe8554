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
  nodes only on a restart; the operation's name says so) and ``scontrol reconfigure``
  otherwise, which also pushes the new files to every configless slurmd.
- **The cluster changes only on purpose** (``plan_node_set``): a node slurm.conf
  already has is never removed or renamed because this run's inventory lacks it (a
  ``--limit`` run, a group edited, a Slurm-name typo): its lines are kept as they are. A
  node name new to Slurm whose address is a node slurm.conf keeps (a typo, a rename, one
  machine under two names) is left out and its host fails, naming both names; the file
  and slurmctld stay untouched by it. Removing (or renaming) takes the explicit knob
  ``slurm_controller_remove_nodes``: each listed node is drained first and removed only
  when it runs no job, then slurmctld restarts.
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

from pyinfra import logger
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
_NODE_ADDR = re.compile(r"\sNodeAddr=(\S+)")
#: The drain of a node ``slurm_controller_remove_nodes`` takes out of slurm.conf.
REMOVE_REASON = "nodegate: removed from slurm.conf (slurm_controller_remove_nodes)"


@dataclass(frozen=True)
class KnownNode:
    """A node the controller's current slurm.conf has: its lines there, kept verbatim when
    this run's inventory does not name it."""

    name: str
    address: str | None
    line: str                # its NodeName= line in slurm.conf
    gres: tuple[str, ...]    # its NodeName= lines in gres.conf
    how: str = "kept as it was (not in this run's inventory)"  # its gres.conf comment

    def entry(self) -> SlurmNode:
        """The node as the templates render it: its own lines, unchanged."""
        return SlurmNode(self.name, self.address or "", None, "", None, 0, None,
                         list(self.gres), self.how, self.line)


@dataclass(frozen=True)
class NodeSetPlan:
    """What a run does to the cluster's node set (``plan_node_set``)."""

    add: tuple[str, ...]          # new to Slurm: drained until validated
    keep: tuple[str, ...]         # in slurm.conf, not in this run's inventory: kept verbatim
    remove: tuple[str, ...]       # named by slurm_controller_remove_nodes: drained, removed
    refused: dict[str, str]       # inventory host -> why its node is left out (a typo...)

    @property
    def restart(self) -> bool:
        """Slurm 22.05 adds or removes nodes only on a slurmctld restart."""
        return bool(self.add or self.remove)


def plan_node_set(known: dict[str, str | None], wanted: list[tuple[str, str, str]],
                  remove: set[str]) -> NodeSetPlan:
    """The node set change a run may make, from slurm.conf's nodes (``known``: name ->
    address), the inventory's (``wanted``: (host, Slurm name, address)) and the operator's
    explicit removals. Pure: tests/roles/test_slurm_controller.py holds each rule.

    A name new to Slurm whose address is a known node that stays (a typo, a rename without
    the knob), or another inventory host's address or name, is refused for that host; known
    nodes the inventory lacks are kept unless ``remove`` names them."""
    names = {name for _, name, _ in wanted}
    leaving = (set(known) & remove) - names
    staying = {n: a for n, a in known.items() if n not in leaving}
    by_address = {a: n for n, a in staying.items() if a}
    refused: dict[str, str] = {}
    add: list[str] = []
    seen_name: dict[str, str] = {}
    seen_address: dict[str, str] = {}
    for host_name, name, address in wanted:
        if name in seen_name:
            refused[host_name] = (f"Slurm node name {name!r} is also {seen_name[name]}'s: "
                                  "two hosts cannot be one node; nothing was changed in Slurm")
            continue
        if address in seen_address:
            refused[host_name] = (f"address {address} is also {seen_address[address]}'s: one "
                                  "machine under two names; nothing was changed in Slurm")
            continue
        seen_name[name], seen_address[address] = host_name, host_name
        if name in known:
            continue
        other = by_address.get(address)
        if other is not None:
            refused[host_name] = (
                f"Slurm node name {name!r} is new to Slurm, but {address} is node {other!r} "
                f"in slurm.conf: a typo of the host's slurm.node_name, or a rename; slurm.conf "
                f"and slurmctld are left as they are. To rename, list {other!r} in "
                "slurm_controller_remove_nodes (it is drained, removed when idle, and "
                "slurmctld restarts)")
            continue
        add.append(name)
    keep = sorted(n for n in known if n not in names and n not in leaving)
    return NodeSetPlan(tuple(add), tuple(keep), tuple(sorted(leaving)), refused)


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
    line: str | None = None  # a node kept from slurm.conf: its NodeName= line, verbatim


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


def _nodes() -> list[tuple[Host, SlurmNode]]:
    group = str(knob("slurm_controller_nodes_group"))
    members = [h for h in host.state.inventory if group in h.groups]
    if not members:
        raise DeployError(f"{host.name}: slurm_controller: inventory group {group!r} "
                          "(slurm_controller_nodes_group) has no hosts")
    return [(m, node_entry(m)) for m in members]


def _site(key: str, fallback: str) -> str:
    return str((host.data.get("nodegate_site_slurm") or {}).get(key) or fallback)


def known_nodes() -> set[str]:
    """The NodeName= entries of the controller's current slurm.conf (none before the first
    run): what slurmctld already has, so only the others start drained."""
    return set(known_entries())


def known_entries() -> dict[str, KnownNode]:
    """slurm.conf's NodeName= lines (and gres.conf's for each), by node name."""
    lines = host.get_fact(FindInFile, path=SLURM_CONF, pattern="^NodeName=") or []
    gres = host.get_fact(FindInFile, path=GRES_CONF, pattern="^(NodeName=|# [^ ]+: )",
                         extended_regex=True) or []
    out = {}
    for line in lines:
        match = _NODE_LINE.match(line)
        if not match:
            continue
        name = match.group(1)
        addr = _NODE_ADDR.search(line)
        how = next((g.rstrip()[len(f"# {name}: "):] for g in gres
                    if g.startswith(f"# {name}: ")), None)
        out[name] = KnownNode(name, addr.group(1) if addr else None, line.rstrip(),
                              tuple(g.rstrip() for g in gres
                                    if (m := _NODE_LINE.match(g)) and m.group(1) == name),
                              *([how] if how else []))
    return out


def _drain_to_remove(names: tuple[str, ...]) -> str:
    """Drain each node to remove (a drain someone else set is left as it is: compare
    first), then fail while any still runs a job: removing a busy node drops its jobs."""
    parts = []
    for name in names:
        node = shlex.quote(name)
        parts.append(
            f"if ! scontrol show node {node} -o | grep -Eq 'State=[A-Z+_]*(DRAIN|DOWN)'; then "
            f"scontrol update NodeName={node} State=DRAIN "
            f"{shlex.quote('Reason=' + REMOVE_REASON)} || exit 1; fi; "
            f"jobs=$(squeue -h -w {node} -o %i | wc -l); if [ \"$jobs\" -gt 0 ]; then echo "
            f"\"nodegate: {name} is drained but still runs $jobs job(s): it is removed from "
            f"slurm.conf once idle (rerun then)\" >&2; exit 1; fi")
    return "; ".join(parts)


def _node_rows(nodes: list[tuple[Host, SlurmNode]]) -> tuple[NodeSetPlan, list[SlurmNode]]:
    """This run's node set change (``plan_node_set``), each refused host failed with its
    reason, and the nodes the files list: slurm.conf's own order first (a node kept keeps
    its lines verbatim), then the new ones, so a node only missing from this run leaves both
    files byte for byte as they were."""
    known = known_entries()
    plan = plan_node_set({n: k.address for n, k in known.items()},
                         [(h.name, e.name, e.address) for h, e in nodes],
                         {str(n) for n in knob("slurm_controller_remove_nodes") or []})
    for member, _entry in nodes:
        if member.name in plan.refused:
            refuse(plan.refused[member.name], target=member)
    served = {e.name: e for h, e in nodes if h.name not in plan.refused}
    for name in plan.keep:
        served.setdefault(name, known[name].entry())
    if plan.keep:
        logger.warning(f"{host.name}: slurm_controller: kept in slurm.conf though not in this "
                       f"run's inventory: {', '.join(plan.keep)} (slurm_controller_remove_nodes "
                       "drains and removes a node)")
    rows = [served[n] for n in known if n in served] + \
        [e for n, e in served.items() if n not in known]
    return plan, rows


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
    plan, rows = _node_rows(nodes)
    new = list(plan.add)
    if plan.remove:
        server.shell(name="slurm_controller: nodes to remove drained first "
                     f"({', '.join(plan.remove)}; slurm_controller_remove_nodes)",
                     commands=[_drain_to_remove(plan.remove)])
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
        extra=list(knob("slurm_controller_extra_lines") or []), nodes=rows)
    gres = put_template(name="slurm_controller: gres.conf with every node's GPUs",
                        src="slurm_controller/gres.conf.j2", dest=GRES_CONF, nodes=rows)
    running = bool((host.get_fact(SystemdStatus) or {}).get("slurmctld.service"))
    systemd.service(name="slurm_controller: slurmctld enabled and running",
                    service="slurmctld.service", running=True, enabled=True)
    if running and plan.restart:  # 22.05 takes a new node list only on a restart
        change = ", ".join([*(f"+{n}" for n in plan.add), *(f"-{n}" for n in plan.remove)])
        systemd.service(name=f"slurm_controller: slurmctld restarted (the node set changed): "
                        f"{change}; Slurm 22.05 adds or removes nodes only on a restart",
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
