"""Record the NVIDIA driver's RHEL 9 package graph from NVIDIA's own RPM spec files.

NVIDIA's RHEL 9 repository (developer.download.nvidia.com, its repodata and modules.yaml) was
not reachable from the machine that made the snapshot, so this reads the spec files NVIDIA
publishes on GitHub (yum-packaging-*), at the commits named in ``SPECS``, from local git
clones, and evaluates only what decides the package graph: the conditionals (``%if``,
``%ifarch``) for rhel 9 on x86_64, the macros of the relation lines, and which subpackages
are built (an active ``%files`` section). It writes, for each modelled driver version, every
subpackage's Requires, Provides, Conflicts, Obsoletes, Recommends and Supplements as data to
tests/roles/data/driver-packages/rhel9.json (see RHEL9.md there for what this is and is not).

    .venv/bin/python scripts/driver_metadata_rpm.py [--mirrors DIR] [--out FILE]

``--mirrors`` holds one bare clone per repository as ``<owner>+<name>/repo`` (the layout of
the code index's mirror tool); a clone of each GitHub repository works the same
(``git clone --bare https://github.com/NVIDIA/yum-packaging-nvidia-driver
NVIDIA+yum-packaging-nvidia-driver/repo``). Exit codes: 0 written; 1 a spec could not be read.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "roles" / "data" / "driver-packages" / "rhel9.json"
MIRRORS = Path("/work/.mirror")

#: (repository, spec path, commit, commit date, licence of the repository as it states it)
SPECS: list[tuple[str, str, str, str, str]] = [
    ("NVIDIA/yum-packaging-nvidia-driver", "nvidia-driver.spec",
     "d06f50a507eb6e053e2e7dd4fcd7781060f8ff06", "2025-02-24", "Apache-2.0 (LICENSE)"),
    ("NVIDIA/yum-packaging-nvidia-kmod-common", "nvidia-kmod-common.spec",
     "02d67b710da9d94704925fb107abc480e39a7a44", "2025-02-24", "Apache-2.0 (LICENSE)"),
    ("NVIDIA/yum-packaging-dkms-nvidia", "dkms-nvidia.spec",
     "b28ed69631673c076b797caeec5fd83c452a6f61", "2022-10-14", "Apache-2.0 (LICENSE)"),
    ("NVIDIA/yum-packaging-dkms-nvidia", "dkms-open-nvidia.spec",
     "b28ed69631673c076b797caeec5fd83c452a6f61", "2022-10-14", "Apache-2.0 (LICENSE)"),
    ("NVIDIA/yum-packaging-nvidia-persistenced", "nvidia-persistenced.spec",
     "fe5d7c890f0dd4bd7881c8355bccab94c8e9ff69", "2025-02-24", "Apache-2.0 (LICENSE)"),
    ("NVIDIA/yum-packaging-nvidia-modprobe", "nvidia-modprobe.spec",
     "d9c887a2ad5d35aab8ac2dd74671592502dac0cf", "2025-02-24", "Apache-2.0 (LICENSE)"),
]

#: Driver versions of the 570 branch modelled in one repository, as a ``570-*`` stream holds
#: every build of its branch (NVIDIA's genmodules.py, see STREAM_RULE). Where each is named:
VERSIONS = {
    "570.86.15": "real `dnf info kmod-nvidia-latest-dkms` on EL9 from cuda-rhel9-x86_64, "
                 "2025-02-26: Epoch 3, Version 570.86.15, Release 1.el9 "
                 "(https://github.com/instructlab/instructlab/pull/3190)",
    "570.133.20": "the version the role's test profile pins (tests/roles/scenarios.py DRIVER)",
    "570.148.08": "a later 570 build in NVIDIA's CUDA repository, June 2025 "
                  "(https://github.com/awslabs/amazon-eks-ami/pull/2284)",
}

#: rhel 9 on x86_64: the values a rhel 9 build root gives these macros (``%{?dist}`` is
#: ``.el9``, as the real Release ``1.el9`` above shows; ``%{?fedora}`` is undefined).
MACROS = {"rhel": "9", "dist": ".el9", "_isa": "(x86-64)", "_arch": "x86_64",
          "_target_cpu": "x86_64", "ix86": "i386 i486 i586 i686 pentium3 pentium4 athlon geode",
          "_prefix": "/usr", "_libdir": "/usr/lib64", "_datadir": "/usr/share",
          "_sysconfdir": "/etc", "_bindir": "/usr/bin", "_unitdir": "/usr/lib/systemd/system"}
ARCH = "x86_64"

STREAM_RULE = {
    "source": "NVIDIA/yum-packaging-precompiled-kmod genmodules.py, commit "
              "b20498c19ba7cde5ef9ad093bf1c7f8582e3b2f6 (2021-09-07, branch 465), the "
              "generator of the CUDA repository's modules.yaml for nvidia-driver",
    "rule": "each branch stream (<major>, <major>-dkms; latest, latest-dkms follow the newest "
            "branch) lists every build of the branch's driver packages as artifacts, the "
            "newest dnf-plugin-nvidia, and for -dkms streams kmod-nvidia-latest-dkms at the "
            "branch version; profiles: default (every branch package + the kmod), fm (+ "
            "fabric manager and nscq), ks (without cuda-drivers), src (precompiled streams)",
    "observed_stream_names": {
        "latest, latest-dkms, open-dkms, 550, 550-dkms, 550-open (profiles default, fm, ks, "
        "src)": "real `dnf module list nvidia-driver`, cuda-fedora39-x86_64, 2024-04-17 "
                "(code index: a Fedora 39 install guide)",
        "latest, latest-dkms, open-dkms": "real `dnf module list nvidia-driver`, "
                                          "cuda-rhel8-x86_64, 2024-08-07 (https://github.com/"
                                          "NVIDIA/yum-packaging-precompiled-kmod/issues/52)",
        "560-open": "enabled on Rocky 9 from cuda-rhel9-x86_64, 2024-11-08 "
                    "(https://github.com/stackhpc/ansible-slurm-appliance/pull/471)",
        "565-open": "a depsolve on Rocky 9, 2024-12-13 "
                    "(https://github.com/stackhpc/ansible-slurm-appliance/pull/496)",
        "570-open": "`dnf module info nvidia-driver:570-open` on Rocky 9, grepped there for the "
                    "pinned build; artifacts include nvidia-imex-570-0:570.124.06-1.x86_64, "
                    "2025-05-28 (https://github.com/stackhpc/ansible-slurm-appliance/pull/691)",
    },
    "later_branches": "kmod-nvidia-open-dkms-3:575.57.08-1.el9.noarch requires dkms >= 3.1.8 "
                      "(https://github.com/stackhpc/ansible-slurm-appliance/pull/703, "
                      "2025-06-10): from 575 the kmod is noarch, packaged from a spec not on "
                      "GitHub, so this graph covers the 570 branch only",
}

RELATION_TAGS = {"requires": "requires", "provides": "provides", "conflicts": "conflicts",
                 "obsoletes": "obsoletes", "recommends": "recommends",
                 "supplements": "supplements"}
_TAG = re.compile(r"^(?P<tag>[A-Za-z]+)(?:\((?P<qual>[^)]*)\))?:\s*(?P<value>.*)$")
_MACRO = re.compile(r"%\{([^{}%]*)\}")  # innermost: no macro inside
_SECTION = re.compile(r"^%(description|prep|build|install|check|files|post|postun|pre|preun|"
                      r"posttrans|pretrans|triggerin|triggerun|changelog|ldconfig_scriptlets)"
                      r"\b")


@dataclass
class Package:
    """One binary package a spec builds: its name, arch and relation lists."""

    name: str
    arch: str
    relations: dict[str, list[str]] = field(default_factory=dict)


class Spec:
    """A spec evaluated for one version: only conditionals, macros and relation tags."""

    def __init__(self, text: str, version: str) -> None:
        self.macros = dict(MACROS)
        self.macros["version"] = version
        self.packages: dict[str, Package] = {}
        self.built: set[str] = set()
        self.main_arch = ARCH  # subpackages inherit the main package's BuildArch
        self._parse(text)

    def expand(self, text: str) -> str:
        """Innermost ``%{...}`` first, so ``%{?epoch:%{epoch}:}`` sees its expanded body."""
        for _ in range(20):
            new = _MACRO.sub(lambda m: self._one(m.group(1)), text)
            if new == text:
                break
            text = new
        return text

    def _one(self, body: str) -> str:
        if body.startswith("?!"):
            name, _, value = body[2:].partition(":")
            return "" if name in self.macros else value
        if body.startswith("?"):
            name, colon, value = body[1:].partition(":")
            if name not in self.macros:
                return ""
            return value if colon else self.macros[name]
        if body in self.macros:
            return self.macros[body]
        return "%{" + body + "}"  # not one that decides the graph; checked where it matters

    def _condition(self, expr: str) -> bool:
        expr = self.expand(expr)
        return any(all(self._compare(c.strip()) for c in part.split("&&"))
                   for part in expr.split("||"))

    @staticmethod
    def _compare(text: str) -> bool:
        match = re.fullmatch(r"(\S+)\s*(==|!=|>=|<=|>|<)\s*(\S+)", text)
        if not match:
            return bool(int(text))
        a, op, b = int(match.group(1)), match.group(2), int(match.group(3))
        return {"==": a == b, "!=": a != b, ">=": a >= b, "<=": a <= b, ">": a > b,
                "<": a < b}[op]

    def _parse(self, text: str) -> None:
        stack: list[bool] = []
        current: Package | None = None  # the package whose preamble this line is in
        for raw in text.splitlines():
            line = raw.strip()
            if self._conditional(line, stack) or not all(stack):
                continue
            if not line or line.startswith("#"):
                continue
            words = line.split()
            if words[0] in ("%global", "%define"):
                self.macros[words[1]] = self.expand(" ".join(words[2:]))
            elif words[0] == "%package":
                current = self._package(words[1:])
            elif words[0] == "%files":
                self.built.add(self._name(words[1:]))
                current = None
            elif _SECTION.match(line):
                current = None
            else:
                current = self._tag(line, current)

    def _conditional(self, line: str, stack: list[bool]) -> bool:
        """Apply ``%if``/``%ifarch``/``%ifnarch``/``%else``/``%endif``; True if it was one."""
        words = line.split()
        head = words[0] if words else ""
        if head == "%if":
            stack.append(self._condition(line[3:]))
        elif head in ("%ifarch", "%ifnarch"):
            arches = self.expand(" ".join(words[1:])).split()
            stack.append((ARCH in arches) == (head == "%ifarch"))
        elif head == "%else":
            stack[-1] = not stack[-1]
        elif head == "%endif":
            stack.pop()
        else:
            return False
        return True

    def _tag(self, line: str, current: Package | None) -> Package | None:
        """A preamble tag: Name starts the main package; relations go to ``current``."""
        tag = _TAG.match(line)
        if not tag or (current is None and "name" in self.macros):
            return current
        key, value = tag.group("tag").lower(), self.expand(tag.group("value")).strip()
        if key in RELATION_TAGS and "%" in value:
            raise ValueError(f"unresolved macro in {key}: {value}")
        if key == "name" and current is None:
            self.macros["name"] = value
            return self.packages.setdefault(value, Package(value, self.main_arch))
        if key == "release" and "release" not in self.macros:
            self.macros["release"] = value
        elif key == "epoch":
            self.macros["epoch"] = value
        elif key == "buildarch" and current is not None:
            current.arch = value
            if current.name == self.macros.get("name"):
                self.main_arch = value
        elif key in RELATION_TAGS and current is not None:
            # Requires(post) installs with the package: kept with the others
            kept = current.relations.setdefault(RELATION_TAGS[key], [])
            kept.extend(r for r in _split(value) if r not in kept)
        return current

    def _name(self, args: list[str]) -> str:
        args = [self.expand(a) for a in args if a not in ("-f",)]
        if args and args[0] == "-n":
            return args[1]
        return f"{self.macros['name']}-{args[0]}" if args else self.macros["name"]

    def _package(self, args: list[str]) -> Package:
        name = self._name(args)
        return self.packages.setdefault(name, Package(name, self.main_arch))

    def built_packages(self) -> list[Package]:
        return [p for n, p in self.packages.items() if n in self.built]


def _split(value: str) -> list[str]:
    """``a >= 1, b`` or ``a b`` as relation strings; a rich ``(x and y)`` stays whole."""
    if value.startswith("("):
        return [value]
    out: list[str] = []
    tokens = value.replace(",", " ").split()
    while tokens:
        name = tokens.pop(0)
        if tokens and tokens[0] in ("=", "<", ">", "<=", ">=", "=="):
            op, evr = tokens.pop(0), tokens.pop(0)
            out.append(f"{name} {op} {evr}")
        else:
            out.append(name)
    return out


def spec_text(mirrors: Path, repo: str, path: str, commit: str) -> str:
    clone = mirrors / repo.replace("/", "+") / "repo"
    return subprocess.run(["git", "-C", str(clone), "show", f"{commit}:{path}"],
                          capture_output=True, text=True, check=True, timeout=60).stdout


def packages(texts: Iterable[tuple[str, str]], version: str) -> list[dict[str, object]]:
    """Every built package of every spec at ``version``, with rpmbuild's implicit provides
    (``NAME = E:V-R`` and, for arch packages, ``NAME(x86-64) = E:V-R``) added."""
    out = []
    for source, text in texts:
        spec = Spec(text, version)
        epoch, release = spec.macros.get("epoch"), spec.macros["release"]
        evr = f"{epoch}:{version}-{release}" if epoch else f"{version}-{release}"
        for pkg in spec.built_packages():
            implicit = [f"{pkg.name} = {evr}"]
            if pkg.arch != "noarch":
                implicit.append(f"{pkg.name}{MACROS['_isa']} = {evr}")
            out.append({"name": pkg.name, "epoch": epoch or "0", "version": version,
                        "release": release, "arch": pkg.arch, "spec": source,
                        **{k: v for k, v in pkg.relations.items() if k != "provides"},
                        "provides": pkg.relations.get("provides", []),
                        "implicit_provides": implicit})
    return out


def snapshot(mirrors: Path) -> dict[str, object]:
    texts = [(f"{repo}:{path}", spec_text(mirrors, repo, path, commit))
             for repo, path, commit, _, _ in SPECS]
    pkgs = [p for v in VERSIONS for p in packages(texts, v)]
    names = sorted({str(p["name"]) for p in pkgs})
    kmod = {"open": "kmod-nvidia-open-dkms", "proprietary": "kmod-nvidia-latest-dkms"}
    branch_pkgs = [n for n in names if n not in kmod.values()
                   and n not in ("nvidia-kmod-headers", "nvidia-kmod-source")]
    streams = {f"570-{'open' if flavour == 'open' else 'dkms'}": {
        "derived": True,
        "artifacts": sorted(f"{n}-{p['epoch']}:{p['version']}-{p['release']}.{p['arch']}"
                            for p in pkgs for n in [str(p["name"])]
                            if n in branch_pkgs or n == kmod[flavour]),
        "profiles": {"default": sorted([*branch_pkgs, kmod[flavour]])}}
        for flavour in ("open", "proprietary")}
    cases = [{"roots": roots, "version": v, "stream": stream}
             for v in VERSIONS
             for roots, stream in (
                 (["nvidia-driver", "nvidia-driver-cuda", "kmod-nvidia-open-dkms",
                   "nvidia-persistenced"], "570-open"),
                 (["nvidia-driver", "nvidia-driver-cuda", "kmod-nvidia-latest-dkms",
                   "nvidia-persistenced"], "570-dkms"))]
    return {
        "os": "rhel9",
        "kind": "spec-derived: NOT published repodata; see RHEL9.md",
        "fetched": time.strftime("%Y-%m-%d"),
        "origin": [{"repo": r, "path": p, "commit": c, "commit_date": d, "licence": lic}
                   for r, p, c, d, lic in SPECS],
        "evaluated_for": {"arch": ARCH, "macros": {k: MACROS[k] for k in
                                                   ("rhel", "dist", "_isa")},
                          "undefined": ["fedora"], "version_from": "VERSIONS (below)"},
        "versions": VERSIONS,
        "streams_rule": STREAM_RULE,
        "streams": streams,
        "cases": cases,
        "packages": pkgs,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--mirrors", type=Path, default=MIRRORS)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    try:
        data = snapshot(args.mirrors)
    except (OSError, subprocess.CalledProcessError, ValueError) as exc:
        print(f"driver_metadata_rpm: {exc}", file=sys.stderr)
        return 1
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"{args.out}: {len(data['cases'])} cases, "  # type: ignore[arg-type]
          f"{len(data['packages'])} package versions")  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    sys.exit(main())
