"""``json.dumps(value, indent=N, allow_nan=False, ensure_ascii=False)``, byte for byte, faster.

With an indent the standard library serializes in pure Python through nested generators (its
C encoder only writes compact JSON); a node report is ~800 results, so that was ~35 ms of
every cron health check. This writer recurses over the plain JSON types and appends to one
list. Anything else (another type, a key JSON cannot hold, a cycle) is handed to
``json.dumps`` itself, so errors and their messages stay the standard library's.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from json.encoder import encode_basestring
from typing import Any

_encode_str: Callable[[str], str] = encode_basestring

#: Exact types written as one token (subclasses go through ``_other``).
_SCALARS = frozenset({str, int, float, bool, type(None)})


class _Unsupported(Exception):
    """A value or key this writer leaves to ``json.dumps``."""


def dumps_indented(value: Any, indent: int) -> str:
    """Exactly ``json.dumps(value, indent=indent, allow_nan=False, ensure_ascii=False)``."""
    out: list[str] = []
    try:
        _write(value, "\n", " " * indent, out.append)
    except (_Unsupported, RecursionError):
        return json.dumps(value, indent=indent, allow_nan=False, ensure_ascii=False)
    return "".join(out)


def _write(value: Any, newline: str, step: str, emit: Callable[[str], object]) -> None:
    """``newline`` is a line break plus the indent of the level ``value`` sits at."""
    kind = type(value)
    if kind is dict:
        _write_dict(value, newline, step, emit)
    elif kind is list or kind is tuple:
        _write_list(value, newline, step, emit)
    else:
        emit(_scalar(value) if kind in _SCALARS else _other(value, newline, step, emit))


def _other(value: Any, newline: str, step: str, emit: Callable[[str], object]) -> str:
    """Subclasses, in ``json.dumps``'s order of tests; returns what is left to emit."""
    if isinstance(value, (str, int, float)) or value is None:
        return _scalar(value)
    if isinstance(value, (list, tuple)):
        _write_list(value, newline, step, emit)
    elif isinstance(value, dict):
        _write_dict(value, newline, step, emit)
    else:
        raise _Unsupported
    return ""


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        return _encode_str(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return int.__repr__(value)
    return _float(value)


def _write_list(value: list[Any] | tuple[Any, ...], newline: str, step: str,
                emit: Callable[[str], object]) -> None:
    if not value:
        emit("[]")
        return
    inner = newline + step
    lead = "[" + inner
    for item in value:
        kind = type(item)
        if kind in _SCALARS:
            emit(lead + _scalar(item))
        else:
            emit(lead)
            _write(item, inner, step, emit)
        lead = "," + inner
    emit(newline + "]")


def _write_dict(value: dict[Any, Any], newline: str, step: str,
                emit: Callable[[str], object]) -> None:
    if not value:
        emit("{}")
        return
    inner = newline + step
    lead = "{" + inner
    for key, item in value.items():
        name = _encode_str(key if type(key) is str else _key(key))
        kind = type(item)
        if kind is str:
            emit(f"{lead}{name}: {_encode_str(item)}")
        elif kind in _SCALARS:
            emit(f"{lead}{name}: {_scalar(item)}")
        else:
            emit(f"{lead}{name}: ")
            _write(item, inner, step, emit)
        lead = "," + inner
    emit(newline + "}")


def _key(key: Any) -> str:
    """A non-string key as ``json.dumps`` turns it into one: a number, bool or None spelled as
    that value is (``_scalar``), anything else left to ``json.dumps``."""
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, (int, float)):
        return _scalar(key)
    raise _Unsupported


def _float(value: float) -> str:
    if not math.isfinite(value):
        raise _Unsupported  # json.dumps raises its own ValueError (allow_nan=False)
    return float.__repr__(value)


def dumps_rows(value: dict[str, Any], indent: int) -> str:
    """``value`` (a JSON object) laid out one row a line: its members indented by ``indent``,
    each element of a member that is a list on a line of its own (a report's results, one a
    line), everything below that compact as ``json.dumps`` writes it (``", "``, ``": "``).

    The same JSON as ``dumps_indented`` at about half the cost: the rows go through the
    standard library's C encoder, which writes no indentation. Framed as ``dumps_indented``
    frames an object (``"{\\n" + indent`` ... ``"\\n}"``), so a caller that splices members
    by that framing works with either. Errors are ``json.dumps``'s own (with an indent).
    """
    if type(value) is not dict or not value:
        return dumps_indented(value, indent)
    try:
        return _rows(value, " " * indent, _row_encoder())
    except (RecursionError, TypeError, ValueError):  # raised again, worded as json.dumps does
        return dumps_indented(value, indent)


def _rows(value: dict[str, Any], step: str, row: Callable[[Any], str]) -> str:
    members = []
    for key, item in value.items():
        if type(key) is not str:
            return dumps_indented(value, len(step))  # a key JSON spells its own way
        if type(item) is list and item:
            inner = ",\n" + step * 2
            text = "[\n" + step * 2 + inner.join([row(element) for element in item]) + \
                "\n" + step + "]"
        else:
            text = row(item)
        members.append(f"{step}{_encode_str(key)}: {text}")
    return "{\n" + ",\n".join(members) + "\n}"


def _row_encoder() -> Callable[[Any], str]:
    """``json.dumps(value, allow_nan=False, ensure_ascii=False)`` without building an encoder
    per row: the C encoder the standard library builds for compact JSON, made once (no cycle
    check: a cycle ends in RecursionError; ``dumps_rows`` hands any error to the indented
    writer, so what is raised is what ``json.dumps`` with an indent raises)."""
    encoder = json.JSONEncoder(ensure_ascii=False, allow_nan=False)
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return encoder.encode
    chunks = make(None, encoder.default, _encode_str, None, ": ", ", ", False, False, False)

    def encode(item: Any) -> str:
        kind = type(item)
        if kind is dict or kind is list:
            return "".join(chunks(item, 0))
        return encoder.encode(item)

    return encode
