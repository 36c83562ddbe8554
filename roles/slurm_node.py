"""slurm_node: slurmd on a GPU node, configless, with nodegate's health hooks.

Opt-in: off unless ``slurm_node_controller`` is set (the site's ``data:`` or ``--data``); the
controller's side is roles/slurm_controller.py, and the lab turns both on (docs/lab.md). What
it sets up:

- ``slurmd`` and ``munge`` from the distribution (EPEL's ``slurm-slurmd`` on EL9).
- The munge key by reference only: ``slurm_node_munge_key_file`` is a path on the machine
  running pyinfra (never a value in the inventory or in git); uploaded 0400 to the munge user,
  compared by checksum, never printed.
- Configless slurmd (``--conf-server``): slurm.conf lives on the controller alone
  (``SlurmctldParameters=enable_configless``), so the node cannot drift from it. The
  distribution's unit starts only with ``ConditionPathExists=/etc/slurm/slurm.conf``, which a
  configless node has not got: a drop-in clears it (without it ``systemctl start slurmd``
  exits 0 and slurmd never runs: "start condition failed", seen in the lab).
- ``HealthCheckProgram`` and prolog/epilog scripts that run nodegate: the controller role's
  slurm.conf points at them (docs/gate.md has the lines). The prolog/epilog wait up to
  ``slurm_node_prolog_lock_wait`` seconds for another nodegate run's battery lock and skip
  the check (exit 0) if it is still held: a non-zero exit drains the node with Slurm's own
  "Prolog error", which the gate never lifts, and the run holding the lock judges the node.

gres.conf is **not** written here: the controller's gres.conf carries each node's lines
(``NodeName=<node> Name=gpu File=/dev/nvidiaN Cores=...``, built by slurm_controller from
this node's ``GpuPlacements``). Observed with Debian 12's Slurm 22.05.8 in the lab: a
configless slurmd fetches slurm.conf and gres.conf into ``/run/slurm/conf`` (a link to
``/var/lib/slurm/slurmd/conf-cache``) and reads gres.conf only there. With a node-local
``/etc/slurm/gres.conf`` naming 4 GPUs and none on the controller, slurmd.log said "Can not
stat gres.conf file (/var/lib/slurm/slurmd/conf-cache/gres.conf), using slurm.conf data"
and ``scontrol show node`` kept ``Gres=gpu:8`` from slurm.conf: the local file was ignored.
With ``NodeName=node2 Name=gpu File=/dev/nvidia[0-7] Cores=0`` in the controller's gres.conf
and ``scontrol reconfigure``, the node's conf-cache held that file, ``slurmd -G`` printed
``Gres Name=gpu ... Count=8 ... File=/dev/nvidia[0-7] Cores=0`` and ``scontrol -d show node``
``Gres=gpu:8(S:0)``. A gres.conf this role wrote before is removed (it never took effect).
A configless slurmd started while slurmctld is stopped stays active and registers once it is
back (seen in the lab). Debian's 22.05.8 slurmd on a node new to a running lab twice died
with SIGSEGV about 0.5 s after its first start (journal: "Main process exited,
code=dumped, status=11/SEGV"; slurmctld had been restarted for the new node list a moment
before), once with a start followed by a restart, once with the single start this role now
does; the next start ran. So the drop-in adds ``Restart=on-failure`` (``RestartSec=5``):
seen in the lab, the crashed slurmd came back 5 s later and registered, already drained.
The nodes of a fresh lab (slurmctld started, not restarted) did not crash in the runs seen.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from shlex import quote
from typing import Any

from pyinfra.api.deploy import deploy
from pyinfra.api.exceptions import DeployError
from pyinfra.context import host
from pyinfra.facts.files import FindInFile
from pyinfra.facts.systemd import SystemdStatus
from pyinfra.operations import files, systemd

from nodegate.battery_lock import MAX_LOCK_WAIT_S
from nodegate.bounds import check_range
from nodegate.errors import ConfigError
from nodegate.facts.gpu import GpuPlacement
from nodegate.fileio import read_bytes
from roles.agent import health_env_file
from roles.defaults import role_defaults
from roles.ops.common import is_deploy_file, knob, refuse, target_os, template
from roles.ops.files import put_secret
from roles.ops.packages import ensure_packages
from roles.ops.slurm import gate_args

HEALTHCHECK = "/usr/local/sbin/nodegate-slurm-healthcheck"
PROLOG = "/usr/local/sbin/nodegate-slurm-prolog"
EPILOG = "/usr/local/sbin/nodegate-slurm-epilog"
MUNGE_KEY = "/etc/munge/munge.key"
DROPIN = "/etc/systemd/system/slurmd.service.d/nodegate-configless.conf"
LOCAL_GRES = "/etc/slurm/gres.conf"
#: slurm.conf's SlurmdSpoolDir and the log dir (the controller role writes both paths).
SLURMD_SPOOL = "/var/lib/slurm/slurmd"
SLURM_LOG_DIR = "/var/log/slurm"


def gres_lines(placements: list[GpuPlacement], count: int, gpu_type: str | None) -> list[str]:
    """One ``Name=gpu`` line per GPU with its socket's cores; without placements, the device
    files of ``count`` GPUs and no binding. The controller's gres.conf prefixes each with
    ``NodeName=`` (slurm_controller)."""
    kind = f" Type={gpu_type}" if gpu_type else ""
    if not placements:
        return [f"Name=gpu{kind} File=/dev/nvidia[0-{count - 1}]"] if count > 0 else []
    return [f"Name=gpu{kind} File=/dev/nvidia{p['minor']}"
            + (f" Cores={p['cores']}" if p["cores"] else "")
            + f"  # {p['bdf']}" for p in placements]


def read_munge_key(role: str) -> bytes:
    """The munge key ``<role>_munge_key_file`` names: a file on the machine running pyinfra,
    read here and never a value in the inventory (slurm_node and slurm_controller share it)."""
    name = f"{role}_munge_key_file"
    path = knob(name)
    if not path:
        raise DeployError(f"{host.name}: {role} needs {name} (a path on this machine to the "
                          "cluster's munge key; never the key itself)")
    try:
        data = read_bytes(Path(str(path)).expanduser(), kind="credential")
    except ConfigError as exc:
        raise DeployError(f"{host.name}: {name} {path}: {exc.message}") from None
    if len(data) < 32:
        raise DeployError(f"{host.name}: {name} {path}: {len(data)} bytes; munge wants at "
                          "least 32 (mungekey makes 1024)")
    return data


def prolog_lock_wait() -> str:
    """``slurm_node_prolog_lock_wait`` as ``nodegate health --lock-wait`` takes it: seconds,
    0 to MAX_LOCK_WAIT_S (a DeployError naming the host and knob otherwise)."""
    value = knob("slurm_node_prolog_lock_wait")
    try:
        seconds = math.nan if isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if check_range(seconds, low=0, high=MAX_LOCK_WAIT_S) is not None:
        raise DeployError(f"{host.name}: slurm_node_prolog_lock_wait must be seconds from 0 "
                          f"to {MAX_LOCK_WAIT_S}, not {value!r}")
    return f"{seconds:g}"


def hook_env_file() -> str | None:
    """``slurm_node_hook_env_file``: a plain absolute path (it is written into the hooks)."""
    value = knob("slurm_node_hook_env_file")
    if value is None:
        return None
    path = str(value)
    if not re.fullmatch(r"/[A-Za-z0-9/._+-]+", path):
        raise DeployError(f"{host.name}: slurm_node_hook_env_file must be a plain absolute "
                          f"path, not {value!r}")
    return path


def _env_files(poller: str | None, hook: str | None) -> dict[str, Any]:
    """The files a hook loads first, and why (template arguments). The HealthCheckProgram's
    battery reads the power devices as the scheduled check does, so it loads the poller's
    EnvironmentFile as the cron entry does (its ``env:`` credentials); without them the
    battery exits 2 and the gate never judges the node."""
    why = {}
    if poller:
        why[poller] = "the power poller's credentials, as the scheduled check loads them"
    if hook:
        why[hook] = "slurm_node_hook_env_file"
    return {"env_files": list(why), "env_why": why}


@deploy("nodegate slurm_node: configless slurmd with nodegate's health hooks",
        data_defaults=role_defaults("slurm_node"))
def slurm_node() -> None:
    controller = knob("slurm_node_controller")
    if not controller:
        host.noop("no Slurm controller named for this site (slurm_node_controller): no slurmd")
        return
    try:
        key = read_munge_key("slurm_node")
        lock_wait = prolog_lock_wait()
        env_file = hook_env_file()
        poller_env = health_env_file()
    except DeployError as exc:
        refuse(str(exc).removeprefix(f"{host.name}: "))
        return
    os_ = target_os()
    packages = ["slurmd", "munge"] if os_.is_debian else ["slurm-slurmd", "munge"]
    ensure_packages("slurm_node", packages)
    munge_key = put_secret(name="slurm_node: munge key (by reference)", dest=MUNGE_KEY,
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
    dropin = files.template(name="slurm_node: slurmd starts without a local slurm.conf",
                            src=template("slurm_node", "configless.conf.j2"), dest=DROPIN,
                            mode="644")
    systemd.daemon_reload(name="slurm_node: systemd rereads slurmd's unit",
                          _if=dropin.did_change)
    for path in (SLURMD_SPOOL, SLURM_LOG_DIR):  # slurm.conf's paths; slurmd runs as root
        files.directory(name=f"slurm_node: {path}", path=path, mode="755")
    _stale_gres()
    nodegate = str(knob("slurm_node_nodegate"))
    files.template(name="slurm_node: HealthCheckProgram wrapper",
                   src=template("slurm_node", "healthcheck.sh.j2"), dest=HEALTHCHECK,
                   mode="755", path=HEALTHCHECK, nodegate=nodegate,
                   **_env_files(poller_env, env_file),
                   budget=" ".join(quote(w) for w in gate_args()))
    checks = str(knob("slurm_node_prolog_checks"))
    for kind, path in (("Prolog", PROLOG), ("Epilog", EPILOG)):
        files.template(name=f"slurm_node: {kind.lower()} runs the quick check",
                       src=template("slurm_node", "prolog.sh.j2"), dest=path, mode="755",
                       kind=kind, path=path, nodegate=nodegate, checks=checks,
                       lock_wait=lock_wait, **_env_files(None, env_file))
    # a slurmd this run starts reads the new options anyway: restart only one already running
    running = bool((host.get_fact(SystemdStatus) or {}).get("slurmd.service"))
    systemd.service(name="slurm_node: slurmd enabled and running", service="slurmd.service",
                    running=True, enabled=True)
    if running:
        systemd.service(name="slurm_node: slurmd restarted (its options changed)",
                        service="slurmd.service", restarted=True,
                        _if=lambda: conf_server.did_change() or dropin.did_change())


def _stale_gres() -> None:
    """Remove the node-local gres.conf an earlier slurm_node wrote: configless slurmd never
    reads it (module docstring), so it could only mislead whoever reads the node."""
    ours = host.get_fact(FindInFile, path=LOCAL_GRES, pattern=r"^# Managed by nodegate "
                         r"\(slurm_node role\)")
    if ours:
        files.file(name="slurm_node: the ignored node-local gres.conf removed",
                   path=LOCAL_GRES, present=False)


if is_deploy_file(globals()):
    slurm_node()
