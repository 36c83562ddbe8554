"""The driver's pins and holds against the real repositories' metadata.

The snapshots under data/driver-packages are the distributions' own indexes (README there);
the guard and hold filters are the real awk the role runs, fed with real-format lines.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from roles.driver_closure import Entry, Index, closure, off_pin, uncovered
from roles.driver_pins import APT_PIN_PATTERNS, guard_awk, hold_filter

DATA = Path(__file__).parent / "data"
OLD_PATTERNS = ["nvidia-*", "libnvidia-*", "xserver-xorg-video-nvidia-*", "cuda-drivers*",
                "libxnvctrl*"]  # before this change


def _snapshot(os_name: str) -> tuple[Index, list[dict[str, Any]]]:
    data = json.loads((DATA / "driver-packages" / f"{os_name}.json").read_text())
    index = Index(Entry(p["name"], p["version"], p["source"],
                        {k: p[k] for k in ("pre_depends", "depends", "recommends") if k in p},
                        tuple(p["provides"])) for p in data["packages"])
    return index, data["cases"]


def _cases() -> list[tuple[str, list[str], str]]:
    out = []
    for os_name in ("debian12", "ubuntu2204", "ubuntu2404"):
        for case in _snapshot(os_name)[1]:
            out.append((os_name, case["roots"], case["pinned"]))
    return out


@pytest.mark.parametrize(("os_name", "roots", "pinned"), _cases(),
                         ids=lambda v: v if isinstance(v, str) else "+".join(v))
def test_every_package_apt_would_install_is_pinned(os_name: str, roots: list[str],
                                                   pinned: str) -> None:
    """Every package on the driver's branch is pinned; Debian's closure also brings
    glx-alternatives (1.2.2), versioned outside the branch, which no glob may hold."""
    found = closure(_snapshot(os_name)[0], roots, pinned)
    assert len(found) > len(roots)
    branch = pinned.split(".", maxsplit=1)[0]
    missed = uncovered(found, [*APT_PIN_PATTERNS, *roots])
    assert [n for n in missed if found[n].version.startswith(f"{branch}.")] == []
    assert os_name == "debian12" or missed == []


def test_the_old_globs_missed_debian_packages() -> None:
    index, cases = _snapshot("debian12")
    found = closure(index, cases[0]["roots"], cases[0]["pinned"])
    missed = uncovered(found, OLD_PATTERNS + cases[0]["roots"])
    assert {"libcuda1", "libnvcuvid1", "xserver-xorg-video-nvidia", "libglx-nvidia0"} <= \
        set(missed)


@pytest.mark.parametrize("os_name", ["ubuntu2204", "ubuntu2404"])
def test_ubuntu_570_in_the_archive_is_transitional_to_580(os_name: str) -> None:
    index, _ = _snapshot(os_name)
    found = closure(index, ["nvidia-driver-570-server-open"], "570.211.01-*")
    off = off_pin(found, "570.211.01-*", APT_PIN_PATTERNS)
    assert any(name.startswith("nvidia-driver-580-server-open=") for name in off), off


def test_an_older_ubuntu_build_installs_one_version() -> None:
    index, _ = _snapshot("ubuntu2404")
    found = closure(index, ["nvidia-driver-535-server"], "535.161.08-*")
    assert off_pin(found, "535.161.08-*", APT_PIN_PATTERNS) == []


def _simulate_lines(found: dict[str, Entry], archive: str) -> str:
    """``apt-get -s install`` lines in apt's format (see data/apt-simulate)."""
    return "".join(f"Inst {e.name} ({e.version} {archive} [amd64])\n"
                   for e in sorted(found.values(), key=lambda e: e.name))


def _awk(script: str, text: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-c", script], input=text, capture_output=True, text=True,
                          check=False, timeout=30)


def test_the_guard_stops_a_transitional_install_before_it_happens() -> None:
    index, _ = _snapshot("ubuntu2404")
    found = closure(index, ["nvidia-driver-570-server"], "570.211.01-*")
    out = _awk(guard_awk(APT_PIN_PATTERNS, "570.211.01"),
               _simulate_lines(found, "Ubuntu:24.04/noble-updates"))
    assert out.returncode == 1
    assert "nvidia-driver-580-server=580.196.07-0ubuntu0.24.04.1" in out.stderr
    assert "choose another driver.version" in out.stderr


def test_the_guard_lets_a_single_version_install_through() -> None:
    index, _ = _snapshot("ubuntu2404")
    found = closure(index, ["nvidia-driver-535-server"], "535.161.08-*")
    out = _awk(guard_awk(APT_PIN_PATTERNS, "535.161.08"),
               _simulate_lines(found, "Ubuntu:24.04/noble"))
    assert out.returncode == 0, out.stderr


def test_the_guard_reads_real_apt_simulate_output() -> None:
    text = (DATA / "apt-simulate" / "debian12-nvidia-vaapi-driver.txt").read_text()
    out = _awk(guard_awk(APT_PIN_PATTERNS, "535.261.03"), text)
    assert out.returncode == 1
    assert "nvidia-vaapi-driver=0.0.8-1" in out.stderr
    assert "mesa" not in out.stderr  # only the driver's globs count


def test_holds_take_every_installed_driver_package_at_the_version_only() -> None:
    real = (DATA / "dpkg-query" / "debian12-build-machine.txt").read_text()
    index, cases = _snapshot("debian12")
    found = closure(index, cases[0]["roots"], cases[0]["pinned"])
    version = cases[0]["pinned"][:-2]
    driver = "".join(f"ii  {e.name} {e.version}\n" for e in found.values())
    other = "ii  nvidia-cuda-toolkit 11.8.89~11.8.0-5~deb12u1\nrc  libcuda1 " \
            f"{version}-0+deb12u1\n"
    out = _awk(hold_filter(APT_PIN_PATTERNS, version), real + driver + other)
    held = set(out.stdout.split())
    at_version = {e.name for e in found.values() if e.version.startswith(f"{version}-")}
    assert at_version <= held
    assert "libcuda1" in held and "xserver-xorg-video-nvidia" in held
    assert "nvidia-cuda-toolkit" not in held
    assert not any(line.split()[1] in held for line in real.splitlines())


def test_the_dnf_module_state_file_is_read_as_dnf_writes_it() -> None:
    """libdnf writes /etc/dnf/modules.d/<name>.module as an INI section with name, stream,
    profiles and state (ModulePackageContainer's persistor)."""
    from nodegate.facts.packages import DnfModuleState

    text = "[nvidia-driver]\nname=nvidia-driver\nstream=570-open\nprofiles=\nstate=enabled\n"
    state = DnfModuleState().process(text.splitlines())
    assert state == {"name": "nvidia-driver", "stream": "570-open", "profiles": "",
                     "state": "enabled"}
    assert DnfModuleState().process([]) == {}


def test_gpu_placements_give_each_gpu_its_sockets_core_indexes() -> None:
    """Two sockets of 4 cores with SMT (CPUs 0-7 socket 0, 8-15 socket 1, siblings +16),
    GPUs numbered by the driver's Device Minor, not bus order."""
    from nodegate.facts.gpu import GpuPlacements

    lines = ["gpu 1 0000:18:00.0 0", "gpu 0 0000:2a:00.0 0", "gpu 2 0000:9a:00.0 8",
             "gpu 3 0000:ab:00.0 -"]
    for cpu in range(32):
        logical = cpu % 16
        lines.append(f"cpu {cpu} {logical // 8} {logical % 8 // 2}")
    got = GpuPlacements().process(lines)
    assert [(p["minor"], p["bdf"], p["socket"], p["cores"]) for p in got] == [
        (0, "0000:2a:00.0", 0, "0-3"), (1, "0000:18:00.0", 0, "0-3"),
        (2, "0000:9a:00.0", 1, "4-7"), (3, "0000:ab:00.0", None, None)]
    assert GpuPlacements().process([]) == []


def test_a_driver_change_releases_the_held_set_first_and_holds_it_after() -> None:
    """The lab's upgrade test found it: with the whole set held, apt kept libnvidia-ml1 at
    the old version and refused the new nvidia-driver's exact-version Depends."""
    from roles.nvidia_driver import nvidia_driver
    from tests.roles.harness import run
    from tests.roles.scenarios import host_data

    held = {"libnvidia-ml1": None, "nvidia-driver": None, "libnccl2": None}
    result = run(nvidia_driver, os="debian12", data=host_data(),
                 facts={"packages.HeldPackages": held})
    assert result.error is None, result.error
    text = "\n".join(result.commands)
    unhold = next(c for c in result.commands if c.startswith("apt-mark unhold"))
    assert "libnvidia-ml1" in unhold and "nvidia-driver" in unhold and "libnccl2" not in unhold
    assert text.index("apt-mark unhold") < text.index("--allow-downgrades")
    assert "xargs -r apt-mark hold" in text  # the whole set held again after the install


def test_a_driver_change_names_the_old_builds_packages_only() -> None:
    """driver_pins.behind: the set's packages still at the metapackages' old build move with
    them; another package the globs match, at its own version, is left alone."""
    from roles.driver_pins import behind

    installed = {"nvidia-driver": ["570.133.20-1"], "nvidia-egl-common": ["570.133.20-1"],
                 "nvidia-legacy-check": ["570.133.20-1"], "libcuda1": ["580.65.06-1"],
                 "nvidia-cuda-toolkit": ["11.8.89~11.8.0-5~deb12u1"], "libc6": ["2.36-9"],
                 "nvidia-persistenced": ["570.133.20-1"]}
    roots = ["nvidia-driver", "nvidia-kernel-open-dkms", "nvidia-persistenced"]
    assert behind(installed, APT_PIN_PATTERNS, "580.65.06", roots) == [
        "nvidia-egl-common", "nvidia-legacy-check"]
    assert behind(installed, APT_PIN_PATTERNS, "570.133.20", roots) == []
