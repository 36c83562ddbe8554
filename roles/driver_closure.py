"""The NVIDIA driver's package closure, computed from a repository's own metadata.

The nvidia_driver role installs a few metapackages; apt brings in dozens more with exact-version
dependencies among them (Debian 12: ``libcuda1``, ``firmware-nvidia-gsp``, ``libnvcuvid1``,
``libegl-nvidia0``, plain ``xserver-xorg-video-nvidia``...). A pin or hold that misses one of
them lets a routine upgrade move it alone, and the driver's libraries and module then disagree.
This module walks Depends, Pre-Depends and Recommends (apt installs recommends by default)
through a Packages index, so the tests can prove the role's pin patterns cover every package a
real repository would install (tests/roles/data/driver-packages/, snapshots of the real
indexes with their origin). It reads metadata only: no pyinfra, no network.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from debian.deb822 import PkgRelation
from debian.debian_support import Version

RELATIONS = ("pre_depends", "depends", "recommends")


@dataclass(frozen=True)
class Entry:
    """One binary package version as a Packages index states it."""

    name: str
    version: str
    source: str
    relations: Mapping[str, str] = field(default_factory=dict)  # "depends" -> raw field
    provides: tuple[str, ...] = ()


def _satisfies(version: str, constraint: tuple[str, str] | None) -> bool:
    if constraint is None:
        return True
    op, wanted = constraint
    have, want = Version(version), Version(wanted)
    cmp = (have > want) - (have < want)
    return {"=": cmp == 0, ">=": cmp >= 0, "<=": cmp <= 0, ">>": cmp > 0,
            "<<": cmp < 0}[op]


class Index:
    """Every version of every package in one repository's index (the newest wins a choice)."""

    def __init__(self, entries: Iterable[Entry]) -> None:
        self.by_name: dict[str, list[Entry]] = {}
        self.providers: dict[str, list[Entry]] = {}
        for entry in entries:
            self.by_name.setdefault(entry.name, []).append(entry)
            for virtual in entry.provides:
                self.providers.setdefault(virtual, []).append(entry)
        for versions in self.by_name.values():
            versions.sort(key=lambda e: Version(e.version), reverse=True)

    def candidates(self, name: str, constraint: tuple[str, str] | None,
                   pinned: str | None = None) -> list[Entry]:
        """Real packages first (the pinned version when one satisfies, as a priority-1001 pin
        makes apt take it, else the newest that satisfies), else every provider of a virtual
        name, each at the pinned version where it has one, else its newest: pinning all of
        them is the safe reading of an alternative."""
        real = [e for e in self.by_name.get(name, []) if _satisfies(e.version, constraint)]
        if real:
            at_pin = [e for e in real if pinned and fnmatchcase(e.version, pinned)]
            return (at_pin or real)[:1]
        providers = self.providers.get(name, [])
        at_pin = [e for e in providers if pinned and fnmatchcase(e.version, pinned)]
        newest: dict[str, Entry] = {}  # one version per provider: the pinned, else the newest
        for e in sorted(at_pin or providers, key=lambda e: Version(e.version)):
            newest[e.name] = e
        return list(newest.values())

    def pick(self, name: str, pinned: str | None) -> Entry | None:
        """The version apt would take under a pin ``pinned`` (``570.133.20-*``), or newest."""
        versions = self.by_name.get(name, [])
        if pinned:
            matching = [e for e in versions if fnmatchcase(e.version, pinned)]
            if matching:
                return matching[0]
        return versions[0] if versions else None


def closure(index: Index, roots: Iterable[str], pinned: str | None = None) -> dict[str, Entry]:
    """Every package apt would install from this index for ``roots`` (with recommends),
    every alternative of an ``a | b`` included; names outside the index are the
    distribution's own (libc6...) and end the walk."""
    found: dict[str, Entry] = {}
    todo = [e for e in (index.pick(r, pinned) for r in roots) if e is not None]
    while todo:
        entry = todo.pop()
        if entry.name in found:
            continue
        found[entry.name] = entry
        for rel in RELATIONS:
            raw = entry.relations.get(rel)
            if not raw:
                continue
            for alternatives in PkgRelation.parse_relations(raw):
                for alt in alternatives:
                    version = alt.get("version")
                    for dep in index.candidates(alt["name"], version, pinned):
                        if dep.name not in found:
                            todo.append(dep)
    return found


def uncovered(names: Iterable[str], patterns: Iterable[str]) -> list[str]:
    """Names no apt preferences glob in ``patterns`` matches (apt matches ``Package:``
    globs case-sensitively, like fnmatchcase)."""
    pats = list(patterns)
    return sorted(n for n in names if not any(fnmatchcase(n, p) for p in pats))


def off_pin(found: Mapping[str, Entry], pinned: str, patterns: Iterable[str]) -> list[str]:
    """Driver packages (matched by the pin ``patterns``) the closure would install at a
    version outside the pin: a transitional package to another branch, or a mixed install.
    Ubuntu's 535 and 570 metapackages became transitional to 580 in late 2025: installing
    ``nvidia-driver-570-server=570.211.01-*`` brings 580.x (tests/roles/data/driver-packages)."""
    pats = list(patterns)
    return sorted(f"{e.name}={e.version}" for e in found.values()
                  if any(fnmatchcase(e.name, p) for p in pats)
                  and not fnmatchcase(e.version, pinned))
