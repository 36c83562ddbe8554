"""The report's indented JSON writer is ``json.dumps`` byte for byte, errors included."""

from __future__ import annotations

import enum
import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from nodegate.report._jsontext import dumps_indented
from tests.report.test_report_golden import _value


def _stdlib(value: Any, indent: int = 2) -> str:
    return json.dumps(value, indent=indent, allow_nan=False, ensure_ascii=False)


def _finite(value: Any) -> Any:
    """``value`` with NaN and infinities as None (json.dumps refuses them here)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value


@pytest.mark.parametrize("seed", range(60))
def test_random_values_match_json_dumps(seed: int) -> None:
    rng = random.Random(seed)
    value = _finite({"results": [_value(rng) for _ in range(rng.randrange(8))],
                     "nested": [[_value(rng)], {"k": _value(rng)}, (), {}, []]})
    for indent in (0, 1, 2, 4):
        assert dumps_indented(value, indent) == _stdlib(value, indent)


class _Level(str, enum.Enum):
    QUICK = "quick"


class _Count(enum.IntEnum):
    TWO = 2


class _Dict(dict):  # type: ignore[type-arg]
    pass


class _List(list):  # type: ignore[type-arg]
    pass


def test_subclasses_and_keys_json_turns_into_strings() -> None:
    value = {"level": _Level.QUICK, "count": _Count.TWO, "sub": _Dict(a=_List([1, (2, 3)])),
             3: "int key", 2.5: "float key", True: "bool key", None: "none key",
             "float": 1e-7, "big": 10**30, "neg0": -0.0, "text": 'é "q" \\ \n \x00 \u2028'}
    assert dumps_indented(value, 2) == _stdlib(value)


@pytest.mark.parametrize("value", [
    {"nan": math.nan}, [math.inf], {"set": {1, 2}}, {"path": Path("/x")}, {(1, 2): "tuple key"},
    {"deep": [-math.inf]}, {math.nan: 1},
])
def test_what_json_refuses_it_refuses_with_the_same_error(value: Any) -> None:
    with pytest.raises((TypeError, ValueError)) as expected:
        _stdlib(value)
    with pytest.raises(type(expected.value), match=None) as got:
        dumps_indented(value, 2)
    assert str(got.value) == str(expected.value)


def test_a_cycle_is_refused_as_json_refuses_it() -> None:
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="Circular reference detected"):
        dumps_indented({"a": cycle}, 2)
