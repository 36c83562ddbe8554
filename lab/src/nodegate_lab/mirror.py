"""The lab's package mirror: real Debian packages, lab NVIDIA packages and a wheelhouse.

Built once into ``cache_dir()/lab/mirror-<key>`` (the key hashes the package lists and the
lab package recipe) and served by ``python -m http.server`` bound to the lab uplink address
only, so the nodes install with real apt from a flat repository and never reach anything else.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from nodegate.errors import CannotRunError, ConfigError
from nodegate_lab import base, config, driver_graph, packages, wheel
from nodegate_lab.proc import run

#: Real Debian packages the roles install (their dependencies are fetched too).
DEBIAN_PACKAGES: tuple[str, ...] = ("mdadm", "xfsprogs", "nvme-cli", "fio", "cron", "e2fsprogs",
                                    "pciutils", "curl", "jq", "munge", "slurmd", "slurmctld",
                                    "slurm-client",
                                    # the network role, where the lab profile declares rails
                                    "rdma-core", "ibverbs-utils", "infiniband-diags", "perftest")
RECIPE_VERSION = "2"  # 2: torch in the wheelhouse
URL = f"http://{config.HOST_ADDRESS}:{config.MIRROR_PORT}"


def mirror_key() -> str:
    text = "\n".join([RECIPE_VERSION, *DEBIAN_PACKAGES, *packages.DRIVER_VERSIONS,
                      *packages.NCCL_VERSIONS, *packages.DCGM_VERSIONS,
                      Path(packages.__file__).read_text(), Path(driver_graph.__file__).read_text(),
                      _snapshot().read_text(), _source_digest()])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _source_digest() -> str:
    """The nodegate tree the wheelhouse is built from: a changed checkout rebuilds it, so a
    fresh lab node never runs an older nodegate than the operator's (the same digest labels
    the wheel's version, nodegate_lab.wheel)."""
    from nodegate import paths

    root = paths.project_root()
    return "" if root is None else wheel.source_digest(root)


def _snapshot() -> Path:
    """The recorded Debian 12 driver graph the lab's driver packages are derived from."""
    from nodegate import paths

    return driver_graph.snapshot_path(paths.project_root())


def mirror_dir() -> Path:
    return config.base_cache_dir() / f"mirror-{mirror_key()}"


def _closure(names: tuple[str, ...]) -> list[str]:
    """The packages plus their recursive Depends/PreDepends, as apt resolves them here."""
    out = run(["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests",
               "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances",
               *names]).stdout
    found = {line.strip() for line in out.splitlines()
             if line and not line.startswith(" ") and not line.startswith("<")}
    return sorted(found)


def fetch_debian(dest: Path, packages: tuple[str, ...] = DEBIAN_PACKAGES) -> None:
    """``packages`` and their dependencies as this machine's apt resolves them, downloaded
    as .debs into ``dest`` (the lab mirror's, and the Soft-RoCE VMs' repository)."""
    dest.mkdir(parents=True, exist_ok=True)
    names = _closure(packages)
    # apt drops to _apt for downloads; it must be able to write here
    os.chmod(dest, 0o777)
    proc = subprocess.run(["apt-get", "download", "-q", *names], cwd=dest, capture_output=True,
                          text=True, check=False, timeout=1800)
    if proc.returncode != 0:
        raise CannotRunError(f"apt-get download failed: {proc.stderr.strip()[-300:]}")


def _torch_requirement() -> str:
    """torch at exactly the version this venv runs (the CPU build on the lab host): an
    unpinned torch would resolve to a multi-GB CUDA build the lab nodes cannot use."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"torch=={version('torch')}"
    except PackageNotFoundError:
        raise CannotRunError("torch is not installed here; the lab wheelhouse serves this "
                             "venv's torch to the nodes (make setup installs it)") from None


def _wheels(dest: Path) -> None:
    """nodegate with its ``power`` and ``torch`` extras (the power poller and the battery's
    power group; the load levels and the multi-node check) and their dependencies as wheels,
    for the agent role's pip --find-links. nodegate is built from a staged copy of the tree
    versioned ``<release>+src.<digest>`` (nodegate_lab.wheel), so the agent installs an edited
    tree over the one a node has, and leaves an unchanged one alone."""
    from nodegate import paths

    root = paths.project_root()
    if root is None:  # an installed nodegate: the agent role would find no nodegate wheel
        raise ConfigError("the lab serves its nodes a nodegate wheel built from a checkout; "
                          "run `nodegate-lab up` from a nodegate clone (git clone, then "
                          "make setup), not from an installed package",
                          key="nodegate-lab up")
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="nodegate-wheel-") as tmp:
        source = Path(tmp) / "nodegate"
        version = wheel.stage(root, source)
        proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "-w", str(dest),
                               f"{source}[power,torch]", _torch_requirement()],
                              capture_output=True, text=True, check=False, timeout=1800)
    if proc.returncode != 0:
        raise CannotRunError(f"pip wheel failed: {proc.stderr.strip()[-300:]}")
    built = wheel.wheel_version(dest)
    if built != version:
        raise CannotRunError(f"pip wheel built nodegate {built}, not the staged {version}")


def nodegate_version(directory: Path) -> str | None:
    """The nodegate version a built mirror serves (None: no wheelhouse), which the site file
    pins so the agent role installs exactly this build."""
    return wheel.wheel_version(directory / "wheels")


#: An older mirror is kept this long: another lab instance may still be serving it.
KEEP_STALE_S = 6 * 3600


def _prune(current: Path) -> None:
    """Drop complete mirrors of other keys that no lab has built or served for a while."""
    import time

    for stale in current.parent.glob("mirror-*"):
        marker = stale / ".complete"
        if stale == current or not marker.is_file():
            continue
        if time.time() - marker.stat().st_mtime > KEEP_STALE_S:
            shutil.rmtree(stale, ignore_errors=True)


def build(*, wheels: bool = True) -> Path:
    """Return the built mirror directory, building it once (one builder at a time)."""
    target = mirror_dir()
    if not (target / ".complete").is_file():
        with base.building(target):
            if not (target / ".complete").is_file():
                _build(target, wheels=wheels)
    os.utime(target / ".complete")  # in use again: not pruned by another key's build
    return target


def _build(target: Path, *, wheels: bool) -> None:
    from nodegate.sim.build import LIBRARY_NAME, ensure_built

    tmp = Path(tempfile.mkdtemp(prefix="mirror-", dir=target.parent))
    try:
        fetch_debian(tmp / "debian")
        served = driver_graph.served_packages(scan(tmp, "debian"))
        lab_dir = tmp / "lab"
        lab_dir.mkdir()
        for deb in packages.catalogue(ensure_built() / LIBRARY_NAME, _snapshot(), served):
            packages.build(deb, lab_dir)
        index = scan(tmp, ".")
        (tmp / "Packages").write_text(index)
        with gzip.open(tmp / "Packages.gz", "wt") as fh:
            fh.write(index)
        if wheels:
            _wheels(tmp / "wheels")
        os.chmod(tmp, 0o755)
        (tmp / ".complete").write_text(mirror_key() + "\n")
        shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
        _prune(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def scan(root: Path, directory: str) -> str:
    """The Packages index of ``directory`` under ``root``, paths relative to ``root``."""
    return subprocess.run(["dpkg-scanpackages", "--multiversion", directory], cwd=root,
                          capture_output=True, text=True, check=True).stdout


def apt_source() -> str:
    """The node's only apt source: the flat lab repository (trusted: lab only, no keyring)."""
    return f"deb [trusted=yes] {URL}/ ./\n"
