"""The lab's driver packages carry the recorded Debian 12 graph, and real apt on them shows
what a pin gap does on a node.

The apt tests run the host's real ``apt-get`` against an index of the lab packages (the
control stanzas nodegate_lab.packages builds the mirror's debs from), in a throwaway apt root
(``APT_CONFIG``), with the preferences file and the commands the nvidia_driver role renders
for a Debian 12 node. The index holds the NVIDIA packages only (``served={}``): relations to
libc6 & co. are dropped as for a package the mirror does not serve; they are outside the pin
set and change nothing apt picks inside it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from debian.deb822 import PkgRelation
from debian.debian_support import Version

import roles.nvidia_driver
from nodegate_lab import driver_graph, packages
from roles.driver_closure import Entry, Index, closure
from roles.nvidia_driver import nvidia_driver
from tests.roles.harness import run
from tests.roles.scenarios import host_data

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = ROOT / driver_graph.SNAPSHOT
A, B = "570.133.20", "580.65.06"  # the lab's driver A and B (test_lab_upgrade)
OLD_PATTERNS = ["nvidia-*", "libnvidia-*", "xserver-xorg-video-nvidia-*", "cuda-drivers*",
                "libxnvctrl*"]  # the role's earlier pin globs, which missed libcuda1 & co.
PREFERENCES = "/etc/apt/preferences.d/nodegate-nvidia-driver"
needs_apt = pytest.mark.skipif(shutil.which("apt-get") is None, reason="needs apt-get")


def _debs(served: dict[str, list[str]] | None = None) -> list[packages.Deb]:
    return packages.catalogue(Path("/nonexistent/libnvidia-ml.so.1"), SNAPSHOT, served or {})


def _recorded() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    data = json.loads(SNAPSHOT.read_text())
    return data["packages"], data["cases"]


def _index(entries: list[dict[str, Any]] | list[packages.Deb]) -> Index:
    out = []
    for e in entries:
        if isinstance(e, packages.Deb):
            rel = {"pre_depends": ", ".join(e.pre_depends), "depends": ", ".join(e.depends),
                   "recommends": ", ".join(e.recommends)}
            out.append(Entry(e.name, e.version, "lab", {k: v for k, v in rel.items() if v},
                             tuple(e.provides)))
        else:
            out.append(Entry(e["name"], e["version"], e["source"],
                             {k: e[k] for k in driver_graph.FIELDS if k in e},
                             tuple(e["provides"])))
    return Index(out)


def _exact_edges(stanzas: dict[str, str], names: set[str], version: str) -> set[tuple[str, str]]:
    """(package, dependency) for every ``(= version)`` Depends/Pre-Depends among ``names``."""
    edges = set()
    for name, text in stanzas.items():
        for alternatives in PkgRelation.parse_relations(text) if text else []:
            for alt in alternatives:
                if alt["name"] in names and alt.get("version") == ("=", version):
                    edges.add((name, alt["name"]))
    return edges


def test_each_lab_version_carries_every_recorded_driver_package() -> None:
    template = driver_graph.load(SNAPSHOT)
    names = {p["name"] for p in template}
    assert {"libcuda1", "nvidia-alternative", "xserver-xorg-video-nvidia"} <= names
    debs = _debs()
    for dv in packages.DRIVER_VERSIONS:
        at = {d.name for d in debs if d.version == f"{dv}-1"}
        assert names <= at, sorted(names - at)
        assert at - names == {"nvidia-kernel-open-dkms", "nvidia-persistenced",
                              packages._nscq(dv.split(".")[0]),
                              packages._fabric_manager(dv.split(".")[0])}


def test_the_exact_version_dependencies_are_the_recorded_ones() -> None:
    """Same edges as Debian's index, at the lab version: nothing lost, nothing invented."""
    template = driver_graph.load(SNAPSHOT)
    names = {p["name"] for p in template}
    full = template[0]["version"]
    recorded = _exact_edges({p["name"]: ", ".join(p.get(k, "") for k in ("pre_depends",
                                                                          "depends")
                                                   if p.get(k)) for p in template},
                            names, full)
    assert len(recorded) > 30
    for dv in (A, B):
        lab = _exact_edges({d.name: ", ".join([*d.pre_depends, *d.depends]) for d in _debs()
                            if d.version == f"{dv}-1"}, names, f"{dv}-1")
        assert lab == recorded


#: Debian's name for the open kernel module -> NVIDIA's CUDA repository's (the lab's, which the
#: role installs with nvidia_driver_source=cuda-repo or mirror)
LAB_NAMES = {"nvidia-open-kernel-dkms": "nvidia-kernel-open-dkms"}


def test_the_lab_graph_installs_what_the_recorded_graph_installs() -> None:
    """roles.driver_closure over both graphs, for the roots the role installs on Debian 12
    (the recorded cases use Debian's names, the lab NVIDIA's repository's); the lab models
    the driver's own non-free packages (driver_graph.COMPONENT)."""
    recorded, cases = _recorded()
    template_version = driver_graph.load(SNAPSHOT)[0]["version"]
    upstream = str(Version(template_version).upstream_version)
    lab = _index(_debs())
    extras = {"nvidia-kernel-open-dkms", "nvidia-persistenced"}
    component = {(p["name"], p["version"]): p["component"] for p in recorded}
    for case in cases:
        if case["pinned"] != f"{upstream}-*":
            continue
        want = {e.name for e in closure(_index(recorded), case["roots"], case["pinned"]).values()
                if e.source == driver_graph.SOURCE
                and component[(e.name, e.version)] == driver_graph.COMPONENT}
        got = closure(lab, [LAB_NAMES.get(r, r) for r in case["roots"]], f"{A}-*")
        assert want <= set(got), sorted(want - set(got))
        assert set(got) - want <= extras
        assert {e.version for e in got.values()} == {f"{A}-1"}


def test_outside_relations_resolve_from_the_mirror_or_are_dropped_with_a_reason() -> None:
    graph = packages.driver_graphs(SNAPSHOT, {"libc6": ["2.36-9+deb12u14"],
                                              "libssl3": ["3.0.17-1~deb12u2"]})[A]
    smi = next(s for s in graph.stanzas if s.name == "nvidia-smi")
    assert smi.relations["depends"] == ["nvidia-alternative (= 570.133.20-1)",
                                        "libnvidia-ml1 (= 570.133.20-1)", "libc6 (>= 2.34)"]
    assert graph.dropped["xserver-xorg-video-nvidia depends: xserver-xorg-core (<< 2:21.99)"] \
        == driver_graph.NOT_SERVED
    assert graph.dropped["nvidia-kernel-dkms depends: firmware-nvidia-gsp-570.133.20"] \
        == driver_graph.NOT_RECORDED
    assert graph.dropped["libcuda1 recommends: libcuda1:i386 (= 570.133.20-1)"] \
        == driver_graph.FOREIGN_ARCH
    old_libc = packages.driver_graphs(SNAPSHOT, {"libc6": ["2.31-13"]})[A]
    assert old_libc.dropped["nvidia-smi depends: libc6 (>= 2.34)"] == driver_graph.NOT_SERVED
    lab_names = {s.name for s in graph.stanzas}
    # no relation inside the driver's set is ever dropped
    assert not [k for k in graph.dropped if k.split(": ", 1)[1].split(" ")[0] in lab_names]


# --- real apt on the lab graph ------------------------------------------------------------


class Apt:
    """A throwaway apt root over the lab packages' index."""

    def __init__(self, root: Path) -> None:
        self.root = root
        repo = root / "repo"
        for sub in ("etc/apt/preferences.d", "etc/apt/apt.conf.d", "state/lists/partial",
                    "cache/archives/partial", "repo"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        (repo / "Packages").write_text("\n".join(
            packages.control(d) + f"Filename: ./{d.name}_{d.version}_amd64.deb\nSize: 1\n"
            for d in _debs()))
        (root / "etc/apt/sources.list").write_text(f"deb [trusted=yes] file:{repo} ./\n")
        self.status = root / "status"
        self.status.write_text("")
        sandbox = 'APT::Sandbox::User "root";\n' if os.geteuid() == 0 else ""
        (root / "apt.conf").write_text(
            f'Dir::Etc "{root}/etc/apt";\nDir::State "{root}/state";\n'
            f'Dir::State::status "{self.status}";\nDir::Cache "{root}/cache";\n'
            f'Debug::NoLocking "true";\nAPT::Architecture "amd64";\n'
            f'APT::Architectures {{ "amd64"; }};\n{sandbox}')
        self.env = {**os.environ, "APT_CONFIG": str(root / "apt.conf"), "LC_ALL": "C"}
        self.sh("apt-get update -q")

    def sh(self, script: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["sh", "-c", script], env=self.env, capture_output=True,
                              text=True, check=False, timeout=120)

    def prefer(self, text: str) -> None:
        (self.root / "etc/apt/preferences.d/nodegate-nvidia-driver").write_text(text)

    def installed(self, names: list[str], version: str) -> None:
        """dpkg status with ``names`` installed at ``version`` (their lab control stanzas)."""
        stanzas = [packages.control(d).replace("\nVersion:", "\nStatus: install ok installed"
                                               "\nVersion:", 1)
                   for d in _debs() if d.name in names and d.version == version]
        self.status.write_text("\n".join(stanzas))


def inst(output: str) -> dict[str, str]:
    """name -> version from apt's simulate lines ``Inst NAME [OLD] (NEW ARCHIVE [ARCH])``."""
    return {m.group(1): m.group(2)
            for m in re.finditer(r"^Inst (\S+) (?:\[\S+\] )?\((\S+) ", output, re.MULTILINE)}


def role(version: str, *, installed: dict[str, list[str]] | None = None) -> tuple[str, list[str]]:
    """(apt preferences, apt commands) the nvidia_driver role renders for a lab node."""
    facts: dict[str, Any] = {}
    if installed:
        facts = {"deb.DebPackages": installed,
                 "packages.HeldPackages": dict.fromkeys(installed)}
    result = run(nvidia_driver, os="debian12", facts=facts,
                 data=host_data(nvidia_driver_version=version, nvidia_driver_source="mirror",
                                nvidia_driver_mirror_url="http://10.0.0.1:8080/",
                                nvidia_driver_drained=True))
    assert result.error is None, result.error
    return result.uploads[PREFERENCES], [c for c in result.commands if "apt-get" in c]


def _roots(commands: list[str]) -> list[str]:
    guard = next(c for c in commands if "apt-get -s -q install" in c)
    simulate = guard[guard.index("apt-get -s -q install"):]  # after the availability check
    return simulate.split(" 2>&1;")[0].split()[6:]


@pytest.fixture(scope="module")
def apt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Apt]:
    yield Apt(tmp_path_factory.mktemp("apt"))


@needs_apt
def test_the_roles_pins_install_the_whole_set_at_one_version(apt: Apt) -> None:
    prefs, commands = role(A)
    roots = _roots(commands)
    assert roots == ["nvidia-driver", "nvidia-kernel-open-dkms", "nvidia-persistenced"]
    apt.prefer(prefs)
    apt.installed([], "")
    out = apt.sh("apt-get -s -q install " + " ".join(roots))
    assert out.returncode == 0, out.stdout + out.stderr
    got = inst(out.stdout)
    assert {"libcuda1", "libnvcuvid1", "xserver-xorg-video-nvidia", "libglx-nvidia0",
            "nvidia-alternative", "libnvidia-ml1", *roots} <= set(got)
    assert set(got.values()) == {f"{A}-1"}, got
    guard = next(c for c in commands if "apt-get -s -q install" in c)
    checked = apt.sh(guard)  # the role's own guard, on apt's real output
    assert checked.returncode == 0, checked.stderr


@needs_apt
def test_the_old_globs_cannot_install_the_driver(apt: Apt, monkeypatch: pytest.MonkeyPatch
                                                 ) -> None:
    """libcuda1, xserver-xorg-video-nvidia & co. unpinned: apt takes the newest branch's
    build for them, which the pinned metapackages' exact Depends refuse."""
    monkeypatch.setattr(roles.nvidia_driver, "APT_PIN_PATTERNS", OLD_PATTERNS)
    prefs, commands = role(A)
    assert "libcuda1" not in prefs
    apt.prefer(prefs)
    apt.installed([], "")
    out = apt.sh("apt-get -s -q install " + " ".join(_roots(commands)))
    assert out.returncode == 100
    assert "The following packages have unmet dependencies:" in out.stdout
    assert re.search(r"nvidia-driver : Depends: (xserver-xorg-video-nvidia|nvidia-driver-libs)"
                     rf" \(= {re.escape(A)}-1\) but it is not going to be installed", out.stdout)
    assert inst(out.stdout) == {}


@needs_apt
def test_the_guard_stops_with_apts_reasons_when_apt_cannot_resolve(
        apt: Apt, monkeypatch: pytest.MonkeyPatch) -> None:
    """sh has no pipefail: before, an apt-get -s that could not resolve fed the guard's awk no
    Inst line and the guard passed; the real install after it then failed on apt's own."""
    monkeypatch.setattr(roles.nvidia_driver, "APT_PIN_PATTERNS", OLD_PATTERNS)
    prefs, commands = role(A)
    apt.prefer(prefs)
    apt.installed([], "")
    guard = next(c for c in commands if "apt-get -s -q install" in c)
    checked = apt.sh(guard)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert f"nodegate: apt cannot install the NVIDIA driver at {A} (apt-get -s exit 100):" \
        in checked.stderr
    assert re.search(r"nvidia-driver : Depends: \S+ \(= " + re.escape(A) + r"-1\)",
                     checked.stderr)


def _at_a(apt: Apt) -> dict[str, list[str]]:
    """A node with the role's install at A (what apt installed above), as dpkg lists it."""
    prefs, commands = role(A)
    apt.prefer(prefs)
    apt.installed([], "")
    names = list(inst(apt.sh("apt-get -s -q install " + " ".join(_roots(commands))).stdout))
    apt.installed(names, f"{A}-1")
    return {n: [f"{A}-1"] for n in names}


@needs_apt
def test_an_upgrade_with_the_roles_commands_moves_every_package(apt: Apt) -> None:
    installed = _at_a(apt)
    prefs, commands = role(B, installed=installed)
    apt.prefer(prefs)
    guard = next(c for c in commands if "apt-get -s -q install" in c)
    checked = apt.sh(guard)
    assert checked.returncode == 0, checked.stderr
    install = next(c for c in commands if " apt-get install " in c and "-y" in c
                   and "nvidia-driver" in c)
    out = apt.sh(install.replace(" apt-get install ", " apt-get -s install ", 1))
    assert out.returncode == 0, out.stdout + out.stderr
    moved = inst(out.stdout)
    assert set(moved) == set(installed)  # every package of the A build, none left behind
    assert set(moved.values()) == {f"{B}-1"}


@needs_apt
def test_the_metapackages_alone_left_four_packages_at_the_old_build(apt: Apt) -> None:
    """What the role did before it named the old build's packages (driver_pins.behind):
    apt moves only what an exact-version Depends forces."""
    installed = _at_a(apt)
    prefs, _ = role(B, installed=installed)
    apt.prefer(prefs)
    out = apt.sh("apt-get -s -q install nvidia-driver nvidia-kernel-open-dkms "
                 "nvidia-persistenced")
    assert out.returncode == 0, out.stderr
    left = set(installed) - set(inst(out.stdout))
    assert left == {"nvidia-legacy-check", "nvidia-egl-common", "nvidia-vulkan-common",
                    "nvidia-suspend-common"}
    assert re.search(r"\b4 not upgraded", out.stdout)


@needs_apt
def test_the_old_globs_cannot_upgrade_either(apt: Apt, monkeypatch: pytest.MonkeyPatch) -> None:
    installed = _at_a(apt)
    monkeypatch.setattr(roles.nvidia_driver, "APT_PIN_PATTERNS", OLD_PATTERNS)
    prefs, _ = role(B, installed=installed)
    apt.prefer(prefs)
    out = apt.sh("apt-get -s -q install nvidia-driver nvidia-kernel-open-dkms "
                 "nvidia-persistenced")
    assert out.returncode == 100
    assert "unmet dependencies" in out.stdout
    assert inst(out.stdout) == {}
