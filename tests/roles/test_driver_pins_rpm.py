"""The driver's EL version locks against NVIDIA's RPM package graph (RHEL 9).

data/driver-packages/rhel9.json is derived from NVIDIA's spec files, not from published
repodata (RHEL9.md there says what that means); the lock filter is the real awk the role
runs, fed with ``rpm -qa`` lines in the role's own query format.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from roles.driver_closure import uncovered
from roles.driver_closure_rpm import Rpm, RpmIndex, closure, off_version, unlocked
from roles.driver_pins import RPM_PIN_PATTERNS, lock_filter
from roles.nvidia_driver import driver_packages
from roles.ops.common import TargetOS
from tests.roles.scenarios import DRIVER

DATA = Path(__file__).parent / "data" / "driver-packages"
RHEL9 = TargetOS(family="rhel", distro="rhel", major=9, codename=None, cuda_slug="rhel9",
                 initramfs=("dracut", "-f"), mdadm_conf="/etc/mdadm.conf",
                 kernel_headers="kernel-devel-{kernel}", python_venv_package=None)
#: what the EL path locked before this change: only the packages the role names
OLD_ROOTS = {"open": ["nvidia-driver", "nvidia-driver-cuda", "kmod-nvidia-open-dkms",
                      "nvidia-persistenced"],
             "proprietary": ["nvidia-driver", "nvidia-driver-cuda", "kmod-nvidia-latest-dkms",
                             "nvidia-persistenced"]}


def _snapshot() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / "rhel9.json").read_text())
    return data


def _index() -> RpmIndex:
    rpms = []
    for p in _snapshot()["packages"]:
        relations = {k: tuple(p[k]) for k in ("requires", "recommends") if k in p}
        rpms.append(Rpm(p["name"], p["epoch"], p["version"], p["release"], p["arch"],
                        relations, tuple(p["provides"]) + tuple(p["implicit_provides"])))
    return RpmIndex(rpms)


def _versions() -> list[str]:
    return sorted({c["version"] for c in _snapshot()["cases"]})


def _roots(modules: str) -> list[str]:
    return driver_packages(RHEL9, "cuda-repo", "570", modules)


CASES = [(m, v) for m in ("open", "proprietary") for v in _versions()]


def test_the_snapshot_says_what_it_is() -> None:
    data = _snapshot()
    assert "NOT published repodata" in data["kind"]
    assert all(len(o["commit"]) == 40 and o["licence"] for o in data["origin"])
    assert (DATA / "RHEL9.md").is_file()
    # the role's old roots are what the snapshot's cases were made for
    assert {tuple(c["roots"]) for c in data["cases"]} == {tuple(r) for r in OLD_ROOTS.values()}


@pytest.mark.parametrize(("modules", "version"), CASES)
def test_every_package_dnf_would_install_is_in_the_lock_set_at_the_version(
        modules: str, version: str) -> None:
    found = closure(_index(), _roots(modules), version)
    assert {"libnvidia-ml", "libnvidia-cfg", "nvidia-kmod-common", "nvidia-modprobe",
            "nvidia-driver-libs", "nvidia-driver-cuda-libs"} <= set(found)
    assert uncovered(found, RPM_PIN_PATTERNS) == []  # every NVIDIA package is in the set
    assert off_version(found, version) == []  # and dnf installs each at the version


def test_the_old_lock_of_the_named_packages_left_most_of_the_set_free() -> None:
    version = "570.133.20"
    found = closure(_index(), OLD_ROOTS["open"], version)
    locks: dict[str, str | None] = {n: version for n in OLD_ROOTS["open"]}
    assert {"libnvidia-ml", "libnvidia-cfg", "nvidia-kmod-common", "nvidia-modprobe",
            "nvidia-driver-libs", "nvidia-driver-cuda-libs"} <= set(unlocked(found, locks,
                                                                             version))


def test_an_unversioned_requires_brings_another_build_of_the_branch() -> None:
    """nvidia-kmod-common requires plain nvidia-modprobe: with the stream holding every 570
    build, dnf takes the newest, so naming only the old four packages installs a set that
    no lock at 570.133.20 can hold. The role names nvidia-modprobe at the version."""
    found = closure(_index(), OLD_ROOTS["proprietary"], "570.133.20")
    assert off_version(found, "570.133.20") == ["nvidia-modprobe-3:570.148.08-1.el9"]
    assert off_version(closure(_index(), OLD_ROOTS["proprietary"], "570.148.08"),
                       "570.148.08") == []  # the newest build hides it
    assert "nvidia-modprobe" in _roots("proprietary")


@pytest.mark.parametrize(("modules", "version"), CASES)
def test_the_stream_serves_the_whole_set_at_the_version(modules: str, version: str) -> None:
    stream = "570-open" if modules == "open" else "570-dkms"
    artifacts = set(_snapshot()["streams"][stream]["artifacts"])
    found = closure(_index(), _roots(modules), version)
    assert {f"{r.name}-{r.evr}.{r.arch}" for r in found.values()} <= artifacts


def _awk(script: str, text: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-c", script], input=text, capture_output=True, text=True,
                          check=False, timeout=30)


@pytest.mark.parametrize("modules", ["open", "proprietary"])
def test_the_lock_takes_every_installed_package_of_the_set_at_the_version_only(
        modules: str) -> None:
    version = "570.133.20"
    found = closure(_index(), _roots(modules), version)
    lines = "".join(f"{r.name} {r.version} {r.name}-{r.version}-{r.release}\n"
                    for r in found.values())
    other = ("dkms 3.1.8 dkms-3.1.8-1.el9\n"
             "systemd 252 systemd-252-46.el9_5.2\n"
             "nvidia-driver 570.86.15 nvidia-driver-570.86.15-1.el9\n"  # another build
             "libnvidia-container1 1.17.4 libnvidia-container1-1.17.4-1\n")
    out = _awk(lock_filter(RPM_PIN_PATTERNS, version), other + lines)
    locked = set(out.stdout.split())
    assert locked == {f"{r.name}-{r.version}-{r.release}" for r in found.values()}


#: ``rpm -qa | grep -i nvidia`` on a real RHEL 9 host (kernel 5.14.0-503.31.1.el9_5) after
#: ``dnf install nvidia-driver nvidia-settings`` and ``dnf install cuda`` from NVIDIA's
#: cuda-rhel9-x86_64 repository at 570.124.06. Origin: GRuuuuu/GRuuuuu.github.io, post
#: 2025-03-23 "kvm-gpu-passthrough" (no licence stated; these 16 package identifiers only).
#: Real evidence of what the published repository resolves, beside the spec-derived graph.
REAL_EL9_570_124_06 = """\
nvidia-libXNVCtrl-570.124.06-1.el9.x86_64
nvidia-modprobe-570.124.06-1.el9.x86_64
nvidia-kmod-common-570.124.06-1.el9.noarch
kmod-nvidia-open-dkms-570.124.06-1.el9.noarch
libnvidia-ml-570.124.06-1.el9.x86_64
nvidia-driver-libs-570.124.06-1.el9.x86_64
nvidia-driver-570.124.06-1.el9.x86_64
nvidia-settings-570.124.06-1.el9.x86_64
libnvidia-cfg-570.124.06-1.el9.x86_64
nvidia-driver-cuda-libs-570.124.06-1.el9.x86_64
libnvidia-fbc-570.124.06-1.el9.x86_64
xorg-x11-nvidia-570.124.06-1.el9.x86_64
nvidia-xconfig-570.124.06-1.el9.x86_64
nvidia-persistenced-570.124.06-1.el9.x86_64
nvidia-driver-cuda-570.124.06-1.el9.x86_64
nvidia-open-570.124.06-1.el9.noarch
"""


def _nvr(nvra: str) -> tuple[str, str, str]:
    """(name, version, name-version-release) of an ``rpm -q`` NVRA."""
    nvr = nvra.rsplit(".", 1)[0]
    name, version, _release = nvr.rsplit("-", 2)
    return name, version, nvr


def test_a_real_el9_install_from_nvidias_repository_is_locked_whole() -> None:
    """What dnf really installed from the published repository, spec graph or not (the
    nvidia-open metapackage, nvidia-settings...), is locked at the version by the role's
    own filter, and nothing else is."""
    real = [_nvr(line) for line in REAL_EL9_570_124_06.split()]
    lines = "".join(f"{n} {v} {nvr}\n" for n, v, nvr in real)
    other = "dkms 3.1.8 dkms-3.1.8-1.el9\nlibnvidia-container1 1.17.4 libnvidia-container1-1.17.4-1\n"
    out = _awk(lock_filter(RPM_PIN_PATTERNS, "570.124.06"), other + lines)
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.split()) == sorted(nvr for _n, _v, nvr in real)


def test_every_real_package_the_graph_lacks_is_named_in_its_notes() -> None:
    """The spec-derived graph is a subset of the real repository: each real package it lacks
    must be one RHEL9.md says it does not record, so the gap is known, not silent."""
    graph = {p["name"] for p in _snapshot()["packages"]}
    missing = {_nvr(line)[0] for line in REAL_EL9_570_124_06.split()} - graph
    assert missing == {"nvidia-libXNVCtrl", "nvidia-settings", "nvidia-xconfig", "nvidia-open"}
    notes = (DATA / "RHEL9.md").read_text()
    assert all(f"{name}" in notes for name in missing)


# --- the role on EL9, against fixture facts ------------------------------------------------

OLD = "570.86.15"


def _role(facts: dict[str, Any], **data: Any) -> Any:
    from roles.nvidia_driver import nvidia_driver
    from tests.roles.harness import run
    from tests.roles.scenarios import host_data

    return run(nvidia_driver, os="rocky9",
               data=host_data(**data), facts={"gpu.GpuProcesses": [], **facts})


def _installed(version: str) -> dict[str, list[str]]:
    """RpmPackages of a node with the driver's set installed at ``version`` (from the
    snapshot's closure) beside unrelated packages, as ``rpm -qa`` lists them."""
    found = closure(_index(), _roots("open"), version)
    return {**{r.name: [f"{r.version}-{r.release}"] for r in found.values()},
            "dkms": ["3.1.8-1.el9"], "libnccl": ["2.26.2-1+cuda12.8"]}


def test_a_fresh_el9_install_names_modprobe_and_locks_the_whole_set_after() -> None:
    result = _role({})
    assert result.error is None, result.error
    install = next(i for i, c in enumerate(result.commands) if c.startswith("dnf -y -q install")
                   and "nvidia-driver-570.133.20" in c)
    assert "nvidia-modprobe-570.133.20" in result.commands[install]
    lock = next(i for i, c in enumerate(result.commands) if "xargs -r dnf -q versionlock add" in c)
    assert install < lock
    assert "libnvidia-" in result.commands[lock]  # the set's globs, not the named packages


def test_a_set_installed_but_locked_only_by_name_gets_the_rest_locked() -> None:
    """What a node set up by the old role looks like: right version, four locks."""
    named = {n: DRIVER for n in OLD_ROOTS["open"]}
    result = _role({"rpm.RpmPackages": _installed(DRIVER), "packages.HeldPackages": named})
    assert result.error is None, result.error
    assert not any(c.startswith(("dnf -y -q install", "dnf -y -q downgrade"))
                   and "nvidia" in c for c in result.commands)
    assert any("xargs -r dnf -q versionlock add" in c for c in result.commands)


def test_a_converged_el9_node_changes_nothing() -> None:
    locks: dict[str, str | None] = {n: DRIVER for n in _installed(DRIVER) if n != "dkms"}
    locks["libnccl"] = "2.26.2"
    result = _role({"rpm.RpmPackages": _installed(DRIVER), "packages.HeldPackages": locks})
    assert result.error is None, result.error
    assert not any("versionlock" in c or (c.startswith("dnf -y -q install") and "nvidia" in c)
                   for c in result.commands), result.commands
    assert any("version-locked" in n for n in result.noops)


def test_a_version_change_releases_the_locked_set_first_and_locks_it_again_after() -> None:
    """dnf's versionlock hides every other build of a locked name: with libnvidia-ml still
    locked at the old version the new nvidia-driver-libs' = 3:V-R Requires cannot resolve."""
    locks: dict[str, str | None] = {n: OLD for n in _installed(OLD) if n != "dkms"}
    locks["libnccl"] = "2.26.2"
    result = _role({"rpm.RpmPackages": _installed(OLD), "packages.HeldPackages": locks})
    assert result.error is None, result.error
    delete = next(i for i, c in enumerate(result.commands)
                  if c.startswith("dnf -q versionlock delete"))
    released = result.commands[delete].split()[4:]
    assert {"libnvidia-ml", "libnvidia-cfg", "nvidia-kmod-common", "nvidia-modprobe",
            "nvidia-driver-libs", "nvidia-driver", "kmod-nvidia-open-dkms"} <= set(released)
    assert "libnccl" not in released and "dkms" not in released
    install = next(i for i, c in enumerate(result.commands)
                   if c.startswith("dnf -y -q install") and "nvidia-driver-" in c)
    lock = next(i for i, c in enumerate(result.commands)
                if "xargs -r dnf -q versionlock add" in c)
    assert delete < install < lock
    assert f"ver='^{DRIVER.replace('.', '[.]')}$'" in result.commands[lock]
