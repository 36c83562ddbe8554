"""The base image: a minbase Debian 12 root, cached as a tarball keyed by its package list.

Building takes minutes (``mmdebstrap``), so the tarball lives in ``cache_dir()/lab`` and is
rebuilt only when the package list or the image recipe changes. ``lab up`` extracts it once
into the lab directory; every node is an overlay over that extracted, read-only lower tree.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from nodegate import flock
from nodegate.errors import CannotRunError
from nodegate_lab import config
from nodegate_lab.proc import need, run

#: Bump when the customisation below changes: it is part of the cache key.
#: 5: built by mmdebstrap (was debootstrap), its apt options not kept in the image.
RECIPE_VERSION = "5"
#: The root is made by mmdebstrap, not debootstrap: apt resolves and dpkg unpacks the whole
#: set in a few batches instead of one package at a time. Measured here, the md VM's package
#: list under load 7-9 (2026-12-07): 198 s wall and 76 s CPU, against debootstrap's 326 s
#: and 110 s; without Recommends (debootstrap leaves them out too) 100-189 s at load 5-6.
#: The package set is debootstrap's but for apt's choices among alternatives: usrmerge (and
#: perl, which it needs) where debootstrap took usr-is-merged, and no transitional lsb-base.
BOOTSTRAP = ("mmdebstrap", "--mode=root", "--variant=minbase",
             '--aptopt=APT::Install-Recommends "false"')
#: Where mmdebstrap writes its --aptopt into the root (removed after the build).
APTOPT_FILE = "etc/apt/apt.conf.d/99mmdebstrap"
FALLBACK_MIRROR = "http://deb.debian.org/debian"


SSHD_CONFIG = "PermitRootLogin prohibit-password\nPasswordAuthentication no\nUseDNS no\n"


def image_key(*recipe: str, packages: Sequence[str]) -> str:
    """Digest of suite, the recipe's names and versions and the sorted package list: the
    cache key of a bootstrapped image (the lab's base, the md VM's root)."""
    text = "\n".join([config.SUITE, *recipe, *sorted(packages)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def base_key(packages: tuple[str, ...] = config.BASE_PACKAGES) -> str:
    """The lab base's cache key."""
    return image_key(RECIPE_VERSION, packages=packages)


def tarball_path(key: str | None = None) -> Path:
    return config.base_cache_dir() / f"base-{config.SUITE}-{key or base_key()}.tar"


def debian_mirror() -> str:
    """The Debian mirror apt already uses here (the bootstrap must not go anywhere else)."""
    files = [Path("/etc/apt/sources.list")]
    src_d = Path("/etc/apt/sources.list.d")
    if src_d.is_dir():
        files += sorted(src_d.iterdir())
    for path in files:
        try:
            text = path.read_text()
        except OSError:
            continue
        if path.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                uris = re.search(r"^URIs:\s*(\S+)", stanza, re.M)
                suites = re.search(r"^Suites:\s*(.+)$", stanza, re.M)
                if uris and suites and config.SUITE in suites.group(1).split():
                    return uris.group(1).rstrip("/")
        else:
            for line in text.splitlines():
                parts = line.split()
                if len(parts) >= 3 and parts[0] == "deb" and parts[2] == config.SUITE:
                    uri = next(p for p in parts[1:] if not p.startswith("["))
                    return uri.rstrip("/")
    return FALLBACK_MIRROR


def _customise(root: Path) -> None:
    """Make the tree a neutral template: no identity, no host keys, no outside apt source."""
    strip_identity(root, "nodegate-lab.conf")
    dbus_id = root / "var/lib/dbus/machine-id"
    if dbus_id.exists() or dbus_id.is_symlink():
        dbus_id.unlink()
    (root / "etc/apt/sources.list").write_text("# the lab node reaches only the lab mirror\n")
    (root / "etc/hostname").write_text("lab\n")
    # nothing here talks to the outside: no resolver, no time sync, no getty on a console
    # nobody reads; sshd's host keys are written per node by the lab before boot
    for unit in ("getty@tty1.service", "console-getty.service", "systemd-timesyncd.service",
                 "apt-daily.timer", "apt-daily-upgrade.timer", "e2scrub_all.timer",
                 "fstrim.timer", "systemd-resolved.service"):
        (root / "etc/systemd/system" / unit).unlink(missing_ok=True)
        os.symlink("/dev/null", root / "etc/systemd/system" / unit)
    drop_apt_caches(root)


def strip_identity(root: Path, sshd_conf: str) -> None:
    """What every image built here is: no machine id and no sshd host keys (each host gets
    its own), and root over SSH by key only (the ``sshd_conf`` drop-in)."""
    (root / "etc/machine-id").write_text("")
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    sshd_d = root / "etc/ssh/sshd_config.d"
    sshd_d.mkdir(parents=True, exist_ok=True)
    (sshd_d / sshd_conf).write_text(SSHD_CONFIG)


def drop_apt_caches(root: Path) -> None:
    """No downloaded .debs or package lists in an image: they are stale by the next boot."""
    shutil.rmtree(root / "var/cache/apt/archives", ignore_errors=True)
    (root / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)
    for lists in (root / "var/lib/apt/lists").glob("*_*"):
        lists.unlink()


#: How long a second build of one cached artefact waits for the first (a cold bootstrap under
#: load, or the mirror with its wheels).
BUILD_WAIT_S = 3600.0


@contextlib.contextmanager
def building(target: Path) -> Iterator[None]:
    """One builder at a time for a cached artefact shared by every lab instance (the base and
    VM tarballs, the package mirror): labs on parallel test workers otherwise build it twice
    at once, and the second to finish replaces the tree the first is already serving."""
    target.parent.mkdir(parents=True, exist_ok=True)
    lock_path = target.parent / f".{target.name}.build-lock"
    with flock.exclusive(
            lock_path, what="build lock", wait_s=BUILD_WAIT_S,
            busy=lambda pid: f"{target.name}: another build (pid {pid}) still holds "
                             f"{lock_path} after {BUILD_WAIT_S:.0f} s",
            on_wait=lambda: print(f"{target.name}: waiting for another build of it",
                                  flush=True)):
        yield


def bootstrap_tarball(target: Path, packages: Sequence[str],
                      customise: Callable[[Path], None], *, log: Path | None = None,
                      force: bool = False) -> Path:
    """The cached tarball ``target`` of a Debian minbase root with ``packages``, made by
    mmdebstrap (``BOOTSTRAP``) from this machine's mirror and ``customise`` (minutes) only
    when missing: the lab's base and the md rehearsal VM's root are both built here."""
    if target.is_file() and not force:
        return target
    need(BOOTSTRAP[0], "tar", "chroot")
    with building(target):
        if target.is_file() and not force:
            return target  # built by another worker while this one waited
        _bootstrap_to(target, packages, customise, log=log)
    return target


def _bootstrap_to(target: Path, packages: Sequence[str], customise: Callable[[Path], None],
                  *, log: Path | None) -> None:
    with tempfile.TemporaryDirectory(prefix=f"{target.stem[:20]}-", dir=target.parent) as tmp:
        root = Path(tmp) / "root"
        proc = run([*BOOTSTRAP, "--include=" + ",".join(packages),
                    config.SUITE, str(root), debian_mirror()], check=False, timeout=1800)
        if log is not None:
            log.write_text(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
            raise CannotRunError(f"{BOOTSTRAP[0]} failed ({proc.returncode}): "
                                 f"{' | '.join(tail)}")
        # mmdebstrap keeps its --aptopt in the image; the hosts' apt must be Debian's own
        # (Recommends installed, as on any server: the driver's libcuda1 is one)
        (root / APTOPT_FILE).unlink(missing_ok=True)
        customise(root)
        partial = target.with_suffix(".partial")
        run(["tar", "--numeric-owner", "--xattrs", "-C", str(root), "-cf", str(partial), "."],
            timeout=600)
        os.replace(partial, target)


def build(*, force: bool = False, log: Path | None = None) -> Path:
    """Return the cached base tarball, bootstrapping it first when it is missing."""
    return bootstrap_tarball(tarball_path(), config.BASE_PACKAGES, _customise, log=log,
                               force=force)


def extracted(tarball: Path) -> Path:
    """The tarball unpacked under the lab dir (once per key): the overlay lower layer."""
    base_root = config.lab_dir() / "base" / tarball.stem
    done = base_root / ".complete"
    root = base_root / "root"
    if done.is_file():
        return root
    shutil.rmtree(base_root, ignore_errors=True)
    root.mkdir(parents=True)
    run(["tar", "--numeric-owner", "--xattrs", "-C", str(root), "-xf", str(tarball)])
    done.write_text(tarball.name + "\n")
    return root
