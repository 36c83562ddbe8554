"""The NVIDIA driver's pin set on apt and dnf, and the node-side shell that holds, locks and
guards it.

``APT_PIN_PATTERNS`` are apt preferences globs for every package NVIDIA's driver brings on
Debian 12 and Ubuntu 22.04/24.04. They were checked against the closures of the role's
metapackages in the distributions' real indexes (tests/roles/data/driver-packages, made by
scripts/driver_metadata.py): Debian 12 needs ``libcuda1``, ``libnvcuvid1``, ``libnvoptix1``,
the GL/EGL/GLES libraries (``libegl-nvidia0``...), plain ``xserver-xorg-video-nvidia`` and
``firmware-nvidia-gsp``, none of which ``nvidia-*``/``libnvidia-*`` match. A glob that also
matches an unrelated package (``nvidia-cuda-toolkit``) is harmless in a pin: the pin only
raises versions that match the driver's; holds are limited to installed packages at that
version.

The guard answers the other failure: on a repository that carries a newer branch, the
metapackage for the pinned version can itself pull another version in. Ubuntu's archive turned
``nvidia-driver-570-server`` 570.211.01 into a transitional package to 580 (see the snapshot),
so ``apt-get install nvidia-driver-570-server=570.211.01-*`` installs 580. The guard simulates
the install (``apt-get -s``) and stops the host when any driver package would land outside the
pin, naming them. Before it, ``available_awk`` stops the host when a package the role names has
no build at the driver's version at all (Debian 12's open module at 535.309.01), naming the
package and the versions the repositories do carry.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping
from fnmatch import fnmatchcase

APT_PIN_PATTERNS = [
    "nvidia-*", "libnvidia-*", "xserver-xorg-video-nvidia*", "cuda-drivers*", "libxnvctrl*",
    "libcuda1", "libcudadebugger1", "libnvcuvid1", "libnvoptix1", "libegl-nvidia*",
    "libgl1-nvidia-*", "libgles-nvidia*", "libglx-nvidia*", "firmware-nvidia-*",
]

#: Packages the globs match that Debian 12's own archive versions on their own line, not the
#: driver's: other source packages than ``nvidia-graphics-drivers``
#: (tests/roles/data/driver-packages/debian12.json, bookworm and bookworm-security contrib):
#: ``nvidia-persistenced`` 535.171.04-1~deb12u1, ``nvidia-settings`` 535.247.01-1~deb12u1 and
#: ``nvidia-modprobe`` 535.161.07-1~deb12u1 in bookworm beside the driver's 535.261.03-1 (both
#: 535.309.01-0+deb12u1 in -security), ``nvidia-support``/``nvidia-installer-cleanup``/
#: ``nvidia-kernel-common`` 20220217+3~deb12u1, ``libnvidia-egl-gbm1`` 1.1.0-2. With
#: ``nvidia_driver_source=distro`` on Debian they are installed from the distribution
#: unpinned, the guard does not count them (a pin at the driver's version can never reach
#: them) and the hold takes them only when they happen to be at that version. NVIDIA's CUDA
#: repository builds them at the driver's version, so there they stay in the guard.
DEBIAN_OWN_VERSIONS = ["nvidia-persistenced", "nvidia-settings", "nvidia-modprobe",
                       "nvidia-support", "nvidia-installer-cleanup", "nvidia-kernel-common",
                       "libnvidia-egl-gbm1"]

#: dnf versionlock name globs for every package NVIDIA's driver brings on RHEL 9, from
#: NVIDIA's own RPM spec files (tests/roles/data/driver-packages/rhel9.json and RHEL9.md,
#: made by scripts/driver_metadata_rpm.py; NVIDIA's repodata was not reachable): the
#: role's four packages pull ``nvidia-driver-libs``, ``nvidia-driver-cuda-libs``,
#: ``libnvidia-ml``, ``libnvidia-cfg``, ``nvidia-kmod-common`` and ``nvidia-modprobe``,
#: which the old lock of the four named packages left free. ``xorg-x11-nvidia`` (pulled in
#: beside an X server) and ``cuda-drivers`` (NVIDIA's metapackage) are in the same set. Only
#: installed packages at the driver's version are locked (``lock_script``), so a glob that
#: also matches another NVIDIA package (``nvidia-fabric-manager``) locks it only at that
#: version, as the apt holds do.
RPM_PIN_PATTERNS = ["nvidia-*", "libnvidia-*", "kmod-nvidia-*", "xorg-x11-nvidia",
                    "cuda-drivers*"]


_PLAIN = re.compile(r"[A-Za-z0-9.+~:_*?-]+")


def _ere(text: str) -> str:
    """Package names and versions as ERE without backslashes (awk -v would eat them):
    ``.`` and ``+`` become bracket expressions, globs become ``.*`` and ``.``."""
    if not _PLAIN.fullmatch(text):
        raise ValueError(f"not a package name, glob or version: {text!r}")
    return "".join({"*": ".*", "?": ".", ".": "[.]", "+": "[+]"}.get(c, c) for c in text)


def glob_ere(patterns: Iterable[str]) -> str:
    """apt preferences globs (``*``, ``?``) as one anchored POSIX ERE for awk."""
    return "^(" + "|".join(_ere(p) for p in patterns) + ")$"


def version_ere(version: str) -> str:
    """The pin ``VERSION-*`` as an anchored ERE on a Debian version."""
    return "^" + _ere(version) + "-"


def behind(installed: Mapping[str, Iterable[str]], patterns: Iterable[str], version: str,
           roots: Iterable[str]) -> list[str]:
    """Installed packages of the set (``patterns``) still at the build the ``roots``
    (the role's metapackages) are installed at, when that is not ``version``.

    A driver change names them on the install line with the metapackages: apt moves a package
    only when a dependency forces it, and on Debian 12 four packages of the set are reached
    by unversioned or ``>=`` relations only (``nvidia-legacy-check``, ``nvidia-egl-common``,
    ``nvidia-vulkan-common``, ``nvidia-suspend-common``); without this they stayed at the old
    build beside the new one (the lab's Debian 12 graph, tests/roles/test_lab_driver_graph).
    Only the old build's packages: another package the globs match (nvidia-cuda-toolkit at
    its own version) is left alone."""
    names = list(roots)
    old = {f"{str(v).split('-', 1)[0].split(':')[-1]}-*" for r in names
           for v in installed.get(r) or ()} - {f"{version}-*"}
    pats = list(patterns)
    return sorted(n for n, versions in installed.items()
                  if n not in names and any(fnmatchcase(n, p) for p in pats)
                  and any(fnmatchcase(str(v), o) for v in versions or () for o in old))


DPKG_FORMAT = "${db:Status-Abbrev} ${Package} ${Version}\\n"  # dpkg-query expands \\n


def hold_script(patterns: Iterable[str], version: str, lock_timeout: int = 0) -> str:
    """Hold every installed package of the driver's set at ``version`` (run after the
    install, so it sees what apt really brought); apt-mark waits ``lock_timeout`` seconds for
    the dpkg lock (``apt_lock_timeout_s``)."""
    return (f"dpkg-query -W -f={shlex.quote(DPKG_FORMAT)} | {hold_filter(patterns, version)}"
            f" | xargs -r apt-mark hold -o DPkg::Lock::Timeout={int(lock_timeout)}")


def hold_filter(patterns: Iterable[str], version: str) -> str:
    """The awk that picks installed (``ii``) packages of the set at ``version`` from
    ``dpkg-query`` lines ``STATUS NAME VERSION``."""
    awk = "$1 ~ /^ii/ && $2 ~ re && $3 ~ ver {print $2}"
    return (f"awk -v re={shlex.quote(glob_ere(patterns))}"
            f" -v ver={shlex.quote(version_ere(version))} {shlex.quote(awk)}")


RPM_FORMAT = "%{NAME} %{VERSION} %{NAME}-%{VERSION}-%{RELEASE}\\n"  # rpm expands \\n


def lock_filter(patterns: Iterable[str], version: str) -> str:
    """The awk that picks installed packages of the set at exactly ``version`` from
    ``rpm -qa`` lines ``NAME VERSION NAME-VERSION-RELEASE`` and prints the NVR to lock."""
    awk = "$1 ~ re && $2 ~ ver {print $3}"
    return (f"awk -v re={shlex.quote(glob_ere(patterns))}"
            f" -v ver={shlex.quote('^' + _ere(version) + '$')} {shlex.quote(awk)}")


def lock_script(patterns: Iterable[str], version: str) -> str:
    """Version-lock every installed package of the driver's set at ``version`` (dnf), run
    after the install so it sees what dnf really brought; a package already locked in the
    same form is skipped by dnf itself, so the script is idempotent."""
    return (f"rpm -qa --qf {shlex.quote(RPM_FORMAT)} | {lock_filter(patterns, version)}"
            " | sort | xargs -r dnf -q versionlock add")


#: The last line the guard's simulate step prints: apt's exit status (sh has no pipefail).
APT_STATUS = "nodegate-apt-get-exit"

GUARD_AWK = (
    '$1 == status { rc = $2; next }'
    ' /^E: / || / : (Pre-)?Depends: / { why = why " | " $0 }'
    ' $1 == "Inst" { v = $3; if (v ~ /^\\[/) v = $4; sub(/^\\(/, "", v);'
    ' if ($2 ~ re && $2 !~ own && v !~ ver) bad = bad " " $2 "=" v }'
    ' END { if (rc != "" && rc != 0) { gsub(/  +/, " ", why);'
    ' print "nodegate: apt cannot install the NVIDIA driver at " want " (apt-get -s exit "'
    ' rc "):" substr(why, 3) > "/dev/stderr"; exit 1 }'
    ' if (bad != "") { print "nodegate: installing the NVIDIA driver at " want'
    ' " would bring driver packages at another version:" bad "; the repository metapackage'
    ' for " want " is transitional to another branch, or a dependency escapes the pin:'
    ' choose another driver.version" > "/dev/stderr"; exit 1 } }')


def guard_awk(patterns: Iterable[str], version: str, own: Iterable[str] = ()) -> str:
    """The awk that reads ``apt-get -s install`` output and fails on an off-pin driver
    package (``Inst NAME [OLD] (NEW ARCHIVE [ARCH])`` is apt's simulate format); names in
    ``own`` (``DEBIAN_OWN_VERSIONS``) have their own version line and are not counted."""
    skip = list(own)
    return (f"awk -v re={shlex.quote(glob_ere(patterns))}"
            f" -v own={shlex.quote(glob_ere(skip) if skip else '^$')}"
            f" -v ver={shlex.quote(version_ere(version))}"
            f" -v want={shlex.quote(version)} -v status={APT_STATUS}"
            f" {shlex.quote(GUARD_AWK)}")


AVAILABLE_AWK = (
    '{ n = $1; v = $2; gsub(/ /, "", n); gsub(/ /, "", v) }'
    ' $3 ~ / Sources *$/ { next }'
    ' { seen[n] = seen[n] " " v; if (v ~ ver) ok[n] = 1 }'
    ' END { k = split(names, list, " "); for (i = 1; i <= k; i++) { p = list[i];'
    ' if (p in ok) continue; if (p in seen) bad = bad "; " p " (the repositories carry"'
    ' seen[p] ")"; else bad = bad "; " p " (in no configured repository)" }'
    ' if (bad != "") { print "nodegate: no build at " want " of " substr(bad, 3)'
    ' ": choose a driver.version and kernel module flavour the repositories carry"'
    ' > "/dev/stderr"; exit 1 } }')


def available_awk(names: Iterable[str], version: str) -> str:
    """The awk that reads ``apt-cache madison`` lines (``NAME | VERSION | ARCHIVE``) and
    fails, naming them with the versions there are, when a package has no ``VERSION-*``."""
    return (f"awk -F'|' -v names={shlex.quote(' '.join(names))}"
            f" -v ver={shlex.quote(version_ere(version))}"
            f" -v want={shlex.quote(version)} {shlex.quote(AVAILABLE_AWK)}")


def guard_script(specs: Iterable[str], patterns: Iterable[str], version: str, *,
                 required: Iterable[str] = (), own: Iterable[str] = ()) -> str:
    """Stop before anything changes when a package of ``required`` (the role's own, which
    the preferences pin) has no build at ``version`` in the repositories, or when the
    simulated install of ``specs`` would bring a driver package at another version (names in
    ``own`` excepted)."""
    quoted = " ".join(shlex.quote(s) for s in specs)
    # apt's exit status rides the pipe as a last line: an install apt cannot resolve stops
    # here with apt's own reasons, not at the real install after it
    simulate = ("{ apt-get -s -q install --allow-downgrades --allow-change-held-packages "
                f"{quoted} 2>&1; echo {APT_STATUS} $?; }} | {guard_awk(patterns, version, own)}")
    names = list(required)
    if not names:
        return simulate
    return (f"apt-cache madison {' '.join(shlex.quote(n) for n in names)}"
            f" | {available_awk(names, version)} && {simulate}")
