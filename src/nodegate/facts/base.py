"""What the nodegate facts share: an empty default for a fact that maps or lists what it
found, and the parser of "key value" lines that several facts' commands print."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import TypeVar

from pyinfra.api.facts import FactBase
from typing_extensions import override

K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")


class DictFact(FactBase[dict[K, V]]):
    """A fact that maps what it found; ``{}`` when its command cannot run (the binary named by
    ``requires_command`` is absent), so a role reads "nothing there", never None."""

    @override
    @staticmethod
    def default() -> dict[K, V]:
        return {}


class ListFact(FactBase[list[T]]):
    """A fact that lists what it found; ``[]`` when its command cannot run."""

    @override
    @staticmethod
    def default() -> list[T]:
        return []


def key_values(output: Iterable[str], sep: str = " ", *, keys: Collection[str] | None = None,
               last: bool = False) -> dict[str, str]:
    """One ``key<sep>value`` a line -> {key: value (stripped)}, split at the first ``sep`` (at
    the last with ``last``, for keys that may hold it). A line without a key or without
    ``sep`` is passed over, and with ``keys`` a line whose key is not one of them."""
    out: dict[str, str] = {}
    for line in output:
        text = line.strip()
        key, found, value = text.rpartition(sep) if last else text.partition(sep)
        if key and found and (keys is None or key in keys):
            out[key] = value.strip()
    return out
