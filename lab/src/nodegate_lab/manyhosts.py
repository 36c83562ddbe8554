"""Many minimal SSH hosts, to measure what the control side costs per host.

The lab's nspawn nodes boot systemd and a simulated board each, so the lab stops at a few dozen
hosts on a small machine. What grows with a fleet on the operator's side is pyinfra's own work
per host: connecting, reading facts, deciding that nothing changes. These hosts carry only
that: each is a network namespace on the lab's bridge running one ``sshd`` chrooted into the
lab's extracted base root, which all of them share read-only. A private mount namespace per
host adds tmpfs ``/run`` and ``/tmp``, ``/proc``, ``/sys`` and ``/dev``; nothing is written to
the shared root and nothing is left behind: leaving the context kills the sshds (their mount
namespaces go with them) and deletes the namespaces and links.

Addresses are the lab's node addresses (.11 upward); .101 and above are the BMC addresses on
the uplink, so one lab instance holds at most ``MAX_HOSTS`` of them.
"""

from __future__ import annotations

import contextlib
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from nodegate.errors import CannotRunError
from nodegate_lab import base, config, lab, lock, net
from nodegate_lab.config import Member
from nodegate_lab.proc import need, run

MAX_HOSTS = config.BMC_ADDRESS_BASE - config.NODE_ADDRESS_BASE - 1  # .11 .. .99
READY_TIMEOUT_S = 60.0


@dataclass
class ManyHost:
    """One minimal host: its lab addressing and its sshd process."""

    member: Member
    proc: subprocess.Popen[bytes] | None = None

    @property
    def name(self) -> str:
        return self.member.name


def member(index: int) -> Member:
    """Host ``index`` (1-based): ``mN`` at the lab's node address ``index``."""
    if not 1 <= index <= MAX_HOSTS:
        raise CannotRunError(f"many-host index {index} outside 1..{MAX_HOSTS} (one /24 per lab "
                             "instance; .101 and above are the lab's BMC addresses)")
    return Member(f"m{index}", index, "node")


def _sshd_script(root: Path, host_dir: Path) -> str:
    """The shell that builds the host's private mounts over the shared root, then execs sshd.

    Runs inside ``ip netns exec`` (a fresh mount namespace) plus ``unshare --mount`` with
    private propagation, so every mount here dies with the sshd and none reaches the host."""
    r = shlex.quote(str(root))
    d = shlex.quote(str(host_dir))
    return "\n".join([
        "set -e",
        f"mount --bind {r} {r}",
        f"mount -o remount,bind,ro {r}",
        f"mount -t tmpfs -o mode=755,size=8m tmpfs {r}/run",
        f"mkdir -m 755 {r}/run/sshd",
        f"mkdir -m 700 {r}/run/ng",
        f"cp {d}/host_key {d}/authorized_keys {r}/run/ng/",
        f"chmod 600 {r}/run/ng/host_key {r}/run/ng/authorized_keys",
        f"mount -t tmpfs -o mode=1777,size=16m tmpfs {r}/tmp",
        f"mount -t proc proc {r}/proc",
        f"mount --rbind /sys {r}/sys",
        f"mount --rbind /dev {r}/dev",
        f"exec chroot {r} /usr/sbin/sshd -D -e -o HostKey=/run/ng/host_key "
        "-o AuthorizedKeysFile=/run/ng/authorized_keys -o UsePAM=no -o PidFile=none "
        "-o MaxStartups=200",
    ])


class ManyHosts:
    """``count`` minimal SSH hosts for the life of a ``with`` block (root only).

    Refuses while a lab of this instance is up: the hosts use its bridge, addresses and
    namespace names, and the teardown deletes them all."""

    def __init__(self, count: int) -> None:
        if not 1 <= count <= MAX_HOSTS:
            raise CannotRunError(f"many hosts: {count} hosts asked, 1..{MAX_HOSTS} possible "
                                 "on one lab instance")
        self.count = count
        self.hosts = [ManyHost(member(i)) for i in range(1, count + 1)]
        self.work = config.lab_dir() / "manyhosts"
        self._locked: contextlib.ExitStack | None = None

    # -- life cycle -------------------------------------------------------------------------
    def __enter__(self) -> ManyHosts:
        lab.require_root()
        need("ip", "unshare", "chroot", "ssh-keygen")
        stack = contextlib.ExitStack()
        stack.enter_context(lock.exclusive("many-hosts up"))
        self._locked = stack
        try:
            if lab.existing_members():
                raise CannotRunError(f"a lab of instance {config.INSTANCE} is up; run "
                                     "`nodegate-lab down` first or use another "
                                     "NODEGATE_LAB_INSTANCE")
            lock.claim()
            self._start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            self._stop()
        finally:
            if self._locked is not None:
                lock.release()
                self._locked.close()
                self._locked = None

    def _start(self) -> None:
        root = base.extracted(base.build())
        authorized = lab.ensure_key()
        shutil.rmtree(self.work, ignore_errors=True)
        self.work.mkdir(parents=True)
        net.ensure_bridge()
        known: list[str] = []
        for host in self.hosts:
            host_dir = self.work / host.name
            host_dir.mkdir()
            run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{host.name}",
                 "-f", str(host_dir / "host_key")])
            (host_dir / "authorized_keys").write_text(authorized + "\n")
            pub = (host_dir / "host_key.pub").read_text().split()
            known.append(f"{host.member.address} {pub[0]} {pub[1]}")
            net.ensure_host(host.member)
            log = (host_dir / "sshd.log").open("ab")
            host.proc = subprocess.Popen(
                ["ip", "netns", "exec", host.member.netns, "unshare", "--mount",
                 "--propagation", "private", "sh", "-c", _sshd_script(root, host_dir)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
            log.close()
        self.known_hosts.write_text("\n".join(known) + "\n")
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        waiting = list(self.hosts)
        while waiting:
            for host in list(waiting):
                if host.proc is not None and host.proc.poll() is not None:
                    tail = (self.work / host.name / "sshd.log").read_text(errors="replace")
                    raise CannotRunError(f"many hosts: sshd of {host.name} exited "
                                         f"({host.proc.returncode}): "
                                         f"{tail.strip().splitlines()[-1:] or 'no output'}")
                if lab.port_open(host.member.address):
                    waiting.remove(host)
            if waiting and time.monotonic() > deadline:
                names = ", ".join(h.name for h in waiting[:5])
                raise CannotRunError(f"many hosts: {len(waiting)} host(s) not answering on "
                                     f"port 22 after {READY_TIMEOUT_S:.0f} s ({names})")
            if waiting:
                time.sleep(0.1)

    def _stop(self) -> None:
        for host in self.hosts:
            if host.proc is not None and host.proc.poll() is None:
                host.proc.send_signal(signal.SIGTERM)
        for host in self.hosts:
            if host.proc is None:
                continue
            try:
                host.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                host.proc.kill()
                host.proc.wait(timeout=10)
        if not lab.existing_members():
            net.teardown()
        shutil.rmtree(self.work, ignore_errors=True)

    # -- what a deploy needs --------------------------------------------------------------
    @property
    def known_hosts(self) -> Path:
        return self.work / "known_hosts"

    def inventory_text(self, names: Sequence[str] | None = None) -> str:
        """A pyinfra inventory (Python) naming every host with the lab's key, strict host
        keys against this run's known_hosts."""
        chosen = [h for h in self.hosts if names is None or h.name in names]
        data = {"ssh_user": "root", "ssh_key": str(lab.key_path()),
                "ssh_known_hosts_file": str(self.known_hosts),
                "ssh_strict_host_key_checking": "yes"}
        rows = ",\n".join(f"    ({h.name!r}, {{'ssh_hostname': {h.member.address!r}, **DATA}})"
                          for h in chosen)
        return (f'"""Generated by nodegate_lab.manyhosts for {len(chosen)} hosts."""\n'
                f"DATA = {data!r}\nhosts = [\n{rows},\n]\n")

    def leftovers(self) -> list[str]:
        """What of this harness is still on the machine (for tests and the bench's exit)."""
        left = [f"netns {n}" for n in net.lab_namespaces()
                if n.startswith(f"{config.NS_PREFIX}m")]
        left += [f"sshd {h.name} (pid {h.proc.pid})" for h in self.hosts
                 if h.proc is not None and h.proc.poll() is None]
        if self.work.exists():
            left.append(str(self.work))
        return left
