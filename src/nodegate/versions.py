"""Version comparison as versions, never as strings ("570.86.10" < "570.133.20").

Handles driver versions (570.133.20), Debian package versions (570.133.20-0ubuntu1,
2.26.2-1+cuda12.8, epochs) well enough to order and compare the upstream part, and the local
label of a Python version (``0.1.0+src.0a1b2c3d4e5f``, ``2.3.1+cpu``) as PEP 440 reads it.
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
        self.public, _, local = upstream.partition("+")
        self.local = local
        self.key = tuple(_key(upstream))
        # the key drops separators and leading zeros ("01a1" and "1a01" both read 1,a,1): two
        # local labels, such as two source digests, are two builds unless PEP 440 says equal
        self._local_key = _local_key(local)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            other = Version(other)
        return isinstance(other, Version) and (self.key, self._local_key) == (
            other.key, other._local_key)

    def __lt__(self, other: Version | str) -> bool:
        if isinstance(other, str):
            other = Version(other)
        return (self.key, self._local_key) < (other.key, other._local_key)

    def __hash__(self) -> int:
        return hash((self.key, self._local_key))

    def matches(self, pin: Version | str) -> bool:
        """Whether this installed version satisfies ``==pin`` as pip decides (PEP 440): a pin
        with a local label wants exactly that build; one without (``0.1.0``) is met by any
        local build of that release (``0.1.0+src.0a1b2c3d4e5f``), which pip leaves alone."""
        if isinstance(pin, str):
            pin = Version(pin)
        return self == pin if pin.local else Version(self.public) == Version(pin.public)

    def __repr__(self) -> str:
        return f"Version({self.text!r})"


def _key(text: str) -> list[tuple[int, int | str]]:
    out: list[tuple[int, int | str]] = []
    for part in _PART.findall(text):
        out.append((1, int(part)) if part.isdigit() else (0, part))
    return out


def _local_key(label: str) -> tuple[tuple[int, int | str], ...]:
    """PEP 440 local-label segments: digits compare as a number, others as lower-case text."""
    if not label:
        return ()
    parts = re.split(r"[._-]", label.lower())
    return tuple((1, int(p)) if p.isdigit() else (0, p) for p in parts)


def upstream_of_package(version: str) -> str:
    """``570.133.20-0ubuntu1`` -> ``570.133.20``; ``1:2.0-3`` -> ``2.0``."""
    return Version(version).upstream
