"""Package holds: ``apt-mark showhold`` on Debian/Ubuntu, ``dnf versionlock list`` on RHEL."""

from __future__ import annotations

import re

from pyinfra.api.facts import FactBase
from typing_extensions import override

# nvidia-driver-3:570.133.20-1.el9.*  ->  name, version (epoch dropped)
_LOCK = re.compile(r"^(?P<name>.+?)-(?:\d+:)?(?P<version>[0-9][^-]*)-(?P<release>[^-]+)$")


class HeldPackages(FactBase[dict[str, str | None]]):
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
    @staticmethod
    def default() -> dict[str, str | None]:
        return {}

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
