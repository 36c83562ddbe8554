"""Version comparison as versions, never as strings ("570.86.10" < "570.133.20").

Handles driver versions (570.133.20), Debian package versions (570.133.20-0ubuntu1,
2.26.2-1+cuda12.8, epochs) well enough to order and compare the upstream part.
"""

from __future__ import annotations

import re
from functools import total_ordering

_PART = re.compile(r"\d+|[A-Za-z]+")


@total_ordering
class Version:
    def __init__(self, text: str) -> None:
        self.text = str(text).strip()
        body = self.text.split(":", 1)[1] if ":" in self.text.split("-")[0] else self.text
        upstream, _, revision = body.partition("-")
        self.upstream = upstream
        self.revision = revision
        self.key = tuple(_key(upstream))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            other = Version(other)
        return isinstance(other, Version) and self.key == other.key

    def __lt__(self, other: Version | str) -> bool:
        if isinstance(other, str):
            other = Version(other)
        return self.key < other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return f"Version({self.text!r})"


def _key(text: str) -> list[tuple[int, int | str]]:
    out: list[tuple[int, int | str]] = []
    for part in _PART.findall(text):
        out.append((1, int(part)) if part.isdigit() else (0, part))
    return out


def upstream_of_package(version: str) -> str:
    """``570.133.20-0ubuntu1`` -> ``570.133.20``; ``1:2.0-3`` -> ``2.0``."""
    return Version(version).upstream
