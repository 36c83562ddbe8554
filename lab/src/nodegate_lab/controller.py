"""The lab's Slurm cluster: Debian's slurmctld + munge on ``slurmctl``, slurmd on every node.

Installing Slurm at every ``lab up`` would cost seconds of dpkg per host on each cold start,
so the packages go into *layers*: overlay upper dirs built once (per mirror key and role) by
running real apt inside a throw-away nspawn container with no network but loopback, against
the mirror as a ``file:`` source. A host's root is then ``overlay(lower=layer:base)``: the
controller gets slurmctld + slurm-client + munge, each node slurmd + slurm-client + munge.

Configuration is not written here: ``lab up`` runs ``deploy/slurm.py`` over SSH, i.e. the
slurm_controller role on ``slurmctl`` (slurm.conf, gres.conf, munge key, slurmctld; a node new
to slurm.conf drained ``nodegate: not validated``) and the slurm_node role on every node
(configless slurmd). This module only says what the lab's site file turns on for them
(:func:`controller_data`, :func:`node_data`) and keeps the lab's munge key, a file on the
operator's side that both roles read by path.

Recipe (it works in a container on this kind of machine): proctrack/linuxproc and task/none
(no cgroup delegation), no HealthCheckProgram/Prolog/Epilog (the lab's tests run the gate
themselves: a timed gate on every node would race them), ``CPUs=1 RealMemory=500`` per node
(containers see the host's cores), select/cons_tres, ``GresTypes=gpu``; the nodes' GPU gres
files are the character devices the lab makes for each node with mknod
(``hosts.gpu_devices``), named in the controller's gres.conf.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from nodegate.errors import CannotRunError
from nodegate_lab import config
from nodegate_lab.config import CONTROLLER
from nodegate_lab.proc import ok, run

#: What each kind of lab host gets installed in its Slurm layer.
PACKAGES: dict[str, tuple[str, ...]] = {
    "controller": ("slurmctld", "slurm-client", "munge"),
    "node": ("slurmd", "slurm-client", "munge"),
}
GPUS_PER_NODE = 8


def layer_dir(mirror_dir: Path, kind: str = "controller") -> Path:
    """The built layer of ``kind`` for this mirror (its name carries the mirror's key)."""
    return config.lab_dir() / "base" / f"{kind}-{mirror_dir.name}" / "layer"


def _mounted(path: Path) -> bool:
    return ok(["mountpoint", "-q", str(path)])


def ensure_layer(lower: Path, mirror_dir: Path, kind: str = "controller") -> Path:
    """Build (once) the overlay layer holding ``kind``'s Slurm packages; returns its dir."""
    layer = layer_dir(mirror_dir, kind)
    done = layer.parent / ".complete"
    if done.is_file():
        return layer
    top = layer.parent
    mounts = Path("/proc/self/mounts").read_text()
    for stale in (config.lab_dir() / "base").glob(f"{kind}-mirror-*"):
        # a running host's root still stacks it (overlayfs must not lose a lower layer)
        if stale != top and f"{stale}/" not in mounts:
            shutil.rmtree(stale, ignore_errors=True)
    shutil.rmtree(top, ignore_errors=True)
    merged, work = top / "merged", top / "work"
    for d in (layer, merged, work):
        d.mkdir(parents=True)
    run(["mount", "-t", "overlay", "overlay", "-o",
         f"lowerdir={lower},upperdir={layer},workdir={work}", str(merged)])
    try:
        source = merged / "etc/apt/sources.list.d/nodegate-build.list"
        source.write_text("deb [trusted=yes] file:/srv/mirror ./\n")
        script = ("set -e; export DEBIAN_FRONTEND=noninteractive; apt-get update -qq; "
                  "apt-get install -y -qq --no-install-recommends \"$@\"; apt-get clean")
        # --private-network: only loopback, so this apt can reach nothing but the file: source
        proc = run(["systemd-nspawn", "--quiet", "--register=no", "--keep-unit",
                    "--private-network", f"--directory={merged}", f"--machine=lab-build-{kind}",
                    f"--bind-ro={mirror_dir}:/srv/mirror", "--resolv-conf=off",
                    "--timezone=off", "--link-journal=no", "/bin/sh", "-c", script,
                    "sh", *PACKAGES[kind]], check=False, timeout=900)
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
            raise CannotRunError(f"{kind} layer: apt-get install failed: {' | '.join(tail)}")
        source.unlink()
        for lists in (merged / "var/lib/apt/lists").glob("*_*"):
            lists.unlink()
        # the package's own key would be the same in every lab: each lab writes its own
        (merged / "etc/munge/munge.key").unlink(missing_ok=True)
    finally:
        run(["umount", str(merged)], check=False)
    shutil.rmtree(work, ignore_errors=True)
    merged.rmdir()
    done.write_text(mirror_dir.name + "\n")
    return layer


def munge_key_path() -> Path:
    return config.lab_dir() / "slurm" / "munge.key"


def munge_key() -> bytes:
    """The lab's munge key (made once per lab dir; nodes joining Slurm need the same one)."""
    path = munge_key_path()
    if not path.is_file():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.write_bytes(os.urandom(1024))
        path.chmod(0o400)
    return path.read_bytes()


def controller_data() -> dict[str, object]:
    """slurm_controller's knobs for ``slurmctl`` (the site file's host ``data:``)."""
    return {"slurm_controller_enabled": True,
            "slurm_controller_munge_key_file": str(munge_key_path()),
            "slurm_controller_proctrack": "proctrack/linuxproc",
            "slurm_controller_task_plugin": "task/none",
            "slurm_controller_health_check": False,
            "slurm_controller_prolog_epilog": False}


def node_data() -> dict[str, object]:
    """slurm_node's knobs for every node (the site file's ``defaults.data``)."""
    return {"slurm_node_controller": CONTROLLER.name,
            "slurm_node_munge_key_file": str(munge_key_path()),
            "slurm_node_cpus": 1, "slurm_node_real_memory": 500,
            # the simulated driver's environment (services.py writes it there): slurmd runs
            # the prolog, epilog and health check without it
            "slurm_node_hook_env_file": "/etc/environment",
            "slurm_node_gpu_count": GPUS_PER_NODE}
