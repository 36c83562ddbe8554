"""The lab's Slurm cluster: Debian's slurmctld + munge on ``slurmctl``, slurmd on every node.

Installing Slurm at every ``lab up`` would cost seconds of dpkg per host on each cold start,
so the packages go into *layers*: overlay upper dirs built once (per mirror key and role) by
running real apt inside a throw-away nspawn container with no network but loopback, against
the mirror as a ``file:`` source. A host's root is then ``overlay(lower=layer:base)``: the
controller gets slurmctld + slurm-client + munge, each node slurmd + slurm-client + munge.

``lab up`` provisions the nodes' slurmd itself (no pyinfra role does yet): slurm.conf,
gres.conf and the lab's munge key are written into every host before it boots, so a node
registers with slurmctld as soon as it is up and ``scontrol``/``sinfo`` work on the node
(``nodegate gate`` runs there). A node is drained with :data:`INITIAL_REASON` the first time
the controller sees it; the gate's resume is what puts it in service (docs/gate.md).

Recipe (it works in a container on this kind of machine): proctrack/linuxproc and task/none
(no cgroup delegation), select/cons_tres, ``GresTypes=gpu``; the nodes' GPU gres files are
the character devices the lab makes for each node with mknod (see ``hosts.gpu_devices``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from nodegate.errors import CannotRunError
from nodegate_lab import config
from nodegate_lab.config import CONTROLLER, Member
from nodegate_lab.proc import ok, run

#: What each kind of lab host gets installed in its Slurm layer.
PACKAGES: dict[str, tuple[str, ...]] = {
    "controller": ("slurmctld", "slurm-client", "munge"),
    "node": ("slurmd", "slurm-client", "munge"),
}
#: The drain every node starts with: nodegate's own, so the gate may lift it (docs/gate.md).
INITIAL_REASON = "nodegate: not validated"
CLUSTER_NAME = "lab"
PARTITION = "gpu"
GPUS_PER_NODE = 8
SLURMCTLD_PORT = 6817
SLURMD_PORT = 6818


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


def slurm_conf(nodes: list[Member]) -> str:
    """The lab cluster's slurm.conf: controller ``slurmctl``, partition ``gpu`` of all nodes."""
    lines = [
        "# generated by `nodegate-lab up` (lab/src/nodegate_lab/controller.py)",
        f"ClusterName={CLUSTER_NAME}",
        f"SlurmctldHost={CONTROLLER.name}({CONTROLLER.address})",
        f"SlurmctldPort={SLURMCTLD_PORT}",
        f"SlurmdPort={SLURMD_PORT}",
        "SlurmUser=slurm",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        "StateSaveLocation=/var/lib/slurm/slurmctld",
        "SlurmdSpoolDir=/var/lib/slurm/slurmd",
        "SlurmctldPidFile=/run/slurmctld.pid",
        "SlurmdPidFile=/run/slurmd.pid",
        "SlurmctldLogFile=/var/log/slurm/slurmctld.log",
        "SlurmdLogFile=/var/log/slurm/slurmd.log",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "MpiDefault=none",
        "ReturnToService=2",
        "SlurmdTimeout=60",
        "GresTypes=gpu",
    ]
    for member in nodes:
        lines.append(f"NodeName={member.name} NodeAddr={member.address} CPUs=1 RealMemory=500 "
                     f"Gres=gpu:{GPUS_PER_NODE} State=UNKNOWN")
    names = ",".join(m.name for m in nodes)
    lines.append(f"PartitionName={PARTITION} Nodes={names} Default=YES MaxTime=INFINITE "
                 "State=UP")
    return "\n".join(lines) + "\n"


def gres_conf() -> str:
    """gres.conf for a lab node: the character devices the lab binds into it."""
    return f"Name=gpu File=/dev/nvidia[0-{GPUS_PER_NODE - 1}]\n"


def _ids(root: Path, user: str) -> tuple[int, int]:
    for line in (root / "etc/passwd").read_text().splitlines():
        parts = line.split(":")
        if parts[0] == user:
            return int(parts[2]), int(parts[3])
    raise CannotRunError(f"Slurm layer has no user {user!r} (rebuild: lab down --purge)")


def configure(root: Path, nodes: list[Member], kind: str = "controller") -> bool:
    """Write slurm.conf (+ gres.conf on a node) and the munge key into a host's tree.

    Returns True when slurm.conf changed (a running daemon must then reread it). The same
    files are published under ``lab_dir()/slurm`` for a role or an operator to copy.
    """
    conf_text = slurm_conf(nodes)
    published = config.lab_dir() / "slurm" / "slurm.conf"
    published.parent.mkdir(parents=True, exist_ok=True)
    published.write_text(conf_text)
    (config.lab_dir() / "slurm" / "gres.conf").write_text(gres_conf())
    conf = root / "etc/slurm/slurm.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    changed = not conf.is_file() or conf.read_text() != conf_text
    if changed:
        conf.write_text(conf_text)
    if kind == "node":
        gres = root / "etc/slurm/gres.conf"
        if not gres.is_file() or gres.read_text() != gres_conf():
            gres.write_text(gres_conf())
    key = root / "etc/munge/munge.key"
    uid, gid = _ids(root, "munge")
    key.parent.mkdir(parents=True, exist_ok=True)
    if not key.is_file() or key.read_bytes() != munge_key():
        key.write_bytes(munge_key())
    os.chown(key, uid, gid)
    key.chmod(0o400)
    if kind == "controller":
        suid, sgid = _ids(root, "slurm")
        for sub in ("var/lib/slurm/slurmctld", "var/log/slurm"):
            (root / sub).mkdir(parents=True, exist_ok=True)
            os.chown(root / sub, suid, sgid)
    else:  # slurmd runs as root
        for sub in ("var/lib/slurm/slurmd", "var/log/slurm"):
            (root / sub).mkdir(parents=True, exist_ok=True)
    return changed


def _joined_path() -> Path:
    """Nodes this controller has already given their initial drain (gone with the host)."""
    return CONTROLLER.dir / "slurm-joined"


def joined() -> set[str]:
    path = _joined_path()
    return set(path.read_text().split()) if path.is_file() else set()


def mark_joined(names: set[str]) -> None:
    """Record the nodes the controller now knows (a removed node is dropped from the list)."""
    _joined_path().write_text("".join(f"{n}\n" for n in sorted(names)))


def drain_argv(node: str) -> list[str]:
    """The initial drain, as the gate's adapter would send it (one node, argv only)."""
    return ["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={INITIAL_REASON}"]
