"""The one JSON Schema check every input goes through: profiles, site files, simulator
scenarios and node reports.

One rule for which error an operator is told about when there are several: the shallowest
(fix the outer structure first), and among those jsonschema's own ``best_match``. One rule for
where it is: the offending key itself, not its parent (an unknown key, a missing required
key). The caller words the message and formats the path for its kind of file.

jsonschema is imported on first use: ``nodegate health`` reaches modules that import this one
and must start fast.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator, ValidationError


@dataclass(frozen=True)
class Problem:
    """The error to report: where (``path``, the offending key last), what (``message``,
    jsonschema's), which keyword failed, how many errors there were, and the error itself for
    callers that word a keyword their own way."""

    path: list[str | int]
    message: str
    validator: str
    unknown_key: str | None
    count: int
    error: ValidationError


def first_problem(schema: Mapping[str, Any], data: Any) -> Problem | None:
    """The one error of ``data`` against ``schema`` to tell the operator about, or None."""
    errors = list(_validator(_Frozen(schema)).iter_errors(data))
    if not errors:
        return None
    from jsonschema.exceptions import best_match

    depth = min(len(e.absolute_path) for e in errors)
    shallow = [e for e in errors if len(e.absolute_path) == depth]
    error = best_match(shallow) or shallow[0]
    path: list[str | int] = list(error.absolute_path)
    unknown = _unknown_key(error)
    if unknown is not None:
        path.append(unknown)
    else:
        missing = _missing_key(error)
        if missing is not None:
            path.append(missing)
    return Problem(path=path, message=str(error.message), validator=str(error.validator),
                   unknown_key=unknown, count=len(errors), error=error)


def _unknown_key(error: ValidationError) -> str | None:
    if error.validator != "additionalProperties" or not isinstance(error.instance, Mapping) \
            or not isinstance(error.schema, Mapping):
        return None
    known = set(error.schema.get("properties", {}))
    extra = sorted(str(key) for key in error.instance if key not in known)
    return extra[0] if extra else None


def _missing_key(error: ValidationError) -> str | None:
    if error.validator != "required" or not isinstance(error.instance, Mapping) \
            or not isinstance(error.validator_value, list):
        return None
    missing = [str(key) for key in error.validator_value if key not in error.instance]
    return missing[0] if missing else None


class _Frozen:
    """A schema as a cache key: by identity (schemas are module-level constants)."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self.schema = schema

    def __hash__(self) -> int:
        return id(self.schema)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Frozen) and other.schema is self.schema


@lru_cache(maxsize=16)
def _validator(key: _Frozen) -> Draft202012Validator:
    from jsonschema import Draft202012Validator

    return Draft202012Validator(key.schema)


#: The message for ``non_finite_path``'s find, the same in every kind of file.
NON_FINITE = ("not a finite number (NaN and infinities are refused: a bound of .inf disables "
              "a check, .nan fails every comparison)")


def non_finite_path(node: Any, path: tuple[str | int, ...] = ()) -> tuple[str | int, ...] | None:
    """The path of the first NaN or infinity in ``node``: YAML's ``.nan``/``.inf`` and JSON's
    ``NaN``/``Infinity`` are numbers to JSON Schema, yet ``max: .inf`` disables a check and
    ``.nan`` fails every comparison, so neither may reach a judge (profiles) or a gate's
    argument (a site's ``slurm.drain_budget``)."""
    if isinstance(node, float) and not math.isfinite(node):
        return path
    items: Iterable[tuple[str | int, Any]] = ()
    if isinstance(node, Mapping):
        items = ((str(k), v) for k, v in node.items())
    elif isinstance(node, list):
        items = enumerate(node)
    for key, value in items:
        found = non_finite_path(value, (*path, key))
        if found is not None:
            return found
    return None
