"""Numbers from operators, checked at the edge: finite and inside a stated range.

``float("nan")``, ``float("inf")`` and ``1e9`` all parse; a timeout of NaN never expires and a
retry count of 100000 never ends, so every numeric option and URL parameter goes through here
and the error states the accepted range.

Python's ``int()`` and ``float()`` also take any Unicode digit (``int("١٢")`` is 12, so an
option or a capture field written in Arabic-Indic digits was read as a number nobody typed)
and raise a bare ValueError past 4,300 digits; a 5,000-digit float is ``inf``. So every number
parsed from text (options, URL parameters, capture fields, sysfs and proc files, config
values) goes through ``ascii_int``/``ascii_float``: ASCII only, at most ``MAX_NUMBER_CHARS``
characters, floats finite.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from nodegate.errors import ConfigError

#: Characters in one number parsed from text: a counter, a threshold or a timeout needs a few
#: dozen; Python's own limit (4,300 digits) ends in an error no caller expects.
MAX_NUMBER_CHARS = 64


def _checked_text(text: str, *, max_chars: int) -> str:
    if not isinstance(text, str):
        raise ValueError(f"not text: {type(text).__name__}")
    if len(text) > max_chars:
        raise ValueError(f"a number of {len(text)} characters (at most {max_chars})")
    if not text.isascii():
        raise ValueError(f"{text!r} is not written in ASCII digits")
    return text


def ascii_int(text: str, *, base: int = 10, max_chars: int = MAX_NUMBER_CHARS) -> int:
    """``int(text, base)`` for ASCII text of at most ``max_chars`` characters; ValueError
    (with a short reason) otherwise."""
    return int(_checked_text(text, max_chars=max_chars), base)


def digits(text: str, *, max_chars: int = MAX_NUMBER_CHARS) -> int | None:
    """The number ASCII decimal digits spell (``"42"``), or None for anything else (a sign,
    a space, ``"²"`` or ``"١٢"``, which ``str.isdigit`` accepts, or too many characters)."""
    if 0 < len(text) <= max_chars and text.isascii() and text.isdigit():
        return int(text)
    return None


def ascii_float(text: str, *, max_chars: int = MAX_NUMBER_CHARS) -> float:
    """``float(text)`` for ASCII text of at most ``max_chars`` characters and a finite value;
    ValueError otherwise (``nan``, ``inf`` and an overflow to infinity included)."""
    value = float(_checked_text(text, max_chars=max_chars))
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is not a finite number")
    return value


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
    noun = "an integer" if kind is int else "a number"
    try:
        _checked_text(text, max_chars=MAX_NUMBER_CHARS)
    except ValueError as exc:
        raise ConfigError(f"{exc}; not {noun} in {_describe(low, high, low_open)}",
                          key=key, file=file) from None
    try:
        value = kind(text)
    except (TypeError, ValueError):
        raise ConfigError(f"{text!r} is not {noun} in {_describe(low, high, low_open)}",
                          key=key, file=file) from None
    problem = check_range(value, low=low, high=high, low_open=low_open)
    if problem is not None:
        raise ConfigError(f"{text!r} {problem}", key=key, file=file)
    return value


def config_number(value: object, kind: type[float] | type[int], *, low: float, high: float,
                  low_open: bool = False, key: str, file: str | None = None) -> float:
    """A number from a config file (YAML/JSON: already a number, or text) as ``kind`` within
    the range, or a ConfigError naming ``key``: never a bare ValueError or TypeError (null,
    a list, ``true``, ``''``, NaN, non-ASCII digits)."""
    noun = "an integer" if kind is int else "a number"
    if isinstance(value, str):
        return parse_number(value, kind, low=low, high=high, low_open=low_open, key=key,
                            file=file)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            (kind is int and isinstance(value, float) and not value.is_integer()):
        raise ConfigError(f"{str(value)[:40]!r} is not {noun} in "
                          f"{_describe(low, high, low_open)}", key=key, file=file)
    problem = check_range(float(value), low=low, high=high, low_open=low_open)
    if problem is not None:
        raise ConfigError(f"{str(value)[:40]!r} {problem}", key=key, file=file)
    return kind(value)


def config_flag(value: object, *, key: str, file: str | None = None) -> bool:
    """A yes/no from a config file: only a real boolean. ``bool("no")`` is True, so a flag
    written as text must never be read through ``bool()``: for an opt-out of a safety
    (``insecure``) that reads a refusal as a consent."""
    if not isinstance(value, bool):
        raise ConfigError(f"{str(value)[:40]!r} is not true or false", key=key, file=file)
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
