"""nvidia_driver with ``nvidia_driver_source=distro`` on Debian 12, against Debian's own index.

The recorded snapshot (data/driver-packages/debian12.json: bookworm and bookworm-security
contrib, non-free and non-free-firmware) is what Debian's archive publishes. The apt tests run
the host's real ``apt-get``/``apt-cache`` over a Packages index written from it, in a throwaway
apt root (``APT_CONFIG``), with the preferences and guard the role renders. Relations to
packages outside the snapshot (libc6, dkms, the X server) are dropped from that index: they are
outside the driver's pin set. Conflicts are not recorded, so apt does not see that the two
kernel module flavours exclude each other.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import pytest
from debian.deb822 import PkgRelation

from roles.driver_closure import Entry, Index, closure, off_pin, uncovered
from roles.driver_pins import APT_PIN_PATTERNS, DEBIAN_OWN_VERSIONS, guard_awk
from roles.nvidia_driver import nvidia_driver
from tests.roles.harness import run
from tests.roles.scenarios import host_data

SNAPSHOT = Path(__file__).parent / "data" / "driver-packages" / "debian12.json"
PREFERENCES = "/etc/apt/preferences.d/nodegate-nvidia-driver"
#: the driver's own version line in Debian (the open module is built from its own source)
DRIVER_SOURCES = {"nvidia-graphics-drivers", "nvidia-open-gpu-kernel-modules"}
#: providers of libnvidia-cfg.so.1 & co. from the legacy branch: an alternative apt never
#: takes while libnvidia-cfg1 resolves, but roles.driver_closure walks every alternative
LEGACY = "nvidia-graphics-drivers-tesla-470"
needs_apt = pytest.mark.skipif(shutil.which("apt-get") is None, reason="needs apt-get")


def _recorded() -> list[dict[str, Any]]:
    return list(json.loads(SNAPSHOT.read_text())["packages"])


def _index() -> Index:
    return Index(Entry(p["name"], p["version"], p["source"],
                       {k: p[k] for k in ("pre_depends", "depends", "recommends") if k in p},
                       tuple(p["provides"])) for p in _recorded())


def _matched(name: str) -> bool:
    return any(fnmatchcase(name, p) for p in APT_PIN_PATTERNS)


def test_the_snapshot_has_debians_names_and_components() -> None:
    by = {(p["name"], p["version"]): p for p in _recorded()}
    assert by[("nvidia-open-kernel-dkms", "535.261.03-1")]["component"] == "contrib"
    assert by[("firmware-nvidia-gsp", "535.309.01-0+deb12u1")]["component"] == \
        "non-free-firmware"
    assert by[("nvidia-persistenced", "535.171.04-1~deb12u1")]["source"] == "nvidia-persistenced"
    # no open module build at the newest driver build, no NVIDIA-repository name
    assert not [v for n, v in by if n == "nvidia-open-kernel-dkms" and v != "535.261.03-1"]
    assert not [n for n, _ in by if n == "nvidia-kernel-open-dkms"]


def test_own_versions_are_exactly_the_other_sources_the_globs_match() -> None:
    """DEBIAN_OWN_VERSIONS is the evidence, not a guess: every package the driver's
    closure brings that the globs match and another source versions (legacy alternatives
    aside), and nothing else."""
    index = _index()
    cases = json.loads(SNAPSHOT.read_text())["cases"]
    others = set()
    for case in cases:
        for e in closure(index, case["roots"], case["pinned"]).values():
            if _matched(e.name) and e.source not in DRIVER_SOURCES | {LEGACY}:
                others.add(e.name)
    assert others == set(DEBIAN_OWN_VERSIONS)


@pytest.mark.parametrize(("kernel", "version"), [("nvidia-kernel-dkms", "535.309.01"),
                                                 ("nvidia-kernel-dkms", "535.261.03"),
                                                 ("nvidia-open-kernel-dkms", "535.261.03")])
def test_the_driver_installs_at_one_version_apart_from_its_own_versioned_helpers(
        kernel: str, version: str) -> None:
    found = closure(_index(), ["nvidia-driver", kernel, "nvidia-persistenced"], f"{version}-*")
    off = off_pin(found, f"{version}-*", APT_PIN_PATTERNS)
    assert "nvidia-persistenced=535.171.04-1~deb12u1" in off  # what the guard used to stop
    assert [o for o in off if o.split("=")[0] not in DEBIAN_OWN_VERSIONS
            and found[o.split("=")[0]].source != LEGACY] == []
    # every package on the driver's version line is pinned; what no glob matches is versioned
    # outside the branch (glx-alternatives 1.2.2)
    missed = uncovered(found, [*APT_PIN_PATTERNS, "nvidia-driver", kernel])
    assert missed and not [n for n in missed if found[n].version.startswith("535.")]


def test_the_open_module_has_no_build_at_the_newest_driver() -> None:
    found = closure(_index(), ["nvidia-driver", "nvidia-open-kernel-dkms"], "535.309.01-*")
    off = off_pin(found, "535.309.01-*", APT_PIN_PATTERNS)
    assert {"nvidia-open-kernel-dkms=535.261.03-1", "nvidia-open-kernel-support=535.261.03-1"} \
        <= set(off)


def _simulate(found: dict[str, Entry]) -> str:
    """``apt-get -s install`` lines in apt's format (data/apt-simulate), legacy aside."""
    return "".join(f"Inst {e.name} ({e.version} Debian:12/bookworm [amd64])\n"
                   for e in sorted(found.values(), key=lambda e: e.name) if e.source != LEGACY)


def _sh(script: str, text: str = "", env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-c", script], input=text, capture_output=True, text=True,
                          check=False, timeout=120, env=env)


def test_the_guard_skips_own_versions_and_still_stops_an_off_pin_driver_package() -> None:
    found = closure(_index(), ["nvidia-driver", "nvidia-kernel-dkms", "nvidia-persistenced"],
                    "535.261.03-*")
    lines = _simulate(found)
    before = _sh(guard_awk(APT_PIN_PATTERNS, "535.261.03"), lines)  # the role before the fix
    assert before.returncode == 1
    assert "nvidia-persistenced=535.171.04-1~deb12u1" in before.stderr
    now = guard_awk(APT_PIN_PATTERNS, "535.261.03", DEBIAN_OWN_VERSIONS)
    assert _sh(now, lines).returncode == 0
    escaped = lines.replace("Inst libcuda1 (535.261.03-1 ", "Inst libcuda1 (535.309.01-0+deb12u1 ")
    assert escaped != lines
    out = _sh(now, escaped)
    assert out.returncode == 1
    assert "another version: libcuda1=535.309.01-0+deb12u1;" in out.stderr


# --- real apt over the recorded index -------------------------------------------------------


def _stanza(p: dict[str, Any], names: set[str]) -> str:
    """One Packages stanza; alternatives naming packages outside the snapshot are dropped."""
    lines = [f"Package: {p['name']}", f"Version: {p['version']}", "Architecture: amd64",
             f"Source: {p['source']}"]
    for key, field in (("pre_depends", "Pre-Depends"), ("depends", "Depends"),
                       ("recommends", "Recommends")):
        kept = []
        for alternatives in PkgRelation.parse_relations(p[key]) if p.get(key) else []:
            alts = [a for a in alternatives if a["name"] in names and not a.get("archqual")]
            if alts:
                kept.append(" | ".join(a["name"] + (f" ({a['version'][0]} {a['version'][1]})"
                                                    if a.get("version") else "")
                                       for a in alts))
        if kept:
            lines.append(f"{field}: {', '.join(kept)}")
    if p["provides"]:
        lines.append(f"Provides: {', '.join(p['provides'])}")
    lines += [f"Filename: ./{p['name']}_{p['version']}_amd64.deb", "Size: 1"]
    return "\n".join(lines) + "\n"


class DebianApt:
    """A throwaway apt root over the recorded Debian 12 index."""

    def __init__(self, root: Path) -> None:
        packages = _recorded()
        names = {p["name"] for p in packages} | {v for p in packages for v in p["provides"]}
        for sub in ("etc/apt/preferences.d", "etc/apt/apt.conf.d", "state/lists/partial",
                    "cache/archives/partial", "repo"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        (root / "repo/Packages").write_text("\n".join(_stanza(p, names) for p in packages))
        (root / "etc/apt/sources.list").write_text(f"deb [trusted=yes] file:{root}/repo ./\n")
        (root / "status").write_text("")
        self.prefs = root / "etc/apt/preferences.d/nodegate-nvidia-driver"
        sandbox = 'APT::Sandbox::User "root";\n' if os.geteuid() == 0 else ""
        (root / "apt.conf").write_text(
            f'Dir::Etc "{root}/etc/apt";\nDir::State "{root}/state";\n'
            f'Dir::State::status "{root}/status";\nDir::Cache "{root}/cache";\n'
            f'Debug::NoLocking "true";\nAPT::Architecture "amd64";\n'
            f'APT::Architectures {{ "amd64"; }};\n{sandbox}')
        self.env = {**os.environ, "APT_CONFIG": str(root / "apt.conf"), "LC_ALL": "C"}
        assert self.sh("apt-get update -q").returncode == 0

    def sh(self, script: str) -> subprocess.CompletedProcess[str]:
        return _sh(script, env=self.env)


@pytest.fixture(scope="module")
def apt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DebianApt]:
    yield DebianApt(tmp_path_factory.mktemp("debian-apt"))


def role(version: str, modules: str) -> tuple[str, str]:
    """(apt preferences, guard) the role renders for a fresh Debian 12 node, source distro."""
    result = run(nvidia_driver, os="debian12",
                 data=host_data(nvidia_driver_source="distro", nvidia_driver_version=version,
                                nvidia_driver_kernel_modules=modules,
                                nvidia_driver_gpudirect="peermem"))
    assert result.error is None, result.error
    guard = next(c for c in result.commands if "apt-get -s -q install" in c)
    return result.uploads[PREFERENCES], guard


def inst(output: str) -> dict[str, str]:
    """name -> version from apt's simulate lines ``Inst NAME [OLD] (NEW ARCHIVE [ARCH])``."""
    return {m.group(1): m.group(2)
            for m in re.finditer(r"^Inst (\S+) (?:\[\S+\] )?\((\S+) ", output, re.MULTILINE)}


@needs_apt
def test_the_open_module_at_the_newest_build_stops_the_host_naming_it(apt: DebianApt) -> None:
    prefs, guard = role("535.309.01", "open")
    assert guard.startswith("apt-cache madison nvidia-driver nvidia-open-kernel-dkms |")
    apt.prefs.write_text(prefs)
    out = apt.sh(guard)
    assert out.returncode == 1
    assert out.stderr.strip() == (
        "nodegate: no build at 535.309.01 of nvidia-open-kernel-dkms (the repositories carry "
        "535.261.03-1): choose a driver.version and kernel module flavour the repositories "
        "carry")


@needs_apt
@pytest.mark.parametrize(("version", "modules", "kernel"),
                         [("535.309.01", "proprietary", "nvidia-kernel-dkms"),
                          ("535.261.03", "open", "nvidia-open-kernel-dkms")])
def test_debians_driver_passes_the_guard_with_persistenced_at_its_own_version(
        apt: DebianApt, version: str, modules: str, kernel: str) -> None:
    prefs, guard = role(version, modules)
    apt.prefs.write_text(prefs)
    checked = apt.sh(guard)
    assert checked.returncode == 0, checked.stderr
    out = apt.sh(guard[guard.index("apt-get -s -q install"):].split(" 2>&1;")[0])
    got = inst(out.stdout)
    assert got["nvidia-driver"].startswith(f"{version}-") and got[kernel].startswith(f"{version}-")
    other = {"nvidia-kernel-dkms", "nvidia-open-kernel-dkms"} - {kernel}
    assert not other & set(got)  # one flavour only
    assert got["nvidia-persistenced"] == "535.171.04-1~deb12u1"  # recommended, its own line
    assert got["firmware-nvidia-gsp"].startswith(f"{version}-")  # non-free-firmware
    off = {n: v for n, v in got.items() if _matched(n) and not v.startswith(f"{version}-")}
    assert set(off) <= set(DEBIAN_OWN_VERSIONS), off


@needs_apt
def test_without_the_availability_check_apt_cannot_say_which_package(apt: DebianApt) -> None:
    """Why the guard asks apt-cache first: the simulated install of the 535.309.01 driver
    with Debian's open module (535.261.03 only) is unsolvable (both builds' modules need
    their own firmware-nvidia-gsp), and apt's answer names no package or version."""
    prefs, _ = role("535.309.01", "open")
    apt.prefs.write_text(prefs)
    out = apt.sh("apt-get -s -q install nvidia-driver nvidia-open-kernel-dkms")
    assert out.returncode == 100
    assert "Unable to correct problems, you have held broken packages" in out.stderr
    assert inst(out.stdout) == {}


# --- the archive components ------------------------------------------------------------------


def test_the_components_fact_reads_both_formats_but_skips_the_roles_own_file() -> None:
    from nodegate.facts.packages import AptSuiteComponents
    from roles.nvidia_driver import DEBIAN_SOURCES

    fact = AptSuiteComponents()
    assert f'[ "$f" = {DEBIAN_SOURCES} ] && continue' in fact.command(DEBIAN_SOURCES)
    output = ["##PYINFRA_FILE /etc/apt/sources.list",
              "deb http://deb.debian.org/debian bookworm main non-free-firmware",
              "deb-src http://deb.debian.org/debian bookworm main contrib",
              "##PYINFRA_FILE /etc/apt/sources.list.d/debian.sources",
              "Types: deb", "URIs: http://deb.debian.org/debian-security",
              "Suites: bookworm-security", "Components: main contrib", ""]
    assert fact.process(output) == {"bookworm": ["main", "non-free-firmware"],
                                    "bookworm-security": ["contrib", "main"]}
    with pytest.raises(ValueError, match="not a plain path"):
        fact.command("/etc/apt/x y")


def _components(have: dict[str, list[str]], present: bool = True
                ) -> tuple[list[str], str | None]:
    from roles.nvidia_driver import DEBIAN_SOURCES

    files = {DEBIAN_SOURCES: "# Managed by nodegate\n"} if present else {}
    result = run(nvidia_driver, os="debian12", facts={"packages.AptSuiteComponents": have},
                 files=files, data=host_data(nvidia_driver_source="distro",
                                             nvidia_driver_version="535.261.03"))
    assert result.error is None, result.error
    return ([c for c in result.commands if "nodegate-debian-nvidia" in c],
            result.uploads.get(DEBIAN_SOURCES))


def test_components_the_node_has_are_not_added_again() -> None:
    every = ["contrib", "main", "non-free", "non-free-firmware"]
    full = {s: every for s in ("bookworm", "bookworm-updates", "bookworm-security")}
    assert _components(full) == (
        ["rm -f /etc/apt/sources.list.d/nodegate-debian-nvidia.sources"], None)
    assert _components(full, present=False) == ([], None)
    commands, text = _components({**full, "bookworm-security": ["main"]}, present=False)
    assert commands[0] == "upload /etc/apt/sources.list.d/nodegate-debian-nvidia.sources"
    assert text is not None and text.count("Types: deb") == 1
    assert "Suites: bookworm-security\nComponents: contrib non-free non-free-firmware\n" in text
