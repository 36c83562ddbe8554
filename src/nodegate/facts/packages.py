"""Package holds: ``apt-mark showhold`` on Debian/Ubuntu, ``dnf versionlock list`` on RHEL."""

from __future__ import annotations

import re

from pyinfra.facts.apt import AptSources
from typing_extensions import override

from nodegate.facts.base import DictFact, key_values

# nvidia-driver-3:570.133.20-1.el9.*  ->  name, version (epoch dropped)
_LOCK = re.compile(r"^(?P<name>.+?)-(?:\d+:)?(?P<version>[0-9][^-]*)-(?P<release>[^-]+)$")


class HeldPackages(DictFact[str, str | None]):
    """Held (apt) or version-locked (dnf) packages: name -> locked upstream version or None.

    apt holds carry no version (the installed one is held); a dnf lock names its version.
    """

    @override
    def command(self) -> str:
        return (
            "if command -v apt-mark >/dev/null 2>&1; then apt-mark showhold; "
            "elif command -v dnf >/dev/null 2>&1; then dnf -q versionlock list 2>/dev/null; fi"
        )

    @override
    def process(self, output: list[str]) -> dict[str, str | None]:
        held: dict[str, str | None] = {}
        for raw in output:
            line = raw.strip()
            if not line or line.startswith(("Last metadata", "Updating", "Repository")):
                continue
            line = line.removesuffix(".*")
            match = _LOCK.match(line)
            if match and "." in match.group("version"):
                held[match.group("name")] = match.group("version")
            elif " " not in line:
                held[line] = None
        return held


class VenvDistributions(DictFact[str, list[str]]):
    """Distributions in a virtual environment: normalised name -> [version].

    pyinfra's ``pip.PipPackages`` parses ``pip freeze`` with a pattern that drops versions with
    a local label (``torch==2.13.0+cpu``), so such a package looks absent and is reinstalled on
    every run; ``pip list --format=json`` gives every name and version as pip has them.
    """

    @override
    def requires_command(self, pip: str) -> str:
        return pip

    @override
    def command(self, pip: str) -> str:
        from shlex import quote

        return f"{quote(pip)} list --format=json --disable-pip-version-check 2>/dev/null"

    @override
    def process(self, output: list[str]) -> dict[str, list[str]]:
        import json

        try:
            rows = json.loads("\n".join(output) or "[]")
        except ValueError:
            return {}
        out: dict[str, list[str]] = {}
        for row in rows if isinstance(rows, list) else []:
            if isinstance(row, dict) and "name" in row and "version" in row:
                name = re.sub(r"[-_.]+", "-", str(row["name"])).lower()
                out.setdefault(name, []).append(str(row["version"]))
        return out


class DnfModuleState(DictFact[str, str]):
    """A DNF module's recorded state on EL8/9: ``/etc/dnf/modules.d/<module>.module``, the
    INI file dnf writes on ``module enable/reset`` (``stream=570-open``, ``state=enabled``).
    Empty when the module was never touched (or on a host without dnf modularity)."""

    @override
    def command(self, module: str) -> str:
        return f"cat /etc/dnf/modules.d/{module}.module 2>/dev/null || true"

    @override
    def process(self, output: list[str]) -> dict[str, str]:
        return key_values(output, "=", keys=("name", "stream", "profiles", "state"))


class AptSuiteComponents(DictFact[str, list[str]]):
    """suite -> the components the node's apt sources enable for binary packages (``deb``),
    read from every sources file but ``exclude`` (a role's own file, so what the role adds is
    computed from the rest and does not flap). One-line and deb822 files are parsed by
    pyinfra's ``AptSources``."""

    @override
    def requires_command(self, exclude: str) -> str:
        return "apt"

    @override
    def command(self, exclude: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9/._-]+", exclude):
            raise ValueError(f"not a plain path: {exclude!r}")
        return ("sh -c 'for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list "
                "/etc/apt/sources.list.d/*.sources; do [ -e \"$f\" ] || continue; "
                f"[ \"$f\" = {exclude} ] && continue; echo \"##PYINFRA_FILE $f\"; cat \"$f\"; "
                "echo; done'")

    @override
    def process(self, output: list[str]) -> dict[str, list[str]]:
        found: dict[str, set[str]] = {}
        for repo in AptSources().process(output):  # type: ignore[no-untyped-call]
            if repo.get("type") == "deb":
                found.setdefault(str(repo.get("distribution")), set()).update(
                    str(c) for c in repo.get("components") or ())
        return {suite: sorted(components) for suite, components in found.items()}
