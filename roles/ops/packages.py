"""OS packages: the one helper every role installs packages through (``ensure_packages``), the
operations behind it, and the holds that keep a pinned set where the profile put it.

As pyinfra's ``operations/util/packaging.ensure_packages`` sits under its ``apt.packages`` and
``dnf.packages``, ``ensure_packages`` here decides for every role how a package set lands: at
the distribution's version (``os_packages``), or pinned at exactly the profile's version and
held there (``pinned_packages``), with the apt preferences file that makes apt pick that build
written first. A role never calls the operations below it directly (tests/roles/
test_control_layout.py holds that), so how a pin is written, installed and held is decided here
once. The apt/dnf branching happens inside the operations, from ``target_os()``.
"""

from __future__ import annotations

import re
from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from pyinfra.api.command import StringCommand
from pyinfra.api.operation import operation
from pyinfra.context import host
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.rpm import RpmPackages

from nodegate.facts.packages import HeldPackages
from nodegate.versions import Version, rpm_compare
from roles import driver_pins
from roles.ops.common import TargetOS, cmd, q, target_os
from roles.ops.files import put_template


def apt_lock_timeout() -> int:
    """``apt_lock_timeout_s``: seconds every apt call waits for the dpkg lock (held for a
    while by unattended-upgrades or another apt) before it fails the host; 0: not at all."""
    from roles.defaults import DEFAULTS

    value = host.data.get("apt_lock_timeout_s")
    return int(DEFAULTS["apt_lock_timeout_s"] if value is None else value)


def apt(tool: str, *args: str | Any) -> Any:
    """``apt-get``/``apt-mark`` ending ``-o DPkg::Lock::Timeout=N`` (apt >= 1.9.11 waits that
    long for the dpkg lock instead of failing at once; apt reads options after the
    arguments too); ``apt-get install`` runs noninteractive. Every apt call the roles make
    goes through here."""
    env = ["env", "DEBIAN_FRONTEND=noninteractive"] if tool == "apt-get" and args[:1] == (
        "install",) else []
    return cmd(*env, tool, *args, "-o", f"DPkg::Lock::Timeout={apt_lock_timeout()}")


@dataclass(frozen=True)
class AptPin:
    """An apt preferences pin (templates/apt/preferences.j2, priority 1001) for a pinned set:
    the names or globs it covers and the version glob apt matches, so ``apt-get install NAME``
    takes that build, even as a downgrade. ``label`` names the set in the file (the install's
    label when None)."""

    packages: Sequence[str]
    version: str
    label: str | None = None


def ensure_packages(role: str, packages: Sequence[str], version: str | None = None, *,
                    name: str | None = None, label: str | None = None,
                    apt_pin: AptPin | None = None, guard: list[str] | None = None,
                    replaces: list[str] | None = None, locked_set: list[str] | None = None,
                    own_versions: list[str] | None = None) -> Any:
    """Install ``packages`` for ``role``: the one way a role installs OS packages.

    Without ``version``: the missing ones at the distribution's version (``os_packages``),
    operation ``"<role>: <packages>"`` unless ``name`` says otherwise. With it: at exactly
    ``version`` and held (``pinned_packages``, ``label`` in its messages), operation
    ``"<role>: <packages> = <version>"``; on apt, ``apt_pin`` is written first to
    /etc/apt/preferences.d/nodegate-<role>. ``guard``, ``replaces``, ``locked_set`` and
    ``own_versions`` are ``pinned_packages``'s. Returns the install operation (its
    ``did_change`` restarts what the packages run).
    """
    wanted = list(packages)
    if version is None:
        return os_packages(name=name or f"{role}: {', '.join(wanted)}", packages=wanted)
    if apt_pin is not None and target_os().is_debian:
        put_template(name=f"{role}: apt pin",
                     dest=f"/etc/apt/preferences.d/nodegate-{role.replace('_', '-')}",
                     src="apt/preferences.j2", role=role, label=apt_pin.label or label or role,
                     version=version, packages=list(apt_pin.packages),
                     pin_version=apt_pin.version)
    return pinned_packages(name=name or f"{role}: {', '.join(wanted)} = {version}",
                           packages=wanted, version=version, label=label or role, guard=guard,
                           replaces=replaces, locked_set=locked_set, own_versions=own_versions)


def version_matches(installed: Iterable[str] | None, wanted: str) -> bool:
    """Installed at the wanted version? Upstream compared as versions (570.86.10 <
    570.133.20); a wanted Debian revision (2.26.2-1+cuda12.8) must match too."""
    want = Version(wanted)
    for text in installed or ():
        have = Version(text)
        if have == want and (not want.revision or have.revision.split(".el")[0]
                             == want.revision.split(".el")[0]):
            return True
    return False


def package_plan(os_: TargetOS, packages: list[str], version: str) -> tuple[list[str], list[str]]:
    """(packages not at ``version``, packages not held at it), from facts."""
    installed = host.get_fact(DebPackages) if os_.is_debian else host.get_fact(RpmPackages)
    held = host.get_fact(HeldPackages)
    wrong = [p for p in packages if not version_matches(installed.get(p), version)]
    unheld = []
    for p in packages:
        if p not in held or (not os_.is_debian and rpm_compare(str(held.get(p)), version) != 0):
            unheld.append(p)
    return wrong, unheld


def stale_packages(os_: TargetOS, pattern: str, wanted: list[str]) -> list[str]:
    """Installed packages whose name matches ``pattern`` (a full-match regex) but that are not
    ``wanted``: another branch's names (nvidia-fabricmanager-570 once 580 is wanted), which
    conflict with the wanted ones and are held, so apt would refuse the change."""
    if not os_.is_debian:
        return []
    installed = host.get_fact(DebPackages)
    return sorted(p for p in installed if re.fullmatch(pattern, p) and p not in wanted)


@operation()
def pinned_packages(packages: list[str], version: str, label: str,
                    guard: list[str] | None = None,
                    replaces: list[str] | None = None, *,
                    locked_set: list[str] | None = None,
                    own_versions: list[str] | None = None) -> Generator[Any, None, None]:
    """Install ``packages`` at exactly ``version`` and hold them there (apt-mark hold / dnf
    versionlock), so no routine upgrade moves them. Downgrades are allowed: the profile wins.
    ``replaces`` (apt): installed packages the new ones take over from (another branch's
    names), unheld and removed in the same transaction.

    On apt the exact build comes from the role's apt preferences pin when ``version`` has no
    Debian revision (the driver: 570.133.20-*); a full version (libnccl2) is asked for as is.
    Not pyinfra's ``apt.packages``/``dnf.packages``: they neither hold a version nor allow the
    downgrade the profile may ask for. ``guard`` (apt globs of the set the pin covers): the
    install is simulated first and the host stops, naming them, when any package of the set
    would land at another version (roles/driver_pins.py); on a version change every installed
    package of the set is named too, so none stays behind at the old build. ``locked_set``
    (dnf globs, ``driver_pins.RPM_PIN_PATTERNS``): the whole set is version-locked after the
    install (``lock_matching``), so a version change releases every lock of it first.
    ``own_versions`` (apt): names the globs match that the repository versions on their own
    line (``driver_pins.DEBIAN_OWN_VERSIONS``): the guard does not count them. The guard also
    stops the host when one of ``packages`` has no build at ``version`` at all.
    """
    os_ = target_os()
    wrong, unheld = package_plan(os_, packages, version)
    if not wrong and not unheld and not replaces:
        host.noop(f"{label} {version} installed and held")
        return
    if os_.is_debian:
        # the whole driver set is held (hold_matching): a version change must release the
        # held dependencies too, or apt keeps libnvidia-ml1 & co. at the old version and
        # refuses the new metapackages' exact-version Depends; they are held again after
        released = sorted(
            n for n in (host.get_fact(HeldPackages) or {})
            if guard and wrong and any(fnmatchcase(n, p) for p in guard))
        unhold = sorted(set(released) | set(replaces or []))
        if unhold:
            yield apt("apt-mark", "unhold", *[q(p) for p in unhold])
        # the set's packages no exact-version Depends reaches (nvidia-egl-common,
        # nvidia-legacy-check) would stay at the old build: they move with the rest
        behind = ([p for p in driver_pins.behind(host.get_fact(DebPackages) or {}, guard,
                                                 version, packages)
                   if p not in (replaces or []) and p not in (own_versions or [])]
                  if guard and wrong else [])
        if wrong or replaces:
            specs = [q(f"{p}={version}") if "-" in version else q(p) for p in wrong]
            specs += [q(p) for p in behind]
            specs += [q(f"{p}-") for p in replaces or []]
            yield apt("apt-get", "update", "-q")
            if guard:
                plain = [f"{p}={version}" if "-" in version else p for p in wrong]
                plain += behind
                plain += [f"{p}-" for p in replaces or []]
                yield StringCommand(driver_pins.guard_script(
                    plain, guard, version, required=[] if "-" in version else wrong,
                    own=own_versions or ()))
            yield apt("apt-get", "install", "-y", "-q",
                      "--allow-downgrades", "--allow-change-held-packages",
                      "-o", "Dpkg::Options::=--force-confdef",
                      "-o", "Dpkg::Options::=--force-confold", *specs)
        to_hold = sorted(set(wrong) | set(unheld))
        yield apt("apt-mark", "hold", *[q(p) for p in to_hold])
        return
    installed = host.get_fact(RpmPackages)
    held = host.get_fact(HeldPackages)
    # the whole driver set is locked (lock_matching): a version change must release the
    # locked dependencies too, or dnf's versionlock hides every other build of
    # libnvidia-ml & co. and the new nvidia-driver's "= 3:V" Requires cannot resolve;
    # they are locked again after
    set_locks = {n for n in held
                 if locked_set and wrong and any(fnmatchcase(n, p) for p in locked_set)}
    relock = sorted(set_locks | {p for p in set(wrong) | set(unheld) if p in held})
    if relock:
        yield cmd("dnf", "-q", "versionlock", "delete", *[q(p) for p in relock])
    downgrade = [p for p in wrong
                 if any(rpm_compare(v, version) > 0 for v in installed.get(p) or ())]
    install = [p for p in wrong if p not in downgrade]
    if install:
        yield cmd("dnf", "-y", "-q", "install", *[q(f"{p}-{version}") for p in install])
    if downgrade:
        yield cmd("dnf", "-y", "-q", "downgrade", *[q(f"{p}-{version}") for p in downgrade])
    yield cmd("dnf", "-q", "versionlock", "add",
              *[q(f"{p}-{version}") for p in sorted(set(wrong) | set(unheld))])


@operation()
def os_packages(packages: list[str]) -> Generator[Any, None, None]:
    """Install the (unpinned) packages that are missing; refresh the index only then, so a
    converged node costs no change."""
    os_ = target_os()
    installed = host.get_fact(DebPackages) if os_.is_debian else host.get_fact(RpmPackages)
    missing = [p for p in packages if p not in installed]
    if not missing:
        host.noop(f"installed: {', '.join(packages)}")
        return
    if os_.is_debian:
        yield apt("apt-get", "update", "-q")
        yield apt("apt-get", "install", "-y", "-q", "--no-install-recommends",
                  *[q(p) for p in missing])
    else:
        yield cmd("dnf", "-y", "-q", "install", *[q(p) for p in missing])


@operation()
def hold_matching(patterns: list[str], version: str) -> Generator[Any, None, None]:
    """Hold every installed package matching ``patterns`` at ``version`` (apt): the driver's
    whole set, not only the metapackages the role names, so no routine upgrade moves one
    library alone. The list is read on the node after the install (``driver_pins``)."""
    installed = host.get_fact(DebPackages)
    held = host.get_fact(HeldPackages)
    pin = f"{version}-*"
    at_version = [n for n, versions in installed.items()
                  if any(fnmatchcase(n, p) for p in patterns)
                  and any(fnmatchcase(v, pin) for v in versions)]
    if at_version and all(n in held for n in at_version):
        host.noop(f"{len(at_version)} package(s) at {version} held")
        return
    yield StringCommand(driver_pins.hold_script(patterns, version, apt_lock_timeout()))


@operation()
def lock_matching(patterns: list[str], version: str) -> Generator[Any, None, None]:
    """Version-lock every installed package matching ``patterns`` at ``version`` (dnf): the
    driver's whole set, as ``hold_matching`` holds it on apt, not only the packages the
    role names (tests/roles/data/driver-packages/RHEL9.md). Read on the node after the
    install (``driver_pins.lock_script``); no change when all of them are locked there."""
    installed = host.get_fact(RpmPackages)
    held = host.get_fact(HeldPackages)
    at_version = [n for n, versions in installed.items()
                  if any(fnmatchcase(n, p) for p in patterns)
                  and any(rpm_compare(str(v), version) == 0 for v in versions or ())]
    if at_version and all(held.get(n) is not None and rpm_compare(str(held.get(n)), version) == 0
                          for n in at_version):
        host.noop(f"{len(at_version)} package(s) at {version} version-locked")
        return
    yield StringCommand(driver_pins.lock_script(patterns, version))


__all__ = ["AptPin", "apt", "apt_lock_timeout", "ensure_packages", "hold_matching",
           "lock_matching", "os_packages", "package_plan", "pinned_packages",
           "stale_packages", "version_matches"]
