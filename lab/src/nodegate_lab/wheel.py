"""The nodegate the lab serves its nodes: a wheel whose version names the source it came from.

pip leaves an installed distribution of the same version alone, and so does the agent role,
so a wheel rebuilt from an edited checkout as plain ``0.1.0`` never reaches a node that
already has ``0.1.0``. The lab therefore builds from a staged copy of the tree whose
``pyproject.toml`` says ``<release>+src.<12 hex>``: a PEP 440 local label from a digest of the
files that go into the wheel. An edited tree is a new version the agent installs; an
unchanged tree is the same version, so a re-deploy changes nothing. The checkout itself (and
the released version) is never touched.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

from nodegate.errors import CannotRunError

#: The local label: ``src.`` + this many hex digits of the source digest.
LABEL_PREFIX = "src."
LABEL_DIGITS = 12
#: Copied beside pyproject.toml: the readme it names (metadata only, so not in the digest:
#: a docs edit must not make every node reinstall).
STAGED_EXTRAS = ("README.md",)
_SKIP_DIRS = ("__pycache__",)
_SKIP_SUFFIXES = (".pyc", ".pyo")
_TABLE = re.compile(r"^\s*\[\s*([^\[\]]+?)\s*\]\s*(#.*)?$")
_VERSION = re.compile(r'^(?P<head>\s*version\s*=\s*)"(?P<version>[^"]*)"(?P<tail>.*)$')


def source_files(root: Path) -> Iterator[tuple[str, Path]]:
    """(path in the tree, file) for what the wheel is built from, in a stable order.

    ``pyproject.toml`` (version, dependencies, entry points) and every file under
    ``src/nodegate``, following the ``data/`` links (the wheel carries copies of profiles,
    templates and validation); bytecode and hidden or cache folders are left out, since
    they differ between machines without changing what runs."""
    yield "pyproject.toml", root / "pyproject.toml"
    package = root / "src" / "nodegate"
    if not package.is_dir():
        raise CannotRunError(f"{package} is missing: the lab builds nodegate from a checkout")
    for folder, dirs, names in os.walk(package, followlinks=True):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
        for name in sorted(names):
            if name.endswith(_SKIP_SUFFIXES):
                continue
            path = Path(folder) / name
            yield path.relative_to(root).as_posix(), path


def _feed(update: Callable[[bytes], object], rel: str, data: bytes) -> None:
    """One file into a digest: its path and length first, so no two trees hash alike."""
    update(f"{rel}\0{len(data)}\0".encode())
    update(data)


def source_digest(root: Path) -> str:
    """sha256 (hex) over :func:`source_files`: names and contents, nothing else (no mtimes)."""
    digest = hashlib.sha256()
    for rel, path in source_files(root):
        _feed(digest.update, rel, path.read_bytes())
    return digest.hexdigest()


def _version_line(text: str) -> tuple[int, re.Match[str]]:
    """Index and match of ``version = "..."`` in pyproject's ``[project]`` table."""
    table = None
    for index, line in enumerate(text.splitlines()):
        header = _TABLE.match(line)
        if header:
            table = header.group(1)
            continue
        match = _VERSION.match(line)
        if table == "project" and match:
            return index, match
    raise CannotRunError('pyproject.toml has no static `version = "..."` in [project]; '
                         "the lab labels that version with the source digest")


def release_version(pyproject: str) -> str:
    """The version pyproject.toml declares (``0.1.0``)."""
    return _version_line(pyproject)[1].group("version")


def labelled(release: str, digest: str) -> str:
    """``0.1.0`` + digest -> ``0.1.0+src.<12 hex>`` (PEP 440 allows one ``+``: a release that
    already has a local label gets the digest as one more segment)."""
    if not re.fullmatch(rf"[0-9a-f]{{{LABEL_DIGITS},}}", digest):
        raise ValueError(f"not a hex digest: {digest!r}")
    sep = "." if "+" in release else "+"
    return f"{release}{sep}{LABEL_PREFIX}{digest[:LABEL_DIGITS]}"


def with_version(pyproject: str, version: str) -> str:
    """pyproject.toml text with ``[project] version`` replaced; every other byte kept."""
    index, match = _version_line(pyproject)
    lines = pyproject.splitlines(keepends=True)
    newline = lines[index][len(lines[index].rstrip("\r\n")):]
    lines[index] = f'{match.group("head")}"{version}"{match.group("tail")}{newline}'
    return "".join(lines)


def stage(root: Path, dest: Path) -> str:
    """Copy the tree the wheel is built from into ``dest`` with the labelled version and
    return that version.

    The digest is taken over the very bytes copied, so the label always names what the
    wheel holds, even when the checkout is being edited meanwhile. Links are copied as
    files (the wheel carries copies too); ``dest`` must not exist yet."""
    if dest.exists():
        raise CannotRunError(f"{dest} exists; the lab stages its wheel source in a new folder")
    digest = hashlib.sha256()
    pyproject = ""
    for rel, path in source_files(root):
        data = path.read_bytes()
        _feed(digest.update, rel, data)
        if rel == "pyproject.toml":
            pyproject = data.decode()
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    version = labelled(release_version(pyproject), digest.hexdigest())
    (dest / "pyproject.toml").write_text(with_version(pyproject, version))
    for name in STAGED_EXTRAS:
        if (root / name).is_file():
            shutil.copyfile(root / name, dest / name)
    return version


def wheel_version(wheelhouse: Path, name: str = "nodegate") -> str | None:
    """The version of ``name``'s one wheel in ``wheelhouse`` (from its file name), or None."""
    found = sorted(wheelhouse.glob(f"{name}-*.whl")) if wheelhouse.is_dir() else []
    if len(found) > 1:
        raise CannotRunError(f"{wheelhouse} holds {len(found)} {name} wheels; expected one")
    return found[0].name.split("-")[1] if found else None
