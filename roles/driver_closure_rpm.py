"""The NVIDIA driver's package closure on EL, computed from RPM relations (Requires/Provides).

The EL counterpart of roles/driver_closure.py: the nvidia_driver role names four packages
(``nvidia-driver nvidia-driver-cuda kmod-nvidia-*-dkms nvidia-persistenced``), dnf brings the
rest through Requires: ``= 3:V`` and ``= 3:V-R`` relations among most of them, and
unversioned ones that dnf satisfies with the newest build a module stream offers
(``nvidia-kmod-common`` requires plain ``nvidia-modprobe``). A versionlock that covers only
the named packages leaves those free to move, so the tests walk the graph recorded in
tests/roles/data/driver-packages/rhel9.json (NVIDIA's spec files; RHEL9.md there) and check
the lock set covers every NVIDIA package at the exact version. Metadata only: no pyinfra.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from nodegate.versions import rpm_compare

#: what dnf installs with a package by default (weak Recommends included:
#: install_weak_deps=True is dnf's default); Supplements are reverse and conditional, so
#: they are not followed.
RELATIONS = ("requires", "recommends")
OPS = ("<=", ">=", "==", "=", "<", ">")


@dataclass(frozen=True)
class Rpm:
    """One binary package build as its metadata states it."""

    name: str
    epoch: str
    version: str
    release: str
    arch: str
    relations: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    provides: tuple[str, ...] = ()  # explicit and rpmbuild's implicit ones

    @property
    def evr(self) -> str:
        return f"{self.epoch}:{self.version}-{self.release}"


def parse(relation: str) -> tuple[str, str | None, str | None]:
    """``name [op evr]`` as (name, op, evr); a rich dependency ``(a and b)`` is one name."""
    parts = relation.split()
    if len(parts) == 3 and parts[1] in OPS:
        return parts[0], parts[1], parts[2]
    return relation, None, None


def satisfies(provided: str | None, op: str | None, wanted: str | None) -> bool:
    """Does a provide at ``provided`` meet ``op wanted``? A side without a release compares
    on epoch and version (rpm's rule: ``= 3:570.133.20`` matches every release of it)."""
    if op is None or wanted is None or provided is None:
        return True
    cmp = rpm_compare(provided, wanted)
    return {"=": cmp == 0, "==": cmp == 0, ">=": cmp >= 0, "<=": cmp <= 0, ">": cmp > 0,
            "<": cmp < 0}[op]


class RpmIndex:
    """Every build of every package in one repository (or one enabled module stream)."""

    def __init__(self, rpms: Iterable[Rpm]) -> None:
        self.by_name: dict[str, list[Rpm]] = {}
        self.providers: dict[str, list[tuple[Rpm, str | None]]] = {}
        for rpm in rpms:
            self.by_name.setdefault(rpm.name, []).append(rpm)
            for text in rpm.provides:
                name, _, version = parse(text)
                self.providers.setdefault(name, []).append((rpm, version))
        for builds in self.by_name.values():
            builds.sort(key=_Key, reverse=True)

    def providers_of(self, relation: str) -> list[Rpm]:
        """Every build that satisfies ``relation`` through one of its provides."""
        name, op, wanted = parse(relation)
        return [rpm for rpm, version in self.providers.get(name, [])
                if satisfies(version, op, wanted)]

    def at_version(self, name: str, version: str) -> Rpm | None:
        """``dnf install NAME-VERSION``: the newest release of that version, or None."""
        for rpm in self.by_name.get(name, []):
            if rpm_compare(rpm.evr, f"{rpm.epoch}:{version}") == 0:
                return rpm
        return None


class _Key:
    """Sort key in rpm's EVR order."""

    def __init__(self, rpm: Rpm) -> None:
        self.evr = rpm.evr

    def __lt__(self, other: _Key) -> bool:
        return rpm_compare(self.evr, other.evr) < 0


def closure(index: RpmIndex, roots: Iterable[str], version: str) -> dict[str, Rpm]:
    """Every package ``dnf install ROOT-VERSION...`` installs from this index, one build per
    name, as a solver finds it: each Requires/Recommends narrows the builds allowed for the
    name that satisfies it (a chosen package when one does, else the newest provider), and
    the newest allowed build is taken. ``>= 3:V`` alone lets the newest build in; beside an
    ``= 3:V-R`` from another package only V is left. A relation no package in the index
    provides is the distribution's (dkms, systemd...) and ends the walk. Constraints only
    narrow, which is exact for this graph: a build replaced by the narrowing has the same
    relations at its own version. Unresolvable sets raise ValueError (dnf would fail)."""
    chosen: dict[str, Rpm] = {}
    for root in roots:
        rpm = index.at_version(root, version)
        if rpm is None:
            raise KeyError(f"{root}-{version} is not in the index")
        chosen[root] = rpm
    allowed: dict[str, set[str]] = {name: {rpm.evr} for name, rpm in chosen.items()}
    changed = True
    while changed:
        changed = False
        for rpm in list(chosen.values()):
            for kind in RELATIONS:
                for relation in rpm.relations.get(kind, ()):
                    changed |= _apply(index, chosen, allowed, relation)
    return chosen


def _apply(index: RpmIndex, chosen: dict[str, Rpm], allowed: dict[str, set[str]],
           relation: str) -> bool:
    """Narrow and (re)choose for one relation; True when anything changed."""
    builds = index.providers_of(relation)
    if not builds:
        return False
    names = sorted({b.name for b in builds})
    target = next((n for n in names if n in chosen), None)
    if target is None:  # a new package: its own name first, as dnf prefers it
        target = parse(relation)[0] if parse(relation)[0] in names else names[0]
    ok = {b.evr for b in builds if b.name == target}
    narrowed = ok if target not in allowed else allowed[target] & ok
    if not narrowed:
        raise ValueError(f"{relation}: no build of {target} satisfies every relation on it")
    changed = narrowed != allowed.get(target)
    allowed[target] = narrowed
    if target not in chosen or chosen[target].evr not in narrowed:
        chosen[target] = next(b for b in index.by_name[target] if b.evr in narrowed)
        changed = True
    return changed


def nvidia(found: Mapping[str, Rpm], patterns: Iterable[str]) -> dict[str, Rpm]:
    """The packages of the closure that belong to NVIDIA's driver set (by name globs)."""
    pats = list(patterns)
    return {n: r for n, r in found.items() if any(fnmatchcase(n, p) for p in pats)}


def off_version(found: Mapping[str, Rpm], version: str) -> list[str]:
    """``name-E:V-R`` of every package of the set at another version than ``version``:
    what a lock of the set at ``version`` cannot hold, because dnf installed another."""
    return sorted(f"{r.name}-{r.evr}" for r in found.values()
                  if rpm_compare(r.evr, f"{r.epoch}:{version}") != 0)


def unlocked(found: Mapping[str, Rpm], locks: Mapping[str, str | None],
             version: str) -> list[str]:
    """Names of the set no lock in ``locks`` (name -> locked upstream version, as
    nodegate.facts.packages.HeldPackages reads ``dnf versionlock list``) holds at
    ``version``."""
    return sorted(n for n in found
                  if locks.get(n) is None or rpm_compare(str(locks[n]), version) != 0)
