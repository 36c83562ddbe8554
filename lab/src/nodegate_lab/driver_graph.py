"""The lab driver packages' names and relations, derived from the recorded real Debian 12 graph.

The lab nodes are Debian 12 with the lab's mirror, so the nvidia_driver role installs
NVIDIA-repository names there: ``nvidia-driver``, ``nvidia-kernel-open-dkms`` (or
``nvidia-kernel-dkms``) and ``nvidia-persistenced``.
apt then brings the whole ``nvidia-graphics-drivers`` package set with exact-version
dependencies among it. That set is read at mirror build from the snapshot of Debian's own index
(tests/roles/data/driver-packages/debian12.json, made by scripts/driver_metadata.py): the
newest recorded build is the template, and each lab version gets the same packages with every
reference to the template's version rewritten to its own (``(= 535.309.01-0+deb12u1)`` ->
``(= 570.133.20-1)``, ``nvidia-kernel-535.309.01`` -> ``nvidia-kernel-570.133.20``, the branch
floor ``(>= 535)`` -> ``(>= 570)``). A pin or hold that misses one of them then fails in the lab
as on a real node, which an empty lab package could never show.

An alternative in a relation is kept when the lab can satisfy it: a package of the set (or a
name one of them provides, unversioned), or a Debian package the lab mirror serves at a
version that satisfies it. Every other alternative is dropped and the reason recorded
(``Graph.dropped``); a relation with no alternative left is dropped whole. Dropping them
changes nothing the pins must cover: they are outside the driver's version-locked set.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from debian.deb822 import PkgRelation
from debian.debian_support import Version

from nodegate.errors import ConfigError

SNAPSHOT = Path("tests/roles/data/driver-packages/debian12.json")  # from the checkout root
#: The driver's own source package; the snapshot also holds other sources' providers of
#: ``libnvidia-ml.so.1`` (tesla-470/535), which apt never picks while libnvidia-ml1 resolves.
SOURCE = "nvidia-graphics-drivers"
#: The component the lab models: the driver's own packages. The snapshot also records Debian's
#: contrib helpers and non-free-firmware's firmware-nvidia-gsp (what Debian's own packaging
#: installs); the lab serves NVIDIA-repository names and leaves them out, as before they were
#: recorded. Snapshots without components are non-free only.
COMPONENT = "non-free"
FIELDS = ("pre_depends", "depends", "recommends")
#: Why an alternative is dropped. The lab models Debian's non-free component only: the
#: driver's contrib helpers (nvidia-support, nvidia-modprobe, glx-alternative-nvidia...) and
#: non-free-firmware's firmware-nvidia-gsp are recorded but not modelled (``COMPONENT``).
NOT_RECORDED = ("not modelled in the lab (Debian's contrib and non-free-firmware packages are "
                "recorded, not modelled)")
NOT_SERVED = "not served by the lab mirror (no display stack, no DKMS in lab containers)"
FOREIGN_ARCH = "another architecture (the lab mirror serves amd64 only)"
VERSIONED_VIRTUAL = ("a versioned relation on a provided name (the snapshot records Provides "
                     "without versions)")
NVIDIA_NAME = re.compile(r"nvidia|^libcuda|^libnvcuvid|^libnvoptix")


@dataclass
class Stanza:
    """One lab package's control relations (the payload is added by nodegate_lab.packages)."""

    name: str
    version: str
    relations: dict[str, list[str]] = field(default_factory=dict)  # "depends" -> relations
    provides: list[str] = field(default_factory=list)


@dataclass
class Graph:
    stanzas: list[Stanza]
    dropped: dict[str, str]  # "package field: alternative" -> reason


def snapshot_path(root: Path | None) -> Path:
    """The recorded Debian 12 graph in the checkout ``root`` (the lab builds from one)."""
    if root is None or not (root / SNAPSHOT).is_file():
        raise ConfigError(f"the lab mirror derives its driver packages from {SNAPSHOT} in a "
                          "nodegate checkout; none found", key="nodegate-lab up")
    return root / SNAPSHOT


def load(path: Path) -> list[dict[str, Any]]:
    """The newest recorded build of the driver's source: the template of every lab version."""
    try:
        packages = json.loads(path.read_text())["packages"]
    except (OSError, ValueError, KeyError) as exc:
        raise ConfigError(f"{path}: not a driver package snapshot ({exc})") from None
    own = [p for p in packages if p.get("source") == SOURCE
           and p.get("component", COMPONENT) == COMPONENT]
    if not own:
        raise ConfigError(f"{path}: no {SOURCE} packages recorded in {COMPONENT}")
    newest = max(Version(p["version"]) for p in own)
    return [p for p in own if Version(p["version"]) == newest]


@dataclass(frozen=True)
class _Rewrite:
    """Template version -> lab version, in versions and in versioned virtual names."""

    full: str
    upstream: str
    branch: str
    lab: str  # the lab's upstream version: 570.133.20

    def version(self, text: str) -> str:
        return {self.full: f"{self.lab}-1", self.upstream: self.lab,
                self.branch: self.lab.split(".")[0]}.get(text, text)

    def name(self, text: str) -> str:
        return text.replace(self.upstream, self.lab)


def _satisfied(have: Iterable[str], constraint: tuple[str, str] | None) -> bool:
    """Does any of the versions ``have`` satisfy ``(op, version)``? (unversioned: any)"""
    if constraint is None:
        return True
    op, wanted = constraint
    want = Version(wanted)
    for text in have:
        cmp = (Version(text) > want) - (Version(text) < want)
        if {"=": cmp == 0, ">=": cmp >= 0, "<=": cmp <= 0, ">>": cmp > 0, "<<": cmp < 0}[op]:
            return True
    return False


def _format(name: str, constraint: tuple[str, str] | None) -> str:
    return name if constraint is None else f"{name} ({constraint[0]} {constraint[1]})"


def derive(template: list[dict[str, Any]], lab_version: str, *,
           extra: Mapping[str, list[str]], served: Mapping[str, list[str]]) -> Graph:
    """The lab packages at ``lab_version`` (``570.133.20``) with the template's relations.

    ``extra``: the lab's own packages outside the recorded set (name -> provides, already at
    the lab version); ``served``: the Debian packages the mirror serves, name -> versions
    (a name only provided maps to ``[]``, which satisfies unversioned relations only)."""
    first = Version(template[0]["version"])
    rw = _Rewrite(full=str(first), upstream=str(first.upstream_version),
                  branch=str(first.upstream_version).split(".")[0], lab=lab_version)
    lab_full = f"{lab_version}-1"
    stanzas = [Stanza(p["name"], lab_full, provides=[rw.name(v) for v in p.get("provides", [])])
               for p in template]
    real = {s.name for s in stanzas} | set(extra)
    virtual = {v for s in stanzas for v in s.provides} | {v for vs in extra.values() for v in vs}
    dropped: dict[str, str] = {}
    for package, stanza in zip(template, stanzas, strict=True):
        for key in FIELDS:
            kept_relations = []
            raw_field = package.get(key)
            for alternatives in PkgRelation.parse_relations(raw_field) if raw_field else []:
                kept = []
                for alt in alternatives:
                    name = rw.name(alt["name"])
                    raw = alt.get("version")
                    constraint = (raw[0], rw.version(raw[1])) if raw else None
                    why = _why_not(name, alt.get("archqual"), constraint, real=real,
                                   virtual=virtual, served=served, lab_full=lab_full)
                    if why is None:
                        kept.append(_format(name, constraint))
                    else:
                        qual = f":{alt['archqual']}" if alt.get("archqual") else ""
                        dropped[f"{stanza.name} {key}: {_format(name + qual, constraint)}"] = why
                if kept:
                    kept_relations.append(" | ".join(kept))
            if kept_relations:
                stanza.relations[key] = kept_relations
    return Graph(stanzas, dropped)


def _why_not(name: str, archqual: str | None, constraint: tuple[str, str] | None, *,
             real: set[str], virtual: set[str], served: Mapping[str, list[str]],
             lab_full: str) -> str | None:
    """None when the lab can satisfy the alternative, else why it is dropped."""
    if archqual not in (None, "amd64", "any"):
        return FOREIGN_ARCH
    if name in real:
        return None if _satisfied([lab_full], constraint) else NOT_RECORDED
    if name in virtual:
        return None if constraint is None else VERSIONED_VIRTUAL
    if name in served and _satisfied(served[name], constraint):
        return None
    return NOT_RECORDED if NVIDIA_NAME.search(name) else NOT_SERVED


def served_packages(index_text: str) -> dict[str, list[str]]:
    """name -> versions from a Packages index (dpkg-scanpackages output), Provides included
    (a provided name as ``[]``: it satisfies unversioned relations only)."""
    out: dict[str, list[str]] = {}
    for stanza in index_text.split("\n\n"):
        fields = dict(re.findall(r"^([A-Za-z-]+): ?(.*)$", stanza, re.MULTILINE))
        if "Package" not in fields:
            continue
        out.setdefault(fields["Package"], []).append(fields.get("Version", ""))
        for provided in fields.get("Provides", "").split(","):
            name = provided.strip().split(" ")[0]
            if name:
                out.setdefault(name, [])
    return out
