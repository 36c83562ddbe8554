"""The report's indented JSON writer is ``json.dumps`` byte for byte, errors included; the
row layout the report set is written in is the same JSON, one row a line."""

from __future__ import annotations

import enum
import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from nodegate.report._jsontext import dumps_indented, dumps_rows
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


def _rows_match(value: dict[Any, Any], indent: int = 2) -> str:
    """``dumps_rows(value)``: the JSON ``json.dumps`` writes (same value back), framed as
    ``dumps_indented`` frames an object, each element of a top-level list one line."""
    text = dumps_rows(value, indent)
    assert json.loads(text) == json.loads(_stdlib(value, indent))
    if value:
        assert text.startswith("{\n" + " " * indent + '"') and text.endswith("\n}")
    for key, item in value.items():
        if isinstance(item, list) and item and isinstance(key, str):
            rows = [json.dumps(element, allow_nan=False, ensure_ascii=False)
                    for element in item]
            pad = " " * 2 * indent
            assert f"{json.dumps(key, ensure_ascii=False)}: [\n{pad}" \
                   f"{(',' + chr(10) + pad).join(rows)}\n{' ' * indent}]" in text
    return text


@pytest.mark.parametrize("seed", range(30))
def test_rows_are_the_same_json_one_row_a_line(seed: int) -> None:
    rng = random.Random(seed)
    value = _finite({"head": _value(rng), "results": [_value(rng) for _ in range(rng.randrange(8))],
                     "empty": [], "obj": {"k": [_value(rng)]}, "s": "é \u2028"})
    for indent in (1, 2, 4):
        text = _rows_match(value, indent)
        # compact JSON holds no line break of its own: one line a member, a list's a row each
        lines = 2 + sum(len(v) + 2 if isinstance(v, list) and v else 1 for v in value.values())
        assert text.count("\n") + 1 == lines


def test_rows_of_subclasses_and_odd_keys() -> None:
    _rows_match({"level": _Level.QUICK, "count": _Count.TWO, "sub": _Dict(a=_List([1, (2, 3)])),
                 "rows": [_Dict(x=1), _List([2]), "text", 3.5, None, True]})
    # a key JSON turns into a string: the same text as the indented writer
    odd: dict[Any, Any] = {3: "int key", "rows": [1, 2]}
    assert dumps_rows(odd, 2) == _stdlib(odd)
    assert dumps_rows({}, 2) == "{}"


@pytest.mark.parametrize("value", [
    {"nan": math.nan}, {"rows": [math.inf]}, {"set": {1, 2}}, {"rows": [{"path": Path("/x")}]},
    {"deep": [{"x": -math.inf}]},
])
def test_what_json_refuses_the_rows_refuse_with_the_same_error(value: Any) -> None:
    with pytest.raises((TypeError, ValueError)) as expected:
        _stdlib(value)
    with pytest.raises(type(expected.value)) as got:
        dumps_rows(value, 2)
    assert str(got.value) == str(expected.value)


def test_a_cycle_in_a_row_is_refused_as_json_refuses_it() -> None:
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="Circular reference detected"):
        dumps_rows({"a": [cycle]}, 2)
