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
pin, naming them.
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


def hold_script(patterns: Iterable[str], version: str) -> str:
    """Hold every installed package of the driver's set at ``version`` (run after the
    install, so it sees what apt really brought)."""
    return (f"dpkg-query -W -f={shlex.quote(DPKG_FORMAT)} | {hold_filter(patterns, version)}"
            " | xargs -r apt-mark hold")


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


GUARD_AWK = (
    '$1 == "Inst" { v = $3; if (v ~ /^\\[/) v = $4; sub(/^\\(/, "", v);'
    ' if ($2 ~ re && v !~ ver) bad = bad " " $2 "=" v }'
    ' END { if (bad != "") { print "nodegate: installing the NVIDIA driver at " want'
    ' " would bring driver packages at another version:" bad "; the repository metapackage'
    ' for " want " is transitional to another branch, or a dependency escapes the pin:'
    ' choose another driver.version" > "/dev/stderr"; exit 1 } }')


def guard_awk(patterns: Iterable[str], version: str) -> str:
    """The awk that reads ``apt-get -s install`` output and fails on an off-pin driver
    package (``Inst NAME [OLD] (NEW ARCHIVE [ARCH])`` is apt's simulate format)."""
    return (f"awk -v re={shlex.quote(glob_ere(patterns))}"
            f" -v ver={shlex.quote(version_ere(version))}"
            f" -v want={shlex.quote(version)} {shlex.quote(GUARD_AWK)}")


def guard_script(specs: Iterable[str], patterns: Iterable[str], version: str) -> str:
    """Simulate the install of ``specs`` and stop before anything changes when a driver
    package would land outside ``version``."""
    quoted = " ".join(shlex.quote(s) for s in specs)
    return (f"apt-get -s -q install --allow-downgrades --allow-change-held-packages {quoted}"
            f" | {guard_awk(patterns, version)}")
