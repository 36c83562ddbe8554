"""slurm_node: slurmd on a GPU node, configless, with its GPUs' gres.conf and nodegate's hooks.

Opt-in: off unless ``slurm_node_controller`` is set (the site's ``data:`` or ``--data``). The
site's own ``slurm.controller`` does not turn it on yet: the lab's nodes get slurmd from the lab
(nodegate_lab.controller), and a deploy there would otherwise need a munge key file. What it
sets up:

- ``slurmd`` and ``munge`` from the distribution (EPEL's ``slurm-slurmd`` on EL9).
- The munge key by reference only: ``slurm_node_munge_key_file`` is a path on the machine
  running pyinfra (never a value in the inventory or in git); uploaded 0400 to the munge user,
  compared by checksum, never printed.
- Configless slurmd (``--conf-server``): slurm.conf lives on the controller alone
  (``SlurmctldParameters=enable_configless``), so the node cannot drift from it.
- ``gres.conf`` from the node's own GPUs: device minors from the driver and each GPU's socket
  cores as Slurm core indexes (``GpuPlacements``), or ``AutoDetect=nvml`` where the site's
  slurmd is built with NVML (``slurm_node_gres_autodetect``). Without a readable topology (no
  driver loaded yet) the lines name the device files only, and say so.
- ``HealthCheckProgram`` and prolog/epilog scripts that run nodegate: the controller's
  slurm.conf points at them (docs/gate.md has the lines). NIC affinity has no gres.conf field;
  jobs take it from the rail map (``rail-map.json``, docs/network.md).
"""

from __future__ import annotations

from pathlib import Path
from shlex import quote
from typing import Any

from pyinfra.api.deploy import deploy
from pyinfra.api.exceptions import DeployError
from pyinfra.context import host
from pyinfra.operations import files, systemd

from nodegate.facts.gpu import GpuPlacement, GpuPlacements
from roles import _ops
from roles._common import (
    container,
    drain_budget_args,
    is_deploy_file,
    knob,
    refuse,
    target_os,
    template,
)
from roles.defaults import role_defaults

HEALTHCHECK = "/usr/local/sbin/nodegate-slurm-healthcheck"
PROLOG = "/usr/local/sbin/nodegate-slurm-prolog"
EPILOG = "/usr/local/sbin/nodegate-slurm-epilog"
MUNGE_KEY = "/etc/munge/munge.key"


def gres_lines(placements: list[GpuPlacement], count: int, gpu_type: str | None) -> list[str]:
    """One ``Name=gpu`` line per GPU with its socket's cores; without placements, the device
    files of ``count`` GPUs and no binding."""
    kind = f" Type={gpu_type}" if gpu_type else ""
    if not placements:
        return [f"Name=gpu{kind} File=/dev/nvidia[0-{count - 1}]"] if count > 0 else []
    return [f"Name=gpu{kind} File=/dev/nvidia{p['minor']}"
            + (f" Cores={p['cores']}" if p["cores"] else "")
            + f"  # {p['bdf']}" for p in placements]


def _munge_key() -> bytes:
    path = knob("slurm_node_munge_key_file")
    if not path:
        raise DeployError(f"{host.name}: slurm_node needs slurm_node_munge_key_file (a path on "
                          "this machine to the cluster's munge key; never the key itself)")
    try:
        data = Path(str(path)).expanduser().read_bytes()
    except OSError as exc:
        raise DeployError(f"{host.name}: slurm_node_munge_key_file {path}: "
                          f"{exc.strerror or exc}") from None
    if len(data) < 32:
        raise DeployError(f"{host.name}: slurm_node_munge_key_file {path}: {len(data)} bytes; "
                          "munge wants at least 32 (mungekey makes 1024)")
    return data


@deploy("nodegate slurm_node: slurmd with nodegate's gres.conf and health hooks",
        data_defaults=role_defaults("slurm_node"))
def slurm_node() -> None:
    controller = knob("slurm_node_controller")
    if not controller:
        host.noop("no Slurm controller named for this site (slurm_node_controller): no slurmd")
        return
    try:
        key = _munge_key()
    except DeployError as exc:
        refuse(str(exc).removeprefix(f"{host.name}: "))
        return
    os_ = target_os()
    packages = ["slurmd", "munge"] if os_.is_debian else ["slurm-slurmd", "munge"]
    _ops.os_packages(name=f"slurm_node: {', '.join(packages)}", packages=packages)
    munge_key = _ops.put_secret(name="slurm_node: munge key (by reference)", dest=MUNGE_KEY,
                                text=key, owner="munge", mode="400")
    systemd.service(name="slurm_node: munge enabled and running", service="munge.service",
                    running=True, enabled=True)
    # the distribution's package makes and starts munge with a key of its own
    systemd.service(name="slurm_node: munge restarted (the cluster's key replaced its own)",
                    service="munge.service", restarted=True, _if=munge_key.did_change)
    port = knob("slurm_node_controller_port")
    defaults_file = "/etc/default/slurmd" if os_.is_debian else "/etc/sysconfig/slurmd"
    conf_server = files.template(name="slurm_node: configless slurmd (--conf-server)",
                                 src=template("slurm_node", "slurmd.default.j2"),
                                 dest=defaults_file, mode="644",
                                 conf_server=f"{controller}:{port}")
    gres = _gres()
    nodegate = str(knob("slurm_node_nodegate"))
    files.template(name="slurm_node: HealthCheckProgram wrapper",
                   src=template("slurm_node", "healthcheck.sh.j2"), dest=HEALTHCHECK,
                   mode="755", path=HEALTHCHECK, nodegate=nodegate,
                   budget=" ".join(quote(w) for w in drain_budget_args()))
    checks = str(knob("slurm_node_prolog_checks"))
    for kind, path in (("Prolog", PROLOG), ("Epilog", EPILOG)):
        files.template(name=f"slurm_node: {kind.lower()} runs the quick check",
                       src=template("slurm_node", "prolog.sh.j2"), dest=path, mode="755",
                       kind=kind, path=path, nodegate=nodegate, checks=checks)
    systemd.service(name="slurm_node: slurmd enabled and running", service="slurmd.service",
                    running=True, enabled=True)
    systemd.service(name="slurm_node: slurmd restarted (its options or gres.conf changed)",
                    service="slurmd.service", restarted=True,
                    _if=lambda: conf_server.did_change() or gres.did_change())


def _gres() -> Any:
    autodetect = bool(knob("slurm_node_gres_autodetect"))
    placements = [] if container() else host.get_fact(GpuPlacements)
    count = int(knob("slurm_node_gpu_count", "gpu.count") or 0)
    gpu_type = knob("slurm_node_gpu_type")
    if autodetect:
        how = "AutoDetect=nvml: slurmd reads files, cores and links from NVML."
    elif placements:
        how = ("Cores from each GPU's socket (GpuPlacements: the driver's device minors, "
               "the slot's local_cpulist).")
    else:
        how = "No GPU topology readable (no driver loaded): device files only, no core binding."
    return files.template(name="slurm_node: gres.conf from this node's GPUs",
                          src=template("slurm_node", "gres.conf.j2"),
                          dest="/etc/slurm/gres.conf", mode="644", how=how,
                          autodetect=autodetect,
                          lines=[] if autodetect else gres_lines(placements, count, gpu_type))


if is_deploy_file(globals()):
    slurm_node()
