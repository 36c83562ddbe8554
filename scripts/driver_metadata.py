"""Record the NVIDIA driver's package graph from the real repositories' Packages indexes.

For each OS the nvidia_driver role supports on apt, this downloads the archive's own index
(Debian 12 contrib, non-free and non-free-firmware and their security updates: Debian splits
the driver's packages over the three; Ubuntu 22.04/24.04 restricted and -updates),
computes the closure of the role's metapackages at each recorded driver version
(roles/driver_closure.py), and writes only those packages (name, version, source, component,
relations) to tests/roles/data/driver-packages/<os>.json with the URLs and the date. The tests
then prove the role's pins and holds cover every package of every closure, offline.

    .venv/bin/python -m scripts.driver_metadata [--out DIR] [OS ...]   (from the checkout)

NVIDIA's own CUDA repositories (developer.download.nvidia.com) were not reachable from the
machine that made the snapshots, so the Debian snapshot is Debian's packaging of the driver,
the role's ``nvidia_driver_source=distro`` on Debian (its names differ from NVIDIA's
repository where it matters: Debian's open module is ``nvidia-open-kernel-dkms``, NVIDIA's
``nvidia-kernel-open-dkms``), and the RHEL 9 repodata (DNF module streams) is not recorded.
Exit codes: 0 written; 1 a download or parse failed.
"""

from __future__ import annotations

import argparse
import json
import lzma
import sys
import time
import urllib.request
from pathlib import Path

from debian.deb822 import Packages
from debian.debian_support import Version

from roles.driver_closure import Entry, Index, closure

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "roles" / "data" / "driver-packages"
DEBIAN = "http://deb.debian.org/debian/dists/{suite}/{component}/binary-amd64/Packages.xz"
DEBIAN_SECURITY = ("http://deb.debian.org/debian-security/dists/{suite}/{component}/"
                   "binary-amd64/Packages.xz")
#: Debian 12 splits the driver: nvidia-graphics-drivers in non-free, its helpers
#: (nvidia-support, nvidia-persistenced, nvidia-settings, nvidia-modprobe) and the open kernel
#: module (nvidia-open-kernel-dkms, source nvidia-open-gpu-kernel-modules) in contrib, the GSP
#: firmware (firmware-nvidia-gsp) in non-free-firmware.
DEBIAN_COMPONENTS = ("contrib", "non-free", "non-free-firmware")
UBUNTU = "http://archive.ubuntu.com/ubuntu/dists/{suite}/restricted/binary-amd64/Packages.xz"

#: os -> (index URLs, root sets). Roots follow roles/nvidia_driver.driver_packages() for
#: nvidia_driver_source=distro (Debian's own names: nvidia-open-kernel-dkms).
TARGETS: dict[str, tuple[list[str], list[list[str]]]] = {
    "debian12": ([url.format(suite=suite, component=c)
                  for url, suite in ((DEBIAN, "bookworm"), (DEBIAN_SECURITY, "bookworm-security"))
                  for c in DEBIAN_COMPONENTS],
                 [["nvidia-driver", "nvidia-open-kernel-dkms", "nvidia-persistenced"],
                  ["nvidia-driver", "nvidia-kernel-dkms", "nvidia-persistenced"]]),
    "ubuntu2204": ([UBUNTU.format(suite="jammy"), UBUNTU.format(suite="jammy-updates")],
                   [[f"nvidia-driver-{b}{s}{o}"] for b in ("535", "570")
                    for s in ("", "-server") for o in ("", "-open")]),
    "ubuntu2404": ([UBUNTU.format(suite="noble"), UBUNTU.format(suite="noble-updates")],
                   [[f"nvidia-driver-{b}{s}{o}"] for b in ("535", "570")
                    for s in ("", "-server") for o in ("", "-open")]),
}
VERSIONS_PER_ROOT = 3  # the newest upstream versions of each root set


def component(url: str) -> str:
    """The archive component an index URL names (``.../non-free/binary-amd64/...``)."""
    return url.split("/binary-", maxsplit=1)[0].rsplit("/", 1)[-1]


def _entries(url: str) -> list[Entry]:
    with urllib.request.urlopen(url, timeout=120) as response:
        text = lzma.decompress(response.read()).decode("utf-8", "replace")
    out = []
    for para in Packages.iter_paragraphs(text.splitlines(keepends=True), use_apt_pkg=False):
        source = para.get("Source", para["Package"]).split(" ")[0]
        relations = {k.lower().replace("-", "_"): para[k]
                     for k in ("Pre-Depends", "Depends", "Recommends") if k in para}
        provides = tuple(p.strip().split(" ")[0] for p in para.get("Provides", "").split(",")
                         if p.strip())
        out.append(Entry(para["Package"], para["Version"], source, relations, provides))
    return out


def _upstreams(index: Index, roots: list[str]) -> list[str]:
    """The newest upstream versions of the first root, as the role pins them (``v-*``)."""
    versions = {str(Version(e.version).upstream_version) for e in index.by_name.get(roots[0], [])}
    return sorted(versions, key=Version, reverse=True)[:VERSIONS_PER_ROOT]


def snapshot(os_name: str) -> dict[str, object]:
    urls, root_sets = TARGETS[os_name]
    entries = {url: _entries(url) for url in urls}
    where = {(e.name, e.version): component(url) for url, es in entries.items() for e in es}
    index = Index(e for es in entries.values() for e in es)
    cases, kept = [], {}
    for roots in root_sets:
        for upstream in _upstreams(index, roots):
            pinned = f"{upstream}-*"
            found = closure(index, roots, pinned)
            cases.append({"roots": roots, "pinned": pinned})
            kept.update({(e.name, e.version): e for e in found.values()})
    packages = [{"name": e.name, "version": e.version, "source": e.source,
                 "component": where[(e.name, e.version)],
                 **dict(e.relations), "provides": list(e.provides)}
                for e in sorted(kept.values(), key=lambda e: (e.name, Version(e.version)))]
    return {"os": os_name, "origin": urls, "fetched": time.strftime("%Y-%m-%d"),
            "licence": "package metadata (names, versions, relations) as published in the "
                       "distribution's public archive index",
            "cases": cases, "packages": packages}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("os", nargs="*", metavar="OS",
                        help=f"which snapshots to record ({', '.join(TARGETS)}; default all)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.os) - set(TARGETS))
    if unknown:
        parser.error(f"unknown OS {', '.join(unknown)} (known: {', '.join(TARGETS)})")
    args.out.mkdir(parents=True, exist_ok=True)
    for os_name in args.os or TARGETS:
        try:
            data = snapshot(os_name)
        except (OSError, ValueError, KeyError, lzma.LZMAError) as exc:
            print(f"driver_metadata: {os_name}: {exc}", file=sys.stderr)
            return 1
        path = args.out / f"{os_name}.json"
        path.write_text(json.dumps(data, indent=1) + "\n")
        print(f"{path}: {len(data['cases'])} cases, "  # type: ignore[arg-type]
              f"{len(data['packages'])} package versions")  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    sys.exit(main())
