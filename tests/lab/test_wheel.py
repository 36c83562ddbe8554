"""The lab's source-labelled nodegate wheel (nodegate_lab.wheel): no root, no lab."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nodegate.errors import CannotRunError
from nodegate_lab import mirror, wheel

PYPROJECT = """[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "nodegate"
version = "0.1.0"  # the release
readme = "README.md"

[tool.setuptools.packages.find]
where = ["src"]

[tool.setuptools.package-data]
"nodegate" = ["data/**/*"]

[tool.other]
version = "9.9"
"""


def _tree(base: Path) -> Path:
    """A checkout in miniature: pyproject, readme, a package whose data/ links outside it."""
    root = base / "checkout"
    package = root / "src" / "nodegate"
    (package / "data").mkdir(parents=True)
    (root / "pyproject.toml").write_text(PYPROJECT)
    (root / "README.md").write_text("# nodegate\n")
    (package / "__init__.py").write_text('"""nodegate."""\n')
    (package / "gate.py").write_text("LIMIT = 1\n")
    (root / "profiles").mkdir()
    (root / "profiles" / "lab.yaml").write_text("gpus: 8\n")
    (package / "data" / "profiles").symlink_to("../../../profiles")
    return root


def test_digest_is_stable_for_the_same_tree_wherever_it_lies(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    first = wheel.source_digest(root)
    assert wheel.source_digest(root) == first
    assert wheel.source_digest(_tree(tmp_path / "elsewhere")) == first  # no paths, no mtimes


@pytest.mark.parametrize("edit", ["module", "linked data", "new file", "pyproject"])
def test_digest_changes_when_a_source_file_changes(tmp_path: Path, edit: str) -> None:
    root = _tree(tmp_path)
    before = wheel.source_digest(root)
    if edit == "module":
        (root / "src/nodegate/gate.py").write_text("LIMIT = 2\n")
    elif edit == "linked data":
        (root / "profiles/lab.yaml").write_text("gpus: 4\n")
    elif edit == "new file":
        (root / "src/nodegate/extra.py").write_text("")
    else:
        (root / "pyproject.toml").write_text(PYPROJECT.replace('"setuptools>=61"', '"x"'))
    assert wheel.source_digest(root) != before


def test_digest_ignores_bytecode_caches_and_the_readme(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    before = wheel.source_digest(root)
    cache = root / "src/nodegate/__pycache__"
    cache.mkdir()
    (cache / "gate.cpython-311.pyc").write_bytes(b"\0bytecode")
    (root / "src/nodegate/gate.pyc").write_bytes(b"\0stray")
    (root / "src/nodegate/.mypy_cache").mkdir()
    (root / "src/nodegate/.mypy_cache/x.json").write_text("{}")
    (root / "README.md").write_text("# edited docs\n")
    assert wheel.source_digest(root) == before


def test_files_are_named_by_their_place_in_the_wheel(tmp_path: Path) -> None:
    names = [rel for rel, _ in wheel.source_files(_tree(tmp_path))]
    assert names == ["pyproject.toml", "src/nodegate/__init__.py",
                     "src/nodegate/gate.py", "src/nodegate/data/profiles/lab.yaml"]


def test_labelled_version_is_pep440_local() -> None:
    digest = "0a1b2c3d4e5f" + "9" * 52
    assert wheel.labelled("0.1.0", digest) == "0.1.0+src.0a1b2c3d4e5f"
    assert wheel.labelled("0.1.0+cpu", digest) == "0.1.0+cpu.src.0a1b2c3d4e5f"
    with pytest.raises(ValueError, match="not a hex digest"):
        wheel.labelled("0.1.0", "xyz")


def test_stage_labels_only_the_project_version(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    version = wheel.stage(root, tmp_path / "stage")
    assert version == wheel.labelled("0.1.0", wheel.source_digest(root))
    staged = (tmp_path / "stage/pyproject.toml").read_text()
    assert staged == PYPROJECT.replace('version = "0.1.0"', f'version = "{version}"')
    assert 'version = "9.9"' in staged  # another table's key is left alone
    linked = tmp_path / "stage/src/nodegate/data/profiles/lab.yaml"
    assert linked.read_text() == "gpus: 8\n" and not linked.parent.is_symlink()
    assert (tmp_path / "stage/README.md").is_file()
    assert (root / "pyproject.toml").read_text() == PYPROJECT  # the checkout is untouched
    with pytest.raises(CannotRunError, match="exists"):
        wheel.stage(root, tmp_path / "stage")


def test_a_pyproject_without_a_static_version_is_refused(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (root / "pyproject.toml").write_text(
        PYPROJECT.replace('version = "0.1.0"  # the release', 'dynamic = ["version"]'))
    with pytest.raises(CannotRunError, match=r"no static .* in \[project\]"):
        wheel.stage(root, tmp_path / "stage")


def test_the_wheel_pip_builds_carries_the_label(tmp_path: Path) -> None:
    """The staged copy is what setuptools builds: the wheel's name and metadata say it."""
    root = _tree(tmp_path)
    version = wheel.stage(root, tmp_path / "stage")
    out = tmp_path / "wheels"
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                           "--no-build-isolation", "-w", str(out), str(tmp_path / "stage")],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    assert wheel.wheel_version(out) == version
    assert mirror.nodegate_version(tmp_path) == version  # the mirror reads wheels/
    shutil.copy(next(out.glob("*.whl")), out / "nodegate-0.0.1-py3-none-any.whl")
    with pytest.raises(CannotRunError, match="2 nodegate wheels"):
        wheel.wheel_version(out)
    assert wheel.wheel_version(tmp_path / "none") is None


def test_the_checkout_stages_as_its_own_digest(tmp_path: Path, root: Path) -> None:
    version = wheel.stage(root, tmp_path / "stage")
    release, _, label = version.partition("+")
    assert release == wheel.release_version((root / "pyproject.toml").read_text())
    assert label.startswith("src.") and len(label) == len("src.") + wheel.LABEL_DIGITS
    assert (tmp_path / "stage/src/nodegate/data/profiles/sim-h100-hgx.yaml").is_file()
