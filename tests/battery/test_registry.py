"""Every catalogued check has exactly one thin test in validation/, and vice versa."""

from __future__ import annotations

import ast
from pathlib import Path

from nodegate.battery.registry import CHECKS
from tests.conftest import ROOT


def _validation_checks() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in (ROOT / "validation").rglob("test_*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "check":
                for arg in node.args:
                    if isinstance(arg, ast.Constant):
                        found.setdefault(str(arg.value), []).append(str(path))
    return found


def test_every_check_has_a_test() -> None:
    found = _validation_checks()
    assert set(CHECKS) - set(found) == set()  # the power-under-load checks included
    assert set(found) - set(CHECKS) == set()
    assert all(len(paths) == 1 for paths in found.values())


def test_validation_tests_are_thin() -> None:
    for path in Path(ROOT / "validation").rglob("test_*.py"):
        text = path.read_text()
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                assert len(node.body) == 1, f"{path}:{node.name} is not one line"
            assert not (isinstance(node, ast.Constant) and isinstance(node.value, float)), path
