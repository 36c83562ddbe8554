"""One lab host on disk and in the kernel: overlay root, identity, disks, board, supervisor.

The root is an overlayfs whose lower layer is the extracted base (shared, never written) and
whose upper layer is the host's own: machine-id, hostname, SSH host key and everything the
roles later install land there and vanish with ``lab down``.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

from nodegate_lab.config import Member
from nodegate_lab.proc import ok, run, source_env

SIM_DIR_IN_NODE = "/var/lib/nodegate-sim/board"
SIM_LIB_IN_NODE = "/opt/nodegate-sim/lib"


def mounted(path: Path) -> bool:
    """True when ``path`` is a mount point (a host's root while the host is mounted)."""
    return ok(["mountpoint", "-q", str(path)])


def mount_root(member: Member, lowers: list[Path]) -> Path:
    """Mount (once) the host's overlay root; ``lowers`` top first; returns the merged tree."""
    root, upper, work = member.dir / "root", member.dir / "upper", member.dir / "work"
    for d in (root, upper, work):
        d.mkdir(parents=True, exist_ok=True)
    if not mounted(root):
        lowerdir = ":".join(str(p) for p in lowers)
        run(["mount", "-t", "overlay", "overlay", "-o",
             f"lowerdir={lowerdir},upperdir={upper},workdir={work}", str(root)])
    return root


GPU_MAJOR = 195  # NVIDIA's character major; nvidiactl is minor 255


def gpu_devices(member: Member, count: int = 8) -> list[str]:
    """Character devices /dev/nvidia0..N-1 and /dev/nvidiactl for the node (nspawn binds).

    No driver answers them (opening gives ENXIO); they exist so Slurm's GPU gres and tools
    that look for /dev/nvidia* find the files a real node has. Made with mknod on the host
    because a container may not create device nodes itself.
    """
    dev_dir = member.dir / "dev"
    dev_dir.mkdir(parents=True, exist_ok=True)
    binds = []
    for name, minor in [*((f"nvidia{i}", i) for i in range(count)), ("nvidiactl", 255)]:
        path = dev_dir / name
        if not path.exists():
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(GPU_MAJOR, minor))
            path.chmod(0o666)  # as the NVIDIA driver makes them (mknod is subject to umask)
        binds.append(f"{path}:/dev/{name}")
    return binds


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def host_key(member: Member) -> str:
    """The host's SSH host key pair (made once, kept for the host's life); returns the pub."""
    key = member.dir / "ssh_host_ed25519_key"
    if not key.is_file():
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{member.name}",
             "-f", str(key)])
    return Path(f"{key}.pub").read_text().strip()


def machine_id(member: Member) -> str:
    """A unique machine id per host, stable across reboots and repeated ``lab up``."""
    path = member.dir / "machine-id"
    if not path.is_file():
        path.write_text(uuid.uuid4().hex + "\n")
    return path.read_text().strip()


def write_identity(member: Member, root: Path, authorized_key: str, hosts_lines: list[str],
                   sim_env: dict[str, str] | None) -> None:
    """Everything that makes this tree *this* host, written into the upper layer."""
    _write(root / "etc/machine-id", machine_id(member) + "\n", 0o444)
    _write(root / "etc/hostname", member.name + "\n")
    _write(root / "etc/hosts", "127.0.0.1 localhost\n" + "".join(f"{h}\n" for h in hosts_lines))
    _write(root / "etc/resolv.conf", "# the lab has no DNS: /etc/hosts names every lab host\n")
    ssh_dir = root / "root/.ssh"
    ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    _write(ssh_dir / "authorized_keys", authorized_key + "\n", 0o600)
    host_key(member)
    key = member.dir / "ssh_host_ed25519_key"
    _write(root / "etc/ssh/ssh_host_ed25519_key", key.read_text(), 0o600)
    _write(root / "etc/ssh/ssh_host_ed25519_key.pub", Path(f"{key}.pub").read_text())
    _write(root / "etc/ssh/sshd_config.d/nodegate-hostkey.conf",
           "HostKey /etc/ssh/ssh_host_ed25519_key\n")
    env_lines = "".join(f"{k}={v}\n" for k, v in sorted((sim_env or {}).items()))
    _write(root / "etc/environment", env_lines)
    profile = "".join(f"export {k}='{v}'\n" for k, v in sorted((sim_env or {}).items()))
    _write(root / "etc/profile.d/nodegate-sim.sh",
           "# the simulated GPU board of this lab node (nodegate lab)\n" + profile)


def board_env(member: Member, spec: str, *, fresh: bool) -> tuple[dict[str, str], Path, Path]:
    """Prepare the node's board on the host (``fresh``: only for a host not running, so a
    repeated ``lab up`` never resets a live board); return (env inside, state dir, lib dir)."""
    from nodegate.sim.build import ensure_built
    from nodegate.sim.runtime import (
        ENV_BOOT_ID,
        ENV_KERNEL_LOG,
        ENV_SIM_DIR,
        ENV_SYSFS_ROOT,
        prepare,
    )

    state_dir = member.dir / "board"
    state_dir.mkdir(parents=True, exist_ok=True)
    if fresh or not (state_dir / "state").is_file():
        prepare(spec, state_dir)
    inside: dict[str, str] = {"LD_LIBRARY_PATH": SIM_LIB_IN_NODE, ENV_SIM_DIR: SIM_DIR_IN_NODE,
                              ENV_KERNEL_LOG: f"{SIM_DIR_IN_NODE}/kernel.log",
                              ENV_BOOT_ID: f"{SIM_DIR_IN_NODE}/boot_id",
                              # the board's PCIe/RDMA tree (sim.sysfs), read by the rail checks
                              ENV_SYSFS_ROOT: f"{SIM_DIR_IN_NODE}/sysfs"}
    (member.dir / "spec").write_text(spec + "\n")
    return inside, state_dir.resolve(), ensure_built()


def nspawn_argv(member: Member, root: Path, netns: Path, binds: list[str],
                binds_ro: list[str]) -> list[str]:
    """The nspawn command line: real systemd as PID 1 in the host's own namespace.

    ``--register=no --keep-unit``: this machine's PID 1 is not systemd, so there is no
    machined to register with and no unit manager to create a scope.
    """
    argv = ["systemd-nspawn", "--quiet", "--boot", f"--directory={root}",
            f"--machine={member.name}", f"--hostname={member.name}",
            f"--uuid={uuid.UUID(machine_id(member))}",
            "--register=no", "--keep-unit", f"--network-namespace-path={netns}",
            "--console=read-only", "--link-journal=no", "--resolv-conf=off",
            "--timezone=off"]
    argv += [f"--bind={b}" for b in binds]
    argv += [f"--bind-ro={b}" for b in binds_ro]
    return argv


def start(member: Member, argv: list[str], board: dict[str, str | bool] | None) -> None:
    """Start the host's supervisor, detached, unless one is already running."""
    if supervisor_pid(member) is not None:
        return
    from nodegate_lab import cgroups

    spec = {"argv": argv, "board": board, "cgroup": cgroups.host_group(member.name)}
    (member.dir / "supervisor.json").write_text(json.dumps(spec, indent=1) + "\n")
    (member.dir / "last-exit").unlink(missing_ok=True)
    with (member.dir / "supervisor.log").open("ab") as log:
        subprocess.Popen([sys.executable, "-m", "nodegate_lab.supervisor", str(member.dir)],
                         stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=source_env(),
                         start_new_session=True, close_fds=True)
    deadline = time.monotonic() + 10
    while supervisor_pid(member) is None and time.monotonic() < deadline:
        time.sleep(0.05)


def _pid(path: Path) -> int | None:
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    return pid


def supervisor_pid(member: Member) -> int | None:
    return _pid(member.dir / "supervisor.pid")


def nspawn_pid(member: Member) -> int | None:
    return _pid(member.dir / "nspawn.pid")


def running_sim_lib(member: Member) -> str | None:
    """The simulated driver library the running host was booted with (its nspawn bind onto
    ``SIM_LIB_IN_NODE``, as its supervisor recorded it); None when not known."""
    try:
        argv = json.loads((member.dir / "supervisor.json").read_text()).get("argv") or []
    except (OSError, ValueError, AttributeError):
        return None
    suffix = f":{SIM_LIB_IN_NODE}"
    return next((str(a)[len("--bind-ro="):-len(suffix)] for a in argv
                 if str(a).startswith("--bind-ro=") and str(a).endswith(suffix)), None)


def stop(member: Member, timeout_s: float = 30.0) -> None:
    """Ask the supervisor to power the host off; kill what is left after ``timeout_s``."""
    pid = supervisor_pid(member)
    if pid is None:
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and supervisor_pid(member) is not None:
        time.sleep(0.1)
    for left in (nspawn_pid(member), supervisor_pid(member)):
        if left is not None:
            os.kill(left, signal.SIGKILL)


def unmount(member: Member) -> None:
    """Unmount everything under the host's root (deepest first), then the overlay."""
    root = member.dir / "root"
    mounts = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        target = line.split()[1].replace("\\040", " ")
        if target == str(root) or target.startswith(f"{root}/"):
            mounts.append(target)
    for target in sorted(mounts, key=len, reverse=True):
        run(["umount", target], check=False)
        if mounted(Path(target)):
            run(["umount", "-l", target])
