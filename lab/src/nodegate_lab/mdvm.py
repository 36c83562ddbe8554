"""A small qemu VM on Debian 12's own kernel, for the nvme role's real mdadm RAID0 path.

Why a VM: the lab's nspawn containers share this machine's kernel, which has no md
(CONFIG_BLK_DEV_MD unset), so the lab can only run the ``single`` layout. Debian's
linux-image-amd64 has md and raid0 as modules; booted under qemu with two emulated NVMe
disks (``-device nvme,serial=...``, so udev makes ``/dev/disk/by-id/nvme-*``), the role
creates, records and mounts a real array, and a reboot shows whether it comes back.

The root file system is an mmdebstrap tree (``base.BOOTSTRAP``), cached as a tarball keyed
by its package list (like the lab's base image), turned into an ext4 image with
``mkfs.ext4 -d`` (no loop mount).
Every boot reads the kernel and initramfs out of that image's ``/boot`` with debugfs, as a
boot loader would, so a reboot uses the initramfs the role rebuilt, not the one built here.

    nodegate-lab mdvm up [--accel auto|kvm|tcg]   # build (cached), boot, site file
    nodegate-lab mdvm status
    nodegate-lab mdvm down                        # kill qemu, remove the VM dir

The image build and its cache key are the lab base's (``base``); one user per VM directory
is held by the lab's lock module (``lock.vm_exclusive``); the command line is ``cli``.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from nodegate.errors import CannotRunError
from nodegate.paths import cache_dir
from nodegate_lab import base, config
from nodegate_lab.proc import need, run

#: nodegate's own dependencies as Debian packages: the Soft-RoCE VMs run the battery from this
#: checkout's source with them (the image carries neither pip nor a wheelhouse). In the image,
#: not installed per VM: each install was an `apt-get update` under TCG on every boot.
BATTERY_PACKAGES: tuple[str, ...] = ("python3-yaml", "python3-jsonschema", "python3-packaging",
                                     "python3-debian")
#: What the VM's root holds: Debian's kernel (md, raid0), the role's tools, sshd for pyinfra;
#: busybox as on any Debian server (initramfs-tools recommends it; the initramfs's mdadm
#: scripts call rm, which klibc alone lacks).
PACKAGES: tuple[str, ...] = (
    "linux-image-amd64", "initramfs-tools", "busybox", "systemd-sysv", "udev", "kmod",
    "openssh-server",
    "python3", "mdadm", "xfsprogs", "nvme-cli", "iproute2", "procps",
    "fio",  # the storage checks' throughput tool
    *BATTERY_PACKAGES,
)
#: Bump when _customise changes: it is part of the cache key.
RECIPE_VERSION = "6"  # 6: the image's initramfs MODULES=list
HOSTNAME = "mdvm"
DISK_SERIALS = ("nodegate-md0", "nodegate-md1")
DISK_SIZE_MIB = 1024  # sparse; two make a 2 GiB array (mkfs.xfs wants >= 300 MB)
ROOT_SIZE_MIB = 3072  # sparse
MEMORY_MIB = 1024
#: Seconds from qemu start to SSH answering; TCG emulates every instruction.
BOOT_TIMEOUT_S = {"kvm": 180.0, "tcg": 900.0}
SHUTDOWN_TIMEOUT_S = {"kvm": 120.0, "tcg": 420.0}
KVM_PROBE_TIMEOUT_S = 30.0  # a working KVM panics a root-less kernel in a few seconds
KVM_DEVICE = Path("/dev/kvm")
HOST_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
KVM_MISSING = "/dev/kvm missing or cannot create a VM"
PROFILE = "sim-h100-hgx"
#: Units no test needs, masked for every boot: under TCG each one's start competes with the
#: path to sshd for the emulated CPUs (NVMe-oF autoconnect, e2scrub's snapshot reaper, gettys
#: on consoles that -nodefaults leaves out). Masked on the kernel command line, not in the
#: image: the cached image stays as built.
UNNEEDED_UNITS = ("nvmf-autoconnect.service", "e2scrub_reap.service", "getty-static.service")
#: The CPU model under TCG: qemu64 (x86-64 baseline, all Debian 12 needs). Measured here,
#: 2026-12-07, quiet machine, one boot each: qemu64 reached sshd in 24 s (32 s of qemu's
#: CPU), ``max`` in 31 s (40 s); update-initramfs in the guest took the same (72-76 s).
TCG_CPU = "qemu64"
#: mitigations=off: page-table isolation and friends cost TCG dearly, and protect nothing here
KERNEL_ARGS = ("root=/dev/vda rw console=ttyS0 panic=-1 net.ifnames=0 mitigations=off "
               + " ".join(f"systemd.mask={unit}" for unit in UNNEEDED_UNITS))


def vm_dir() -> Path:
    """VM state (disk images, keys, console log, site file): NODEGATE_MDVM_DIR or
    /var/lib/nodegate-mdvm; never /tmp, and ``down`` removes it."""
    return Path(os.environ.get("NODEGATE_MDVM_DIR", "/var/lib/nodegate-mdvm"))


# --- the cached root tree ----------------------------------------------------------------


def image_key(packages: Sequence[str] = PACKAGES) -> str:
    """The root's cache key (the lab base's digest, under its own recipe name)."""
    return base.image_key("mdvm", RECIPE_VERSION, packages=packages)


def tarball_path() -> Path:
    return cache_dir() / "mdvm" / f"rootfs-{config.SUITE}-{image_key()}.tar"


def _customise(root: Path) -> None:
    """A neutral, bootable template: serial console, DHCP on the qemu NIC, root login by key
    only, virtio in the initramfs; no identity, no host keys, nothing scheduled that would
    change the disks, and fstrim.timer off so the role has to turn it on."""
    (root / "etc/hostname").write_text(f"{HOSTNAME}\n")
    (root / "etc/hosts").write_text(f"127.0.0.1 localhost\n127.0.1.1 {HOSTNAME}\n")
    (root / "etc/fstab").write_text("/dev/vda / ext4 rw,errors=remount-ro 0 1\n")
    base.strip_identity(root, "nodegate-mdvm.conf")
    network = root / "etc/systemd/network/10-qemu.network"
    network.parent.mkdir(parents=True, exist_ok=True)
    network.write_text("[Match]\nName=eth* en*\n\n[Network]\nDHCP=ipv4\n")
    # the root's drivers, and nvme: with it in the initramfs (as MODULES=most, Debian's
    # default, has it) the disks appear there and udev assembles the array with the
    # initramfs's copy of mdadm.conf, the copy a stale initramfs gets wrong
    with (root / "etc/initramfs-tools/modules").open("a") as modules:
        modules.write("virtio_pci\nvirtio_blk\next4\nnvme\n")
    chroot = ["chroot", str(root)]
    run([*chroot, "systemctl", "enable", "systemd-networkd.service"])
    for unit in ("fstrim.timer", "apt-daily.timer", "apt-daily-upgrade.timer",
                 "e2scrub_all.timer"):
        run([*chroot, "systemctl", "disable", unit], check=False)
    # the image's own initramfs, built here off the VM's hardware, holds only the modules
    # listed above (MODULES=list): the whole "most" set made every boot of it unpack and
    # coldplug tens of MB more under TCG. In the VM, update-initramfs (the role) takes what
    # that machine needs (MODULES=dep): MODULES=most copies thousands of modules, one process
    # each, which TCG turns into a quarter of an hour.
    conf = root / "etc/initramfs-tools/initramfs.conf"
    _set_modules(conf, "most", "list")
    run(["mount", "-t", "proc", "proc", str(root / "proc")])
    try:
        run([*chroot, "update-initramfs", "-u", "-k", "all"], timeout=600)
    finally:
        run(["umount", str(root / "proc")], check=False)
    _set_modules(conf, "list", "dep")
    base.drop_apt_caches(root)


def _set_modules(conf: Path, old: str, new: str) -> None:
    """initramfs.conf's ``MODULES=old`` line made ``MODULES=new`` (refused when absent)."""
    text = conf.read_text()
    if f"\nMODULES={old}\n" not in text:
        raise CannotRunError(f"no MODULES={old} line in {conf}")
    conf.write_text(text.replace(f"\nMODULES={old}\n", f"\nMODULES={new}\n"))


def build(*, force: bool = False, log: Path | None = None) -> Path:
    """The cached root tarball; bootstrapped (minutes) only when it is missing."""
    return base.bootstrap_tarball(tarball_path(), PACKAGES, _customise, log=log, force=force)


# --- one VM --------------------------------------------------------------------------------


@dataclass
class VM:
    """A prepared (and maybe running) VM; saved as ``vm.json`` in its directory."""

    dir: Path
    kernel: str  # the kernel version in the image: /boot/vmlinuz-<kernel>
    accel: str = ""  # kvm | tcg, decided at the first boot
    accel_why: str = ""
    port: int = 0  # 127.0.0.1:port -> the guest's sshd
    pid: int = 0
    disk_ids: list[str] = field(default_factory=list)
    boot_s: float = 0.0  # qemu start -> SSH answering, the last boot
    started: float = field(default=0.0, repr=False, compare=False)  # launch, monotonic clock
    extra_qemu: list[str] = field(default_factory=list)  # more devices (nodegate_lab.rxevm)
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)

    @property
    def key(self) -> Path:
        return self.dir / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.dir / "known_hosts"

    @property
    def image(self) -> Path:
        return self.dir / "root.img"

    @property
    def console_log(self) -> Path:
        return self.dir / "console.log"

    @property
    def site_file(self) -> Path:
        return self.dir / "site.yaml"

    def save(self) -> None:
        data = {f.name: getattr(self, f.name) for f in fields(self)
                if f.name not in ("proc", "started")}
        data["dir"] = str(self.dir)
        (self.dir / "vm.json").write_text(json.dumps(data, indent=2) + "\n")


def load(directory: Path | None = None) -> VM | None:
    """The VM recorded in ``directory`` (default vm_dir()), or None."""
    path = (directory or vm_dir()) / "vm.json"
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    known = {f.name for f in fields(VM)} - {"proc", "started"}
    vm = VM(**{k: v for k, v in data.items() if k in known})
    vm.dir = Path(vm.dir)
    return vm


def kvm_opens() -> bool:
    """/dev/kvm opens and creates a VM (KVM_GET_API_VERSION, KVM_CREATE_VM)."""
    try:
        fd = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if fcntl.ioctl(fd, 0xAE00) != 12:  # KVM_GET_API_VERSION
            return False
        os.close(fcntl.ioctl(fd, 0xAE01, 0))  # KVM_CREATE_VM
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def kvm_runs(kernel: Path, work: Path) -> tuple[bool, str]:
    """(usable, why): boot the guest kernel under KVM with no root file system; a working
    KVM prints its banner, panics and (-no-reboot) qemu exits within seconds.

    Opening /dev/kvm is not enough: a nested hypervisor can create VMs and still never run
    a stock kernel (PVM's kvm_pvm, for paravirtualised guests only, hangs in the
    decompressor; some hosts refuse qemu's MSRs), so the answer comes from running it.
    """
    if not kvm_opens():
        return False, KVM_MISSING
    console = work / "kvm-probe.log"
    console.unlink(missing_ok=True)
    argv = ["qemu-system-x86_64", "-machine", "q35", "-accel", "kvm", "-cpu", "host",
            "-smp", "1", "-m", "256", "-display", "none", "-monitor", "none",
            "-serial", f"file:{console}", "-no-reboot", "-kernel", str(kernel),
            "-append", "console=ttyS0 panic=-1 root=/dev/nonexistent"]
    try:  # in the VM dir: a qemu that aborts may leave a core file in its cwd
        proc = subprocess.run(argv, cwd=work, capture_output=True, text=True, check=False,
                              timeout=KVM_PROBE_TIMEOUT_S)
        text = console.read_text(errors="replace") if console.is_file() else ""
    except subprocess.TimeoutExpired:
        return False, (f"/dev/kvm opens but the kernel did not run to its panic within "
                       f"{KVM_PROBE_TIMEOUT_S:.0f} s")
    finally:
        console.unlink(missing_ok=True)
    if proc.returncode == 0 and "Linux version" in text and "Kernel panic" in text:
        return True, "KVM runs the guest kernel"
    detail = (proc.stderr.strip().splitlines() or ["no error"])[0]
    return False, f"/dev/kvm opens but qemu -accel kvm failed ({proc.returncode}): {detail}"


def kvm_probe_cache() -> Path:
    """Where the last KVM probe's answer is kept (``kvm_usable``)."""
    return cache_dir() / "mdvm" / "kvm-probe.json"


def kvm_identity(kernel: Path) -> dict[str, Any] | None:
    """What a probe's answer holds for: this host boot, this /dev/kvm node (a reloaded
    module makes a new one) and the KVM modules loaded, this guest kernel, this qemu. None
    when one of them cannot be read: then nothing is cached."""
    try:
        device = KVM_DEVICE.stat()
        boot_id = HOST_BOOT_ID.read_text().strip()
        kernel_digest = hashlib.sha256(kernel.read_bytes()).hexdigest()
        qemu = shutil.which("qemu-system-x86_64")
        qemu_stat = os.stat(qemu) if qemu else None
    except OSError:
        return None
    return {"boot_id": boot_id,
            "device": [device.st_rdev, device.st_ino, device.st_ctime_ns],
            "modules": sorted(p.name for p in Path("/sys/module").glob("kvm*")),
            "kernel_sha256": kernel_digest,
            "qemu": [qemu, qemu_stat.st_size, qemu_stat.st_mtime_ns] if qemu_stat else None}


def _kept_answer(identity: dict[str, Any]) -> tuple[bool, str] | None:
    try:
        kept = json.loads(kvm_probe_cache().read_text())
        if kept["identity"] == identity and isinstance(kept["usable"], bool):
            return kept["usable"], f"{kept['why']} (probe of {kept['at']}, kept for this boot)"
    except (OSError, ValueError, KeyError, TypeError):
        pass  # none, or unreadable: probe again
    return None


def _keep_answer(identity: dict[str, Any], usable: bool, why: str) -> None:
    path = kvm_probe_cache()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps({"identity": identity, "usable": usable, "why": why,
                                   "at": time.strftime("%F %T")}) + "\n")
        os.replace(tmp, path)
    except OSError:
        pass  # a cache that cannot be written only costs the next VM its own probe


def kvm_usable(kernel: Path, work: Path, *, fresh: bool = False) -> tuple[bool, str]:
    """(usable, why) as ``kvm_runs`` finds, paid for once: no probe at all when /dev/kvm is
    missing or cannot create a VM (TCG at once); otherwise one bounded probe whose answer is
    kept (``kvm_probe_cache``) for every later VM while ``kvm_identity`` is unchanged, so the
    Soft-RoCE pair and the md VM of one run probe once between them. ``fresh`` probes again."""
    if not kvm_opens():
        return False, KVM_MISSING
    identity = kvm_identity(kernel)
    if identity is not None and not fresh:
        kept = _kept_answer(identity)
        if kept is not None:
            return kept
    usable, why = kvm_runs(kernel, work)
    if identity is not None:
        _keep_answer(identity, usable, why)
    return usable, why


def accelerator(kernel: Path, work: Path, requested: str = "auto") -> tuple[str, str]:
    """(``kvm`` | ``tcg``, why). ``auto`` (or NODEGATE_MDVM_ACCEL=kvm|tcg) asks
    ``kvm_usable``, which runs the guest kernel under KVM (once per host boot, /dev/kvm and
    kernel); it never assumes /dev/kvm works. ``kvm`` asked for always probes afresh."""
    wanted = os.environ.get("NODEGATE_MDVM_ACCEL", "auto") if requested == "auto" \
        else requested
    if wanted == "tcg":
        return "tcg", "TCG asked for"
    usable, why = kvm_usable(kernel, work, fresh=wanted == "kvm")
    if wanted == "kvm" and not usable:
        raise CannotRunError(f"KVM asked for: {why}")
    return ("kvm" if usable else "tcg"), why


def _keygen(path: Path, comment: str) -> str:
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])
    return Path(f"{path}.pub").read_text().strip()


def prepare(directory: Path, tarball: Path,
            populate: Callable[[Path], None] | None = None) -> VM:
    """A fresh VM directory: keys, root.img from the tarball (+ this VM's identity), disks.
    ``populate`` adds to the extracted root before the image is made (the Soft-RoCE VMs'
    package repository)."""
    need("mkfs.ext4", "debugfs", "ssh-keygen", "tar", "truncate")
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(mode=0o700, parents=True)
    vm = VM(dir=directory, kernel="")
    client_pub = _keygen(vm.key, "nodegate-mdvm")
    host_key = directory / "ssh_host_ed25519_key"
    _keygen(host_key, f"root@{HOSTNAME}")
    root = directory / "root"
    root.mkdir()
    try:
        run(["tar", "--numeric-owner", "--xattrs", "-C", str(root), "-xf", str(tarball)],
            timeout=600)
        kernels = sorted(p.name.removeprefix("vmlinuz-") for p in (root / "boot").glob(
            "vmlinuz-*"))
        if not kernels:
            raise CannotRunError(f"no /boot/vmlinuz-* in {tarball}")
        vm.kernel = kernels[-1]
        ssh_dir = root / "root/.ssh"
        ssh_dir.mkdir(mode=0o700, exist_ok=True)
        (ssh_dir / "authorized_keys").write_text(client_pub + "\n")
        (ssh_dir / "authorized_keys").chmod(0o600)
        for suffix, mode in (("", 0o600), (".pub", 0o644)):
            dest = root / f"etc/ssh/ssh_host_ed25519_key{suffix}"
            shutil.copyfile(f"{host_key}{suffix}", dest)
            dest.chmod(mode)
        # a machine id: an empty one is a "first boot", which applies presets (fstrim.timer on)
        (root / "etc/machine-id").write_text(uuid.uuid4().hex + "\n")
        if populate is not None:
            populate(root)
        run(["mkfs.ext4", "-q", "-F", "-L", "mdvm-root", "-d", str(root), str(vm.image),
             f"{ROOT_SIZE_MIB}M"], timeout=600)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for n in range(len(DISK_SERIALS)):
        run(["truncate", "-s", f"{DISK_SIZE_MIB}M", str(directory / f"nvme{n}.img")])
    vm.save()
    return vm


def _boot_files(vm: VM) -> tuple[Path, Path]:
    """Kernel and initramfs read out of the image's /boot (debugfs, no mount), as a boot
    loader would: a reboot picks up the initramfs the role rebuilt."""
    out: list[Path] = []
    for name in (f"vmlinuz-{vm.kernel}", f"initrd.img-{vm.kernel}"):
        dest = vm.dir / name
        dest.unlink(missing_ok=True)
        run(["debugfs", "-R", f"dump /boot/{name} {dest}", str(vm.image)], timeout=120)
        if not dest.is_file() or dest.stat().st_size == 0:
            raise CannotRunError(f"could not read /boot/{name} from {vm.image}")
        out.append(dest)
    return out[0], out[1]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def qemu_argv(vm: VM, kernel: Path, initrd: Path) -> list[str]:
    """qemu: the root on virtio, two NVMe controllers with fixed serials, user networking
    with sshd forwarded to 127.0.0.1 only, the serial console into console.log.

    ``-nodefaults``: no VGA, CD-ROM or parallel port, which the guest would otherwise probe
    and drive (bochs-drm and a frame buffer console, sr, ppdev) at every boot; with the
    masked units (``KERNEL_ARGS``) a boot under TCG took about 48 s instead of 60 s (qemu's
    CPU seconds to sshd 49 instead of 58) on 2 loaded cores."""
    cpu = "host" if vm.accel == "kvm" else TCG_CPU
    argv = ["qemu-system-x86_64", "-nodefaults", "-name", "nodegate-mdvm,process=nodegate-mdvm",
            "-machine", "q35", "-accel", vm.accel, "-cpu", cpu,
            "-smp", "2", "-m", str(MEMORY_MIB), "-display", "none", "-monitor", "none",
            "-chardev", f"file,id=console,path={vm.console_log},append=on",
            "-serial", "chardev:console", "-no-reboot",
            "-kernel", str(kernel), "-initrd", str(initrd), "-append", KERNEL_ARGS,
            "-drive", f"file={vm.image},if=virtio,format=raw,cache=unsafe",
            "-netdev", f"user,id=net0,hostfwd=tcp:127.0.0.1:{vm.port}-:22",
            "-device", "virtio-net-pci,netdev=net0"]
    for n, serial in enumerate(DISK_SERIALS):
        argv += ["-drive", f"file={vm.dir / f'nvme{n}.img'},if=none,id=nvme{n},format=raw",
                 "-device", f"nvme,serial={serial},drive=nvme{n}"]
    return argv + list(vm.extra_qemu)


def running(vm: VM) -> bool:
    """Is this VM's qemu alive (not a zombie, not a reused pid)?"""
    if vm.proc is not None:
        return vm.proc.poll() is None
    if not vm.pid:
        return False
    try:
        stat = Path(f"/proc/{vm.pid}/stat").read_text()
        cmdline = Path(f"/proc/{vm.pid}/cmdline").read_bytes()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z" and str(vm.image).encode() in cmdline


def ssh_argv(vm: VM, *, connect_timeout: int = 5) -> list[str]:
    """ssh to the guest as root with the VM's key and its own known_hosts (strict)."""
    return ["ssh", "-F", "/dev/null", "-i", str(vm.key), "-p", str(vm.port),
            "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
            "-o", f"UserKnownHostsFile={vm.known_hosts}", "-o", "StrictHostKeyChecking=yes",
            "-o", f"ConnectTimeout={connect_timeout}", "-o", "LogLevel=ERROR",
            "-o", "ControlMaster=no", "-T", "root@127.0.0.1"]


def ssh(vm: VM, command: str, *, timeout: float = 120,
        check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a shell command on the guest."""
    return run([*ssh_argv(vm), command], check=check, timeout=timeout)


def console_tail(vm: VM, lines: int = 30) -> str:
    try:
        text = vm.console_log.read_text(errors="replace")
    except OSError:
        return "(no console log)"
    return "\n".join(text.splitlines()[-lines:])


def boot(vm: VM, *, accel: str = "auto", tie_to_parent: bool = False) -> VM:
    """Start qemu and wait (bounded) until the guest's sshd answers with the expected key.

    ``tie_to_parent``: qemu dies with this process (tests); otherwise it runs on in its own
    session (the CLI's ``up``) until ``down``.
    """
    return wait_ready(launch(vm, accel=accel, tie_to_parent=tie_to_parent))


def launch(vm: VM, *, accel: str = "auto", tie_to_parent: bool = False) -> VM:
    """Start qemu and return at once (``wait_ready`` waits for sshd): several guests boot side
    by side, each mostly waiting on its own emulated CPU and timers."""
    need("qemu-system-x86_64", "ssh", "debugfs", *(["setpriv"] if tie_to_parent else []))
    if running(vm):
        raise CannotRunError(f"the VM in {vm.dir} is running (pid {vm.pid})")
    kernel, initrd = _boot_files(vm)
    if accel != vm.accel:  # a reboot keeps what the first boot found
        vm.accel, vm.accel_why = accelerator(kernel, vm.dir, accel)
    if not vm.port:
        vm.port = _free_port()
    host_pub = (vm.dir / "ssh_host_ed25519_key.pub").read_text().split()
    vm.known_hosts.write_text(f"[127.0.0.1]:{vm.port} {host_pub[0]} {host_pub[1]}\n")
    with (vm.dir / "console.log").open("a") as console:
        console.write(f"\n===== nodegate-mdvm boot {time.strftime('%F %T')} "
                      f"accel={vm.accel} =====\n")
    started = time.monotonic()
    argv = qemu_argv(vm, kernel, initrd)
    if tie_to_parent:  # SIGKILL when this process dies: a killed test run leaves no VM
        argv = ["setpriv", "--pdeathsig", "KILL", "--", *argv]
    with (vm.dir / "qemu.log").open("ab") as log:
        vm.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                   start_new_session=not tie_to_parent)
    vm.pid = vm.proc.pid
    vm.started = started
    vm.save()
    return vm


def wait_ready(vm: VM) -> VM:
    """Wait (bounded, from the launch) until the launched guest's sshd answers with its key."""
    started = vm.started
    deadline = started + BOOT_TIMEOUT_S[vm.accel]
    while True:
        if not running(vm):
            qemu_log = (vm.dir / "qemu.log").read_text(errors="replace").strip()
            raise CannotRunError(f"qemu exited while booting: {qemu_log[-500:]}\n"
                                 f"console:\n{console_tail(vm)}")
        try:
            if run([*ssh_argv(vm, connect_timeout=5), "true"], check=False,
                   timeout=30).returncode == 0:
                break
        except subprocess.TimeoutExpired:
            pass  # sshd accepted but is too slow yet; the deadline below still holds
        if time.monotonic() > deadline:
            stop(vm)
            raise CannotRunError(f"no SSH on 127.0.0.1:{vm.port} within "
                                 f"{BOOT_TIMEOUT_S[vm.accel]:.0f} s ({vm.accel}); console:\n"
                                 f"{console_tail(vm)}")
        time.sleep(2)
    vm.boot_s = round(time.monotonic() - started, 1)
    vm.save()
    return vm


def discover_disks(vm: VM) -> list[str]:
    """The guest's ``/dev/disk/by-id/nvme-*`` name of each emulated disk, by its serial."""
    out = ssh(vm, "udevadm settle --timeout=30; ls /dev/disk/by-id/").stdout.split()
    found = []
    for serial in DISK_SERIALS:
        names = sorted(n for n in out if n.startswith("nvme-") and n.endswith(f"_{serial}"))
        if not names:
            raise CannotRunError(f"no /dev/disk/by-id/nvme-*_{serial} in the guest: {out}")
        found.append(f"/dev/disk/by-id/{names[0]}")
    vm.disk_ids = found
    vm.save()
    return found


def site_data(vm: VM) -> dict[str, Any]:
    """Site file (nodegate.site/1): the VM as one GPU node with both NVMe disks, RAID0."""
    return {
        "schema": "nodegate.site/1",
        "name": "mdvm",
        "description": "the md rehearsal VM (nodegate-lab mdvm); do not edit",
        "defaults": {"ssh_user": "root", "ssh_key": str(vm.key),
                     "ssh_known_hosts_file": str(vm.known_hosts),
                     "ssh_strict_host_key_checking": "yes", "profile": PROFILE,
                     "profile_overrides": {"nvme": {"devices": len(vm.disk_ids),
                                                    "raid_level": 0}}},
        "groups": {"gpu_nodes": [HOSTNAME]},
        "hosts": {HOSTNAME: {"address": "127.0.0.1", "ssh_port": vm.port,
                             "nvme": {"devices": list(vm.disk_ids)}}},
    }


def write_site(vm: VM) -> Path:
    """Write the site file (NODEGATE_SITE=<path>) and check it loads as pyinfra loads it."""
    import yaml

    from nodegate.site import load_site

    tmp = vm.site_file.with_suffix(".tmp")
    tmp.write_text("# generated by nodegate-lab mdvm; removed by its down\n"
                   + yaml.safe_dump(site_data(vm), sort_keys=False))
    tmp.replace(vm.site_file)
    load_site(str(vm.site_file))
    return vm.site_file


def _wait_exit(vm: VM, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while running(vm):
        if time.monotonic() > deadline:
            return False
        time.sleep(1)
    return True


def reboot(vm: VM, *, tie_to_parent: bool = False) -> VM:
    """Power the guest off from inside (a clean shutdown: md stopped, file systems synced),
    then boot it again from its own /boot; same port, same keys."""
    ssh(vm, "systemctl poweroff --no-block", check=False, timeout=30)
    if not _wait_exit(vm, SHUTDOWN_TIMEOUT_S[vm.accel]):
        stop(vm)
        raise CannotRunError(f"the guest did not power off within "
                             f"{SHUTDOWN_TIMEOUT_S[vm.accel]:.0f} s; console:\n"
                             f"{console_tail(vm)}")
    vm.proc = None
    vm.pid = 0
    return boot(vm, accel=vm.accel, tie_to_parent=tie_to_parent)


def stop(vm: VM) -> None:
    """Kill qemu (TERM, then KILL); the disks are disposable."""
    if not running(vm):
        return
    os.kill(vm.pid, signal.SIGTERM)
    if not _wait_exit(vm, 15):
        os.kill(vm.pid, signal.SIGKILL)
        _wait_exit(vm, 15)
    if vm.proc is not None:
        vm.proc.wait(timeout=15)


def up(directory: Path | None = None, *, accel: str = "auto",
       tie_to_parent: bool = False) -> VM:
    """Build (cached), prepare, boot, find the disks, write the site file."""
    if os.geteuid() != 0:
        raise CannotRunError("the md VM needs root (mmdebstrap, chroot); run it with sudo")
    directory = directory or vm_dir()
    old = load(directory)
    if old is not None:
        stop(old)
    vm = prepare(directory, build())
    try:
        boot(vm, accel=accel, tie_to_parent=tie_to_parent)
        discover_disks(vm)
        write_site(vm)
    except BaseException:
        stop(vm)
        raise
    return vm


def last_console_log() -> Path:
    """Where ``down`` keeps the serial console of the VM it removed, for diagnosis."""
    return cache_dir() / "mdvm" / "last-console.log"


def down(directory: Path | None = None) -> bool:
    """Kill the VM and remove its directory (its console log kept as last_console_log());
    True when there was one."""
    directory = directory or vm_dir()
    vm = load(directory)
    if vm is not None:
        stop(vm)
        if vm.console_log.is_file():
            last_console_log().parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(vm.console_log, last_console_log())
    existed = directory.exists()
    shutil.rmtree(directory, ignore_errors=True)
    return existed
