"""`pip install nodegate` is the node side: a GPU node gets what its cron path, its
load levels and its gate need, never the control side's pyinfra, ansible-core, jinja2, gevent,
paramiko or testinfra (the `deploy` and `dev` extras).

The fast tests hold the contract in the tree: every module of the package imports with the
control-side packages blocked, except the few that are control side by design. The slow tests
build the wheel and check it holds the node package only (the lab, its emulators and the
synthetic fleet are the nodegate-lab distribution in lab/), and do what an operator does: an
empty venv, `pip install <checkout>`, `nodegate health`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from importlib.metadata import requires
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
CONTROL_PACKAGES = {"pyinfra", "ansible-core", "jinja2", "gevent", "paramiko",
                    "pytest-testinfra", "sqlalchemy", "alembic", "psycopg"}
#: Import names of the control side's packages (ansible-core imports as ansible)
CONTROL_IMPORTS = {"pyinfra", "ansible", "jinja2", "gevent", "paramiko", "testinfra",
                   "sqlalchemy", "alembic", "psycopg"}
#: Modules of the package that are control side by design: pyinfra facts and the pyinfra
#: version guard, the fleet ledger's database modules (its ``cli`` and ``report_cli`` import
#: on a node: ``nodegate report DIR`` needs no database). Everything else must import on a node.
CONTROL_MODULES = ("nodegate.facts.", "nodegate.pyinfra_compat", "nodegate.fact_cache",
                   "nodegate.ledger.")
LEDGER_NODE_MODULES = ("nodegate.ledger.cli", "nodegate.ledger.report_cli",
                       "nodegate.ledger.render")

GUARDED_IMPORT = """
import importlib, importlib.abc, json, pkgutil, sys
BLOCK = set(sys.argv[1].split(","))
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in BLOCK:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)
        return None
sys.meta_path.insert(0, Block())
import nodegate
failed = {}
def record(name):
    failed[name] = repr(sys.exc_info()[1])
for info in pkgutil.walk_packages(nodegate.__path__, "nodegate.", onerror=record):
    if info.name == "nodegate.__main__":
        continue
    try:
        importlib.import_module(info.name)
    except Exception as exc:
        failed[info.name] = f"{type(exc).__name__}: {exc}"
print(json.dumps(failed))
"""


def _requirements(extra: str | None) -> set[str]:
    """Names nodegate's installed metadata (built from pyproject.toml) requires, for ``extra``
    or (None) always."""
    out = set()
    for line in requires("nodegate") or []:
        req = Requirement(line)
        wanted = (req.marker is None if extra is None
                  else req.marker is not None and req.marker.evaluate({"extra": extra}))
        if wanted:
            out.add(req.name.lower())
    return out


def test_runtime_dependencies_are_the_node_side() -> None:
    assert "nvidia-ml-py" in _requirements(None)
    assert not _requirements(None) & CONTROL_PACKAGES
    assert {"pyinfra", "ansible-core"} <= _requirements("deploy")
    assert {"sqlalchemy", "alembic", "psycopg"} <= _requirements("ledger")
    assert "pytest-testinfra" in _requirements("dev")


def test_every_node_module_imports_without_the_control_side() -> None:
    proc = subprocess.run([sys.executable, "-c", GUARDED_IMPORT, ",".join(CONTROL_IMPORTS)],
                          capture_output=True, text=True, timeout=120, check=False,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    failed: dict[str, str] = json.loads(proc.stdout.strip().splitlines()[-1])
    node_side = {name: why for name, why in failed.items()
                 if not name.startswith(CONTROL_MODULES) or name in LEDGER_NODE_MODULES}
    assert not node_side, f"node-side modules that need the control side: {node_side}"
    # the exemption is not a blank cheque: the control-side modules do need it
    assert any(name.startswith("nodegate.facts.") for name in failed)
    assert "nodegate.ledger.engine" in failed


def test_a_control_side_import_error_names_the_extra() -> None:
    from nodegate.cli import OPTIONAL_EXTRAS

    assert {OPTIONAL_EXTRAS[name] for name in ("pyinfra", "ansible", "jinja2")} == {"deploy"}
    assert {OPTIONAL_EXTRAS[name] for name in ("sqlalchemy", "alembic", "psycopg")} == {"ledger"}


@pytest.mark.slow
def test_the_node_wheel_holds_the_node_package_only(tmp_path: Path) -> None:
    """Built from a copy of the checkout with lab/ beside src/, as pip builds it."""
    tree = tmp_path / "tree"
    tree.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copyfile(ROOT / name, tree / name)
    for name in ("src", "lab"):  # links followed: the wheel carries copies of data/ links
        shutil.copytree(ROOT / name, tree / name, ignore=shutil.ignore_patterns(
            "__pycache__", "*.egg-info", "build"))
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                           "--no-build-isolation", "--disable-pip-version-check",
                           "-w", str(tmp_path / "out"), str(tree)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = (tmp_path / "out").glob("nodegate-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        entry_points = archive.read(info).decode()
    tops = {name.split("/")[0] for name in names}
    assert {top for top in tops if not top.endswith(".dist-info")} == {"nodegate"}, tops
    assert "nodegate/cli.py" in names and "nodegate/power/bmc.py" in names
    harness = [n for n in names if n.startswith(("nodegate/lab/", "nodegate_lab/"))
               or n.rsplit("/", 1)[-1] in ("bmc_emulator.py", "synthetic.py", "pdu_agent.py",
                                             "mdvm.py", "synthetic_fleet.py")]
    assert harness == []
    assert "nodegate-lab" not in entry_points and "nodegate_lab" not in entry_points


@pytest.mark.slow
def test_pip_install_gives_a_lean_node_that_runs_health(tmp_path: Path) -> None:
    venv = tmp_path / "node"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                          "--disable-pip-version-check", str(ROOT)],
                         capture_output=True, text=True, timeout=900, check=False)
    assert pip.returncode == 0, pip.stderr[-3000:]
    listed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list",
                             "--format=json"], capture_output=True, text=True, check=True)
    installed = {d["name"].lower() for d in json.loads(listed.stdout)}
    assert "nodegate" in installed and "nvidia-ml-py" in installed
    assert not installed & CONTROL_PACKAGES, installed & CONTROL_PACKAGES
    nodegate = str(venv / "bin" / "nodegate")
    health = subprocess.run(
        [nodegate, "sim", "run", "h200-single", "--", nodegate, "health", "--profile",
         "h200-single", "--checks", "gpu,log", "--report-dir", str(tmp_path / "r"),
         "--no-textfile", "--quiet"],
        capture_output=True, text=True, timeout=300, check=False,
        env={"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path),
             "NODEGATE_LOCK_FILE": str(tmp_path / "lock")})
    assert health.returncode == 0, health.stdout + health.stderr
    assert json.loads((tmp_path / "r" / "quick-latest.json").read_text())["verdict"] == "PASS"
