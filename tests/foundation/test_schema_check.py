"""nodegate.schema_check: the one JSON Schema check (profiles, site files, scenarios, reports)."""

from __future__ import annotations

from pathlib import Path

from nodegate.schema_check import first_problem

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "gpus"],
    "properties": {
        "name": {"type": "string"},
        "gpus": {"type": "array", "items": {
            "type": "object", "additionalProperties": False, "required": ["bus"],
            "properties": {"bus": {"type": "string"}, "watts": {"type": "number"}}}},
    },
}


def test_valid_data_has_no_problem() -> None:
    assert first_problem(SCHEMA, {"name": "x", "gpus": [{"bus": "0"}]}) is None


def test_the_shallowest_error_is_told_first() -> None:
    problem = first_problem(SCHEMA, {"name": 3, "gpus": [{"bus": 1, "watts": "hot"}]})
    assert problem is not None
    assert problem.path == ["name"] and problem.count == 3


def test_an_unknown_key_is_named_itself() -> None:
    problem = first_problem(SCHEMA, {"name": "x", "gpus": [{"bus": "0", "colour": "red"}]})
    assert problem is not None
    assert problem.path == ["gpus", 0, "colour"] and problem.unknown_key == "colour"


def test_a_missing_key_is_named_itself() -> None:
    problem = first_problem(SCHEMA, {"name": "x"})
    assert problem is not None
    assert problem.path == ["gpus"] and problem.validator == "required"
    assert problem.unknown_key is None


def test_no_other_module_builds_its_own_validator() -> None:
    """Four wrappers once picked 'the first' error four ways: one door now."""
    src = Path(__file__).resolve().parents[2] / "src" / "nodegate"
    users = sorted(str(p.relative_to(src)) for p in src.rglob("*.py")
                   if "Draft202012Validator" in p.read_text() or "iter_errors" in p.read_text())
    assert users == ["schema_check.py"]
