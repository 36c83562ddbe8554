"""Bring the lab up, report on it, tear it down: the operations behind ``nodegate-lab``."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from nodegate.errors import CannotRunError, ConfigError
from nodegate_lab import config, disks, hosts, net
from nodegate_lab.config import CONTROLLER, Member
from nodegate_lab.proc import need, run

BOOT_TIMEOUT_S = 90.0


def require_root() -> None:
    """The lab mounts, creates namespaces and boots containers: root only."""
    if os.geteuid() != 0:
        raise CannotRunError("the lab needs root (namespaces, mounts, loop devices, nspawn); "
                             "run `sudo nodegate-lab ...`")
    need("systemd-nspawn", "ip", "ssh", "ssh-keygen", "losetup", "mount", "tar")


def key_path() -> Path:
    return config.lab_dir() / "ssh" / "id_ed25519"


def known_hosts_path() -> Path:
    return config.lab_dir() / "ssh" / "known_hosts"


def ensure_key() -> str:
    """The lab's SSH client key (made once); returns the public half."""
    key = key_path()
    key.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not key.is_file():
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "nodegate-lab", "-f",
             str(key)])
    return Path(f"{key}.pub").read_text().strip()


def ssh_argv(member: Member, *, tty: bool = False) -> list[str]:
    """ssh to a lab host with the lab key and the lab's own known_hosts (strict)."""
    return ["ssh", "-i", str(key_path()), "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
            "-o", f"UserKnownHostsFile={known_hosts_path()}", "-o", "StrictHostKeyChecking=yes",
            "-o", "ConnectTimeout=3", "-o", "LogLevel=ERROR", *(["-t"] if tty else ["-T"]),
            f"root@{member.address}"]


def parse_faults(tokens: list[str], count: int) -> dict[str, list[str]]:
    """``node2:xid79@gpu6`` -> {"node2": ["xid79@gpu6"]}; names must be lab nodes."""
    out: dict[str, list[str]] = {}
    for token in tokens:
        name, sep, fault = token.partition(":")
        valid = {config.node(i).name for i in range(1, count + 1)}
        if not sep or not fault or name not in valid:
            raise ConfigError(f"--fault wants NODE:FAULT with NODE one of "
                              f"{', '.join(sorted(valid))}", key=f"--fault {token}")
        out.setdefault(name, []).append(fault)
    return out


def existing_members() -> list[Member]:
    """Hosts that have state on disk (whatever --nodes said when they were made)."""
    root = config.lab_dir() / "hosts"
    found: list[Member] = []
    if not root.is_dir():
        return found
    for path in sorted(root.iterdir()):
        if path.name == CONTROLLER.name:
            found.append(CONTROLLER)
        elif path.name.startswith("node") and path.name[4:].isdigit():
            found.append(config.node(int(path.name[4:])))
    return sorted(found, key=lambda m: m.index)


def _members(count: int) -> list[Member]:
    return [CONTROLLER, *(config.node(i) for i in range(1, count + 1))]


@dataclass
class UpResult:
    site_file: Path
    members: list[Member]
    started: list[str] = field(default_factory=list)
    seconds: float = 0.0


def up(count: int = 2, fault_tokens: list[str] | None = None,
       scenario: str = config.DEFAULT_SCENARIO, *, with_mirror: bool = True) -> UpResult:
    """Make the lab match ``count`` nodes (idempotent): build/boot what is missing, wait for SSH.

    Serialised with any other ``up``/``down`` of this lab instance (``lock.exclusive``), and
    refused while another lab dir's lab holds this instance's network (``lock.claim``).
    """
    t0 = time.monotonic()
    require_root()
    if not 1 <= count <= config.MAX_NODES:
        raise ConfigError(f"--nodes must be 1..{config.MAX_NODES}", key="--nodes")
    faults = parse_faults(fault_tokens or [], count)
    from nodegate_lab import lock

    with lock.exclusive("up"):
        lock.claim()
        return _up(count, faults, scenario, with_mirror, t0)


def baseline_shape() -> dict[str, object] | None:
    """The lab's shape (nodes, faults, scenario, mirror) when its baseline was taken, when
    every host has one (``snapshot``); None otherwise. What ``reset`` brings back."""
    from nodegate_lab import baseline

    members = existing_members()
    if not members or not all(baseline.has(m) for m in members):
        return None
    return baseline.read_shape(baseline.BASELINE_SHAPE)


def snapshot() -> UpResult:
    """Make the lab's state as it is now its baseline (``nodegate_lab.baseline``): every host
    is powered off, its upper layer becomes a read-only layer under a fresh one, and it boots
    again. Refused while any host already has a baseline."""
    t0 = time.monotonic()
    require_root()
    from nodegate_lab import baseline, lock

    with lock.exclusive("snapshot"):
        members = existing_members()
        if not members:
            raise CannotRunError("lab snapshot: the lab is down (run `nodegate-lab up`)")
        taken = [m.name for m in members if baseline.has(m)]
        if taken:
            raise CannotRunError(f"lab snapshot: {', '.join(taken)} already ha"
                                 f"{'s' if len(taken) == 1 else 've'} a baseline; "
                                 "`nodegate-lab reset` goes back to it, `down` drops it")
        shape = baseline.read_shape()
        baseline.write_shape(shape, baseline.BASELINE_SHAPE)
        return _or_down("snapshot", lambda: _rebase(members, shape, baseline.take, t0))


def reset(fault_tokens: list[str] | None = None) -> UpResult:
    """Put the lab back to its baseline with these faults (none: every board healthy): every
    host powered off, what it wrote since the baseline dropped, boards prepared afresh, booted
    again. The node count and scenario are the baseline's. A lab without a baseline is
    refused before anything is touched; a reset that fails half way takes the lab down."""
    t0 = time.monotonic()
    require_root()
    from nodegate_lab import baseline, lock

    with lock.exclusive("reset"):
        members = existing_members()
        missing = [m.name for m in members if not baseline.has(m)]
        if not members or missing:
            raise CannotRunError("lab reset: no baseline to go back to"
                                 + (f" on {', '.join(missing)}" if members else
                                    " (the lab is down)")
                                 + "; run `nodegate-lab snapshot` on a lab that is up")
        shape = baseline.read_shape(baseline.BASELINE_SHAPE)
        count = int(str(shape["nodes"]))
        if sorted(m.name for m in members) != sorted(m.name for m in _members(count)):
            raise CannotRunError(f"lab reset: the hosts ({', '.join(m.name for m in members)})"
                                 f" are not the baseline's {count} nodes and controller")
        faults = parse_faults(fault_tokens or [], count)
        shape = {**shape, "faults": faults}
        return _or_down("reset", lambda: _rebase(members, shape, baseline.drop_changes, t0))


def _rebase(members: list[Member], shape: dict[str, object],
            layer_step: Callable[[Member], None], t0: float) -> UpResult:
    """Power every host off, unmount it, apply ``layer_step`` to its layers, and bring the
    lab up again in ``shape`` (Slurm's configuration is the baseline's: only waited for)."""
    with ThreadPoolExecutor(max_workers=len(members)) as pool:
        list(pool.map(hosts.stop, members))
    for member in members:
        if hosts.supervisor_pid(member) is not None:
            raise CannotRunError("did not power off", host=member.name)
        hosts.unmount(member)
        layer_step(member)
    faults = shape["faults"]
    assert isinstance(faults, dict)
    return _up(int(str(shape["nodes"])), faults, str(shape["scenario"]),
               bool(shape["with_mirror"]), t0, converge_slurm=False)


def _or_down(what: str, step: Callable[[], UpResult]) -> UpResult:
    """Run ``step``; when it fails, take the lab down (never a half-restored lab) and say so."""
    try:
        return step()
    except BaseException as exc:
        _down()
        from nodegate_lab import lock

        if lock.owns_network():
            net.teardown()
            lock.release()
        raise CannotRunError(f"lab {what} failed, so the lab was taken down "
                             f"(`nodegate-lab up` builds it again): {exc}") from exc


@dataclass
class _Boot:
    """What ``lab up`` shares across its hosts, and what the per-host steps collect for the
    waits and the site file that follow."""

    lower: Path
    pub: str
    members: list[Member]
    nodes: list[Member]
    scenario: str
    faults: dict[str, list[str]]
    with_mirror: bool
    mirror_dir: Path | None
    hosts_lines: list[str]
    specs: dict[str, str] = field(default_factory=dict)
    disk_ids: dict[str, list[str]] = field(default_factory=dict)
    started: list[str] = field(default_factory=list)


def _up(count: int, faults: dict[str, list[str]], scenario: str, with_mirror: bool,
        t0: float, *, converge_slurm: bool = True) -> UpResult:
    from nodegate_lab import base, baseline, mirror, services, sitefile

    lower = base.extracted(base.build())
    pub = ensure_key()
    members = _members(count)
    nodes = [m for m in members if m.kind == "node"]
    for extra in existing_members():
        if extra not in members:
            _remove(extra)
    net.ensure_bridge()
    mirror_dir = mirror.build() if with_mirror else None
    if mirror_dir is not None:
        services.start_mirror(mirror_dir)
    pdu_started = services.start_pdu()
    hosts_lines = [f"{config.HOST_ADDRESS} labhost mirror"]
    hosts_lines += [f"{m.address} {m.name}" for m in members]
    boot = _Boot(lower, pub, members, nodes, scenario, faults, with_mirror, mirror_dir,
                 hosts_lines)
    for member in members:
        _bring_up(member, boot)
    _wait_ready(boot)
    if pdu_started:
        services.wait_pdu()
    if mirror_dir is not None:
        from nodegate_lab import controller

        controller.munge_key()  # made once per lab dir; the Slurm roles read it by path
    site = sitefile.write(sitefile.site_data(
        nodes, boot.specs, boot.disk_ids, key_path(), known_hosts_path(),
        with_pdu=pdu_started, with_mirror=with_mirror,
        nodegate_version=mirror.nodegate_version(mirror_dir) if mirror_dir else None))
    baseline.write_shape({"nodes": count, "faults": faults, "scenario": scenario,
                          "with_mirror": with_mirror})
    if mirror_dir is not None and converge_slurm:
        _deploy_slurm(site, nodes)
    elif mirror_dir is not None:  # the baseline's Slurm: its units must come back by themselves
        _wait_unit(CONTROLLER, "slurmctld", 60)
        for member in nodes:
            _wait_unit(member, "slurmd", 60)
    return UpResult(site, members, boot.started, time.monotonic() - t0)


def _bring_up(member: Member, boot: _Boot) -> None:
    """Mount the host's root, write what makes it this host, and boot it unless running."""
    from nodegate_lab import baseline, controller, mirror

    netns = net.ensure_host(member)
    lowers = [boot.lower]
    if boot.mirror_dir is not None:  # Slurm packages: slurmctld or slurmd, munge, client
        lowers.insert(0, controller.ensure_layer(boot.lower, boot.mirror_dir, member.kind))
    lowers[:0] = baseline.layers(member)  # the host's baseline (``snapshot``), when it has one
    root = hosts.mount_root(member, lowers)
    binds: list[str] = []
    binds_ro: list[str] = []
    board: dict[str, str | bool] | None = None
    env: dict[str, str] | None = None
    if member.kind == "node":
        board, env = _prepare_node(member, root, boot, binds, binds_ro)
    hosts.write_identity(member, root, boot.pub, boot.hosts_lines, env)
    source = root / "etc/apt/sources.list.d/nodegate-lab.list"
    if boot.with_mirror:
        source.write_text(mirror.apt_source())
    else:
        source.unlink(missing_ok=True)
    if hosts.supervisor_pid(member) is None:
        hosts.start(member, hosts.nspawn_argv(member, root, netns, binds, binds_ro), board)
        boot.started.append(member.name)


def _stale_simulator(member: Member) -> bool:
    """The running host's simulated driver library is not the one this checkout builds."""
    from nodegate.sim.build import ensure_built

    booted = hosts.running_sim_lib(member)
    return booted is not None and Path(booted) != ensure_built()


def _prepare_node(member: Member, root: Path, boot: _Boot, binds: list[str],
                  binds_ro: list[str]) -> tuple[dict[str, str | bool], dict[str, str]]:
    """A node's simulated board, disks, GPU device nodes and BMC; appends the node's binds and
    returns (the supervisor's board record, the simulator env inside the node)."""
    from nodegate_lab import controller, services

    spec = "+".join([boot.scenario, *boot.faults.get(member.name, [])])
    boot.specs[member.name] = spec
    running = hosts.supervisor_pid(member) is not None
    if running and _stale_simulator(member):
        # booted on another checkout's simulated driver (a lab left up before a pull): that
        # library may not read today's boards. Power the host and its BMC off; both boot
        # below on this checkout's build, the board prepared afresh.
        hosts.stop(member)
        services.stop(f"bmc-{member.name}")
        running = False
    env, state_dir, lib_dir = hosts.board_env(member, spec, fresh=not running)
    board: dict[str, str | bool] = {
        "spec": spec, "state_dir": str(state_dir),
        "fabric_needs_manager": boot.with_mirror and "fabric-" not in spec}
    binds.append(f"{state_dir}:{hosts.SIM_DIR_IN_NODE}")
    binds_ro.append(f"{lib_dir}:{hosts.SIM_LIB_IN_NODE}")
    node_disks = disks.ensure(member)
    boot.disk_ids[member.name] = [d.by_id for d in node_disks]
    binds += [d.loop for d in node_disks]
    binds += hosts.gpu_devices(member, controller.GPUS_PER_NODE)
    tmpfiles = root / "etc/tmpfiles.d/nodegate-lab-disks.conf"
    tmpfiles.parent.mkdir(parents=True, exist_ok=True)
    tmpfiles.write_text(disks.tmpfiles(node_disks))
    services.start_bmc(member, lib_dir, state_dir)
    pki = services.bmc_ca_path().parent
    if pki.is_dir():  # the BMC CA at the same path on the node (site file ca_bundle)
        binds_ro.append(f"{pki}:{pki}")
    return board, env


def _wait_ready(boot: _Boot) -> None:
    """Pin the host keys, wait for SSH and for the nodes' BMCs."""
    from nodegate_lab import services

    members = boot.members
    known = "".join(f"{m.address},{m.name} {hosts.host_key(m)}\n" for m in members)
    known_hosts_path().write_text(known)
    _wait_ssh(members)
    services.wait_bmcs(boot.nodes)


def _deploy_slurm(site: Path, nodes: list[Member], timeout_s: float = 600) -> None:
    """Configure the lab's Slurm with nodegate's own roles: ``pyinfra inventory.py
    deploy/slurm.py`` over the lab's SSH (slurm_controller on slurmctl, slurm_node on every
    node; the site file turns them on). A converged lab changes nothing; a node new to
    slurm.conf is drained ``nodegate: not validated`` by the controller role, so a node the
    gate resumed stays in service across re-runs. Then every node's slurmd must be running."""
    from nodegate_lab import deploys

    done = deploys.run_deploy(deploys.lab_env(site), timeout_s=timeout_s,
                              deploy="deploy/slurm.py")
    if done.failure:
        raise CannotRunError(f"the Slurm roles (deploy/slurm.py) failed: {done.failure}:\n"
                             f"{done.tail(15)}", host=CONTROLLER.name)
    for member in nodes:
        _wait_unit(member, "slurmd", 30)


def _ssh(member: Member, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run one command on a lab host as root over the lab's SSH (argv quoted for the shell)."""
    import shlex

    return subprocess.run([*ssh_argv(member), shlex.join(argv)], capture_output=True,
                          text=True, check=False, timeout=timeout)


def _wait_unit(member: Member, unit: str, timeout_s: float = 60.0) -> None:
    """Wait until ``unit`` is active on the host; fail naming its last log lines."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _ssh(member, "systemctl", "is-active", "--quiet", unit).returncode == 0:
            return
        time.sleep(0.3)
    log = _ssh(member, "journalctl", "-u", unit, "-n", "3", "--no-pager", "-q").stdout
    raise CannotRunError(f"{unit} not active after {timeout_s:.0f} s: "
                         f"{' | '.join(log.strip().splitlines())}", host=member.name)


def port_open(address: str, port: int = 22) -> bool:
    try:
        with socket.create_connection((address, port), timeout=0.5):
            return True
    except OSError:
        return False


def _wait_one(member: Member, deadline: float) -> None:
    while time.monotonic() < deadline:
        if hosts.supervisor_pid(member) is None:
            log = member.dir / "console.log"
            tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() \
                else []
            raise CannotRunError(f"{member.name} stopped while booting: {' | '.join(tail)}",
                                 host=member.name)
        if port_open(member.address):
            proc = subprocess.run([*ssh_argv(member), "true"], capture_output=True,
                                  check=False, timeout=15)
            if proc.returncode == 0:
                return
        time.sleep(0.2)
    raise CannotRunError(f"no SSH after {BOOT_TIMEOUT_S:.0f} s (see {member.dir}/console.log)",
                         host=member.name)


def _wait_ssh(members: list[Member]) -> None:
    deadline = time.monotonic() + BOOT_TIMEOUT_S
    with ThreadPoolExecutor(max_workers=len(members)) as pool:
        for future in [pool.submit(_wait_one, m, deadline) for m in members]:
            future.result()


def _remove(member: Member) -> None:
    """Power off one host and remove every trace of it (its upper layer included)."""
    hosts.stop(member)
    hosts.unmount(member)
    if member.kind == "node":
        disks.release(member)
    from nodegate_lab import lock

    # the namespace names are the instance's: only the network's owner may delete them
    if net.netns_path(member.netns).exists() and lock.owns_network():
        run(["ip", "netns", "del", member.netns], check=False)
    shutil.rmtree(member.dir, ignore_errors=True)
    from nodegate_lab import cgroups

    cgroups.remove(cgroups.host_group(member.name))


def down(*, purge: bool = False) -> list[str]:
    """Stop every host and remove mounts, loops, namespaces and links; returns leftovers.

    The network is torn down only by the lab dir that owns it (``lock.owns_network``).
    """
    require_root()
    from nodegate_lab import lock

    with lock.exclusive("down"):
        _down()
        if lock.owns_network():
            net.teardown()
            lock.release()
    if purge:
        shutil.rmtree(config.lab_dir(), ignore_errors=True)
    return leftovers()


def _down() -> None:
    members = existing_members()
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, len(members))) as pool:
        list(pool.map(hosts.stop, members))
    t1 = time.monotonic()
    for member in members:
        _remove(member)
    if members:  # where a slow down spends its time (a guest's poweroff, or the removal)
        print(f"lab down: {len(members)} hosts powered off in {t1 - t0:.1f} s, removed in "
              f"{time.monotonic() - t1:.1f} s", flush=True)
    from nodegate_lab import services, sitefile

    services.stop_all()
    sitefile.site_path().unlink(missing_ok=True)
    from nodegate_lab import cgroups

    cgroups.remove(cgroups.instance_group())


def leftovers() -> list[str]:
    """What the lab still holds in the kernel: must be empty after ``down``."""
    found: list[str] = []
    prefix = str(config.lab_dir())
    for line in Path("/proc/self/mounts").read_text().splitlines():
        target = line.split()[1]
        if target.startswith(prefix + "/"):
            found.append(f"mount {target}")
    found += [f"netns {ns}" for ns in net.lab_namespaces()]
    links = run(["ip", "-o", "link", "show"]).stdout
    for line in links.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if config.owns_link(name):
            found.append(f"link {name}")
    found += [f"loop {loop}" for loop in disks.lab_loops()]
    from nodegate_lab import cgroups

    found += cgroups.leftovers()
    for pid_dir in Path("/proc").iterdir():
        if not pid_dir.name.isdigit() or int(pid_dir.name) == os.getpid():
            continue
        try:
            cmdline = (pid_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        # this lab's only: its dir or its subnet is on the command line (another may run)
        ours = ("nodegate_lab.supervisor", "nodegate_lab.pdu_agent", "systemd-nspawn")
        service = ("http.server", "nodegate_lab.bmc_emulator")
        if (any(o in cmdline for o in ours) and f"{prefix}/" in cmdline) or (
                any(s in cmdline for s in service) and f"{config.SUBNET_PREFIX}." in cmdline):
            found.append(f"process {pid_dir.name} {cmdline.strip()[:80]}")
    return found


@dataclass
class HostStatus:
    name: str
    kind: str
    address: str
    state: str
    boots: int
    detail: str


def status() -> list[HostStatus]:
    """One line per lab host: running or not, SSH up, boots, board spec."""
    require_root()
    rows = []
    for member in existing_members():
        sup = hosts.supervisor_pid(member)
        if sup is None:
            state = "stopped"
        elif port_open(member.address):
            state = "running"
        else:
            state = "booting"
        boots_file = member.dir / "boots"
        boots = int(boots_file.read_text()) if boots_file.is_file() else 0
        spec_file = member.dir / "spec"
        detail = spec_file.read_text().strip() if spec_file.is_file() else "-"
        if member.kind == "controller":
            detail = _controller_detail(state)
        rows.append(HostStatus(member.name, member.kind, member.address, state, boots, detail))
    return rows


def _controller_detail(state: str) -> str:
    """slurmctld's and munge's state and the nodes Slurm knows by state, read over SSH."""
    if state != "running":
        return "slurm controller host"
    units = _ssh(CONTROLLER, "systemctl", "is-active", "slurmctld", "munge",
                 timeout=15).stdout.split()
    if units != ["active", "active"]:
        shown = "/".join(units) or "absent"
        return f"slurmctld/munge {shown} (lab up --no-mirror has no Slurm)"
    out = _ssh(CONTROLLER, "sinfo", "-h", "-N", "-o", "%N %T", timeout=15).stdout
    by_state: dict[str, set[str]] = {}
    for line in out.splitlines():
        name, _, node_state = line.partition(" ")
        by_state.setdefault(node_state.strip(), set()).add(name)
    total = len(set().union(*by_state.values())) if by_state else 0
    states = ", ".join(f"{len(v)} {k}" for k, v in sorted(by_state.items()))
    return (f"slurmctld + munge active; cluster lab, partition gpu, {total} nodes"
            + (f" ({states})" if states else ""))
