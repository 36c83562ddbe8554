"""Every check is declared once and everything else is built from the declarations: the
catalogue, the engine's dispatch, the pytest items in validation/, docs/checks.md."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from nodegate.battery import engine, registry
from nodegate.battery.load import PHASES
from nodegate.battery.registry import CHECKS, DECLARED
from nodegate.vocabulary import LEVELS, Group, Level
from tests.conftest import ROOT


def _validation_checks() -> dict[str, list[str]]:
    """check -> the validation files whose generated items name it (validation/conftest.py:
    ``<group>/test_<subject>.py`` holds the checks of that group and subject)."""
    found: dict[str, list[str]] = {}
    for path in (ROOT / "validation").rglob("test_*.py"):
        group, subject = path.parent.name, path.stem.removeprefix("test_")
        for c in DECLARED:
            if c.group.value == group and c.subject.value == subject:
                found.setdefault(c.name, []).append(str(path))
    return found


def test_every_check_has_a_test() -> None:
    found = _validation_checks()
    assert set(CHECKS) - set(found) == set()  # the power-under-load checks included
    assert set(found) - set(CHECKS) == set()
    assert all(len(paths) == 1 for paths in found.values())


def test_every_validation_file_holds_some_check() -> None:
    used = {p for paths in _validation_checks().values() for p in paths}
    files = {str(p) for p in (ROOT / "validation").rglob("test_*.py")}
    assert files - used == set()


def test_validation_tests_are_thin() -> None:
    """No test is written by hand: the files hold a docstring, their items are generated."""
    for path in Path(ROOT / "validation").rglob("test_*.py"):
        tree = ast.parse(path.read_text())
        assert len(tree.body) == 1 and isinstance(tree.body[0], ast.Expr), path
        for node in ast.walk(tree):
            assert not (isinstance(node, ast.Constant) and isinstance(node.value, float)), path


def test_each_check_is_declared_once() -> None:
    # 146 + the four fp4 GEMM checks + gpu_recovery_action and nvlink_speed
    assert len(DECLARED) == len(CHECKS) == 152


def test_every_declared_judge_is_a_function_of_its_module() -> None:
    for c in DECLARED:
        assert callable(c.judge_function()), c.judge


def test_meanings_exist_once_in_the_source() -> None:
    """A meaning is written in its declaration only (the registry copied 146 of them); the
    threshold catalogue describes its keys, two of them in the words of their check."""
    texts = [p.read_text() for p in (ROOT / "src" / "nodegate").rglob("*.py")
             if p.name != "threshold_keys.py"]
    for c in DECLARED:
        assert sum(f'"{c.meaning}"' in t or f"'{c.meaning}'" in t for t in texts) <= 1, c.name


def test_the_engine_runs_exactly_the_declared_quick_groups() -> None:
    assert set(engine.RUNNERS) == set(registry.groups_at(Level.QUICK))
    assert registry.groups_at(Level.STANDARD)[-1] in (Group.LOAD, Group.POWER)


def test_load_phases_come_from_the_completed_checks() -> None:
    assert PHASES["standard"] == ("gemm", "memory", "p2p", "allreduce", "collectives")
    assert PHASES["acceptance"] == (*PHASES["standard"], "hbm_patterns", "burnin", "fsdp",
                                    "soak")
    for phases in PHASES.values():
        assert all(f"{p}_completed" in CHECKS for p in phases)


def test_levels_run_upward() -> None:
    burnin = CHECKS["burnin_loss"]
    assert burnin.levels == (Level.ACCEPTANCE,)
    assert CHECKS["gpu_count"].levels == tuple(Level(v) for v in LEVELS)
    assert registry.level_of("gemm_tflops") == "standard"


def test_the_committed_checks_page_is_current() -> None:
    """docs/checks.md is generated: a declaration changed without it fails here."""
    assert (ROOT / "docs" / "checks.md").read_text() == registry.render_doc(), \
        "run: python -m nodegate.battery.registry --doc docs/checks.md"


def test_the_page_script_says_stale(tmp_path: Path) -> None:
    stale = tmp_path / "checks.md"
    stale.write_text("# Checks\n")
    run = [sys.executable, "-m", "nodegate.battery.registry"]
    assert subprocess.run([*run, "--check", str(stale)], check=False,
                          capture_output=True).returncode == 1
    assert subprocess.run([*run, "--doc", str(stale)], check=False).returncode == 0
    assert subprocess.run([*run, "--check", str(stale)], check=False).returncode == 0
    assert "`gpu_count`" in stale.read_text()
