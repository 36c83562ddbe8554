"""The control side's layout, read from the source with ``ast`` (nothing imported, nothing run):

- deploy/, deploy.py and inventory.py import no private role module (``roles._x``) and no
  private name; what they need has a public home in roles/ops/;
- every role installs OS packages through ``roles.ops.packages.ensure_packages``: no role
  calls the operations under it or renders the apt preferences pin itself;
- one role = one module under roles/ with one public ``@deploy``, named as the module, its
  knobs' defaults from roles/defaults.py (``role_defaults("<module>")``); roles/ops/ has none.

``test_the_checkers_catch_*`` feed each check a source that breaks it, so none passes vacuously.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ROLES = ROOT / "roles"
ENTRY_POINTS = sorted([*(ROOT / "deploy").glob("*.py"), ROOT / "deploy.py", ROOT / "inventory.py"])
#: The operations ``ensure_packages`` is made of: only roles/ops/packages.py calls them.
INSTALL_STEPS = frozenset({"os_packages", "pinned_packages"})
PACKAGES_MODULE = ROLES / "ops" / "packages.py"


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_role_imports(source: str) -> Iterator[tuple[int, str]]:
    """(line, import) for every import of a private roles module or of a private name from
    a roles module: ``roles._ops``, ``from roles import _ops``, ``from roles.ops.gate import
    _left_the_run``. Imports inside functions count too."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "roles" and any(_private(p) for p in parts):
                    yield node.lineno, f"import {alias.name}"
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            if parts[0] != "roles":
                continue
            for alias in node.names:
                if any(_private(p) for p in parts) or _private(alias.name):
                    yield node.lineno, f"from {node.module} import {alias.name}"


def direct_installs(source: str) -> Iterator[tuple[int, str]]:
    """(line, what) for every use of an install step beside ``ensure_packages`` (by name or
    attribute) and every mention of the apt preferences template or directory."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name | ast.Attribute):
            name = node.id if isinstance(node, ast.Name) else node.attr
            if name in INSTALL_STEPS:
                yield node.lineno, name
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name in INSTALL_STEPS:
                    yield node.lineno, f"import {alias.name}"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                ("apt/preferences" in node.value or "preferences.d" in node.value):
            yield node.lineno, repr(node.value)


def deploys(source: str) -> list[tuple[str, ast.expr | None]]:
    """(function name, its ``data_defaults`` argument) for each ``@deploy(...)`` function."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef):
            continue
        for decorator in node.decorator_list:
            call = decorator if isinstance(decorator, ast.Call) else None
            func = call.func if call else decorator
            name = func.id if isinstance(func, ast.Name) else \
                func.attr if isinstance(func, ast.Attribute) else None
            if name == "deploy":
                defaults = next((k.value for k in (call.keywords if call else [])
                                 if k.arg == "data_defaults"), None)
                found.append((node.name, defaults))
    return found


def _is_role_defaults(expr: ast.expr | None, role: str) -> bool:
    return (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name)
            and expr.func.id == "role_defaults" and len(expr.args) == 1
            and isinstance(expr.args[0], ast.Constant) and expr.args[0].value == role)


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", ENTRY_POINTS, ids=_rel)
def test_entry_points_import_no_private_role_module(path: Path) -> None:
    found = [f"{_rel(path)}:{line}: {what}"
             for line, what in private_role_imports(path.read_text())]
    assert found == [], "give what deploy/ needs a public home in roles/ops/"


def test_roles_install_packages_only_through_ensure_packages() -> None:
    modules = [p for p in [*ROLES.rglob("*.py"), *ENTRY_POINTS] if p != PACKAGES_MODULE]
    found = [f"{_rel(p)}:{line}: {what}" for p in modules
             for line, what in direct_installs(p.read_text())]
    assert found == [], "install through roles.ops.packages.ensure_packages"


def test_the_package_helper_still_holds_the_install_steps() -> None:
    """The check above looks for these names: were they renamed, it would pass on nothing."""
    defined = {n.name for n in ast.parse(PACKAGES_MODULE.read_text()).body
               if isinstance(n, ast.FunctionDef)}
    assert INSTALL_STEPS | {"ensure_packages"} <= defined


def test_one_role_one_module_one_public_deploy() -> None:
    roles = {}
    for path in sorted(ROLES.glob("*.py")):
        found = deploys(path.read_text())
        assert len(found) <= 1, f"{_rel(path)}: {len(found)} @deploy functions"
        if found:
            roles[path.stem] = found[0]
    assert len(roles) >= 11, sorted(roles)  # the roles deploy.py runs, and the Slurm pair
    for stem, (name, defaults) in roles.items():
        assert name == stem, f"roles/{stem}.py: its @deploy is {name}(), not {stem}()"
        assert _is_role_defaults(defaults, stem), \
            f"roles/{stem}.py: data_defaults must be role_defaults({stem!r}) (roles/defaults.py)"
    in_ops = [f"{_rel(p)}: {name}" for p in sorted((ROLES / "ops").rglob("*.py"))
              for name, _ in deploys(p.read_text())]
    assert in_ops == [], "roles/ops/ holds operations and helpers, never a role"


def test_the_checkers_catch_private_imports() -> None:
    source = ("import roles._common\nfrom roles import _ops, defaults\n"
              "from roles._gate import stem\nfrom roles.ops.gate import _left_the_run\n"
              "def late() -> None:\n    from roles.ops import _hidden\n"
              "from roles.ops.common import knob\nfrom roles import ops\nimport os._x\n")
    assert [line for line, _ in private_role_imports(source)] == [1, 2, 3, 4, 6]


def test_the_checkers_catch_direct_installs() -> None:
    source = ("from roles.ops.packages import os_packages, ensure_packages\n"
              "packages.pinned_packages(name='x', packages=['a'], version='1')\n"
              "put_template(src='apt/preferences.j2', dest='/etc/apt/preferences.d/x')\n"
              "ensure_packages('x', ['a'])\n")
    assert sorted({line for line, _ in direct_installs(source)}) == [1, 2, 3]


def test_the_checkers_catch_a_second_or_misnamed_deploy() -> None:
    source = ("@deploy('a', data_defaults=role_defaults('nccl'))\ndef nccl() -> None: ...\n"
              "@api.deploy('b')\ndef _other() -> None: ...\n")
    (first, first_defaults), (second, second_defaults) = deploys(source)
    assert (first, second) == ("nccl", "_other")
    assert _is_role_defaults(first_defaults, "nccl")
    assert not _is_role_defaults(first_defaults, "dcgm") and second_defaults is None
