"""Numbers from operators, checked at the edge: finite and inside a stated range.

``float("nan")``, ``float("inf")`` and ``1e9`` all parse; a timeout of NaN never expires and a
retry count of 100000 never ends, so every numeric option and URL parameter goes through here
and the error states the accepted range.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from nodegate.errors import ConfigError


def _describe(low: float, high: float, low_open: bool) -> str:
    return f"{'(' if low_open else '['}{low:g}, {high:g}]"


def check_range(value: float, *, low: float, high: float, low_open: bool = False) -> str | None:
    """Why ``value`` is refused, or None when it is finite and within the range."""
    if not math.isfinite(value):
        return f"must be a finite number in {_describe(low, high, low_open)}"
    if value < low or value > high or (low_open and value == low):
        return f"must be within {_describe(low, high, low_open)}"
    return None


def parse_number(text: str, kind: type[float] | type[int], *, low: float, high: float,
                 low_open: bool = False, key: str, file: str | None = None) -> float:
    """``text`` as ``kind`` within the range, or a ConfigError naming ``key`` and the range."""
    try:
        value = kind(text)
    except (TypeError, ValueError):
        noun = "an integer" if kind is int else "a number"
        raise ConfigError(f"{text!r} is not {noun} in {_describe(low, high, low_open)}",
                          key=key, file=file) from None
    problem = check_range(value, low=low, high=high, low_open=low_open)
    if problem is not None:
        raise ConfigError(f"{text!r} {problem}", key=key, file=file)
    return value


def arg_number(kind: type[float] | type[int], low: float, high: float, *,
               low_open: bool = False) -> Callable[[str], float]:
    """An argparse ``type=``: argparse then names the option and exits 2 on a bad value."""

    def convert(text: str) -> float:
        try:
            return parse_number(text, kind, low=low, high=high, low_open=low_open, key="")
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(exc.message) from None

    convert.__name__ = kind.__name__  # argparse's "invalid <name> value" wording
    return convert
