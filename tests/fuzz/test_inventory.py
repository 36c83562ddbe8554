"""Hostile site files and group names through inventory.py as pyinfra loads it, in this
process (``pyinfra_cli.inventory.make_inventory_from_files``, what ``pyinfra inventory.py``
runs): either an inventory whose groups are the site's, with pyinfra's own groups intact, or
one ``nodegate: error:`` line naming the file (and the group's key) and exit 2. Never another
exception, never a traceback, bounded time.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import io
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from nodegate.site.schema import GROUP_NAME  # noqa: E402
from tests.conftest import ROOT  # noqa: E402

HOSTS = ("n1", "n2", "n3")
HEAD = ("schema: nodegate.site/1\nname: t\nhosts:\n"
        + "".join(f"  {h}: {{address: 10.0.0.{i + 1}, profile: none}}\n"
                  for i, h in enumerate(HOSTS)))
#: Names that must never become a group as given: pyinfra's own, inventory.py's own groups
#: and names, and what pyinfra skips (a leading underscore).
RESERVED = ("all", "inventory", "override_data", "names_data", "others", "_group", "_site",
            "_inventory", "__builtins__", "__file__", "os", "sys", "Path", "Any", "Site",
            "load_site", "CHECKOUT", "PYINFRA_NAMES", "OWN_GROUPS", "annotations", "nodegate")
FOLDER = Path(tempfile.mkdtemp(prefix="nodegate-fuzz-inventory-"))
SITE = FOLDER / "s.yaml"
atexit.register(shutil.rmtree, FOLDER, ignore_errors=True)


def _make_inventory_from_files() -> Any:
    """pyinfra_cli's inventory loader, imported without the gevent monkey-patching its package
    does on import (``pyinfra_cli/__init__.py``: ``monkey.patch_all()``). Loading an inventory
    needs no green threads, and a patched ``threading`` in this process deadlocks a
    pytest-xdist worker the next time it waits for work (gevent's LoopExit)."""
    if "pyinfra_cli" not in sys.modules:
        from gevent import monkey

        patch_all = monkey.patch_all
        monkey.patch_all = lambda *args, **kwargs: None
        try:
            import pyinfra_cli.inventory  # noqa: F401
        finally:
            monkey.patch_all = patch_all
    from pyinfra_cli.inventory import make_inventory_from_files

    return make_inventory_from_files


@functools.cache
def _cached(name: str) -> Any:
    from pyinfra.api import connectors

    return getattr(connectors, name)()


@contextlib.contextmanager
def _pyinfra() -> Iterator[None]:
    """A pyinfra state to load inventories in, its connector list read once (pyinfra reads
    the package entry points on every Inventory: 0.2 s, not what is tested here)."""
    from pyinfra.api import Config, Inventory, State
    from pyinfra.api import inventory as api_inventory
    from pyinfra.context import ctx_state

    saved = api_inventory.get_all_connectors, api_inventory.get_execution_connectors
    api_inventory.get_all_connectors = functools.partial(_cached, "get_all_connectors")
    api_inventory.get_execution_connectors = functools.partial(_cached,
                                                               "get_execution_connectors")
    previous = os.environ.get("NODEGATE_SITE")
    os.environ["NODEGATE_SITE"] = str(SITE)
    cwd = Path.cwd()
    os.chdir(ROOT)
    try:
        with ctx_state.use(State(Inventory(([], {})), Config())):
            yield
    finally:
        os.chdir(cwd)
        api_inventory.get_all_connectors, api_inventory.get_execution_connectors = saved
        if previous is None:
            os.environ.pop("NODEGATE_SITE", None)
        else:
            os.environ["NODEGATE_SITE"] = previous


def _load(text: str) -> tuple[Any, int | None, str]:
    """(the pyinfra Inventory or None, the exit code or None, what was printed)."""
    make_inventory_from_files = _make_inventory_from_files()
    SITE.write_text(text, encoding="utf-8", errors="surrogateescape")
    err = io.StringIO()
    started = time.monotonic()
    with _pyinfra(), contextlib.redirect_stderr(err):
        try:
            inventory = make_inventory_from_files(str(ROOT / "inventory.py"))
        except SystemExit as exc:
            inventory, code = None, int(exc.code or 0)
        else:
            code = None
    # generous: proves "does not hang" on shared cores, not a speed
    assert time.monotonic() - started < 10, "loading an inventory took over 10 s"
    return inventory, code, err.getvalue()


def _refused(code: int | None, text: str) -> str:
    """The one error line of a refusal (exit 2, the site file named)."""
    assert code == 2, text
    assert "Traceback" not in text
    lines = [line for line in text.splitlines() if line.startswith("nodegate: error:")]
    assert len(lines) == 1, text
    assert str(SITE) in lines[0], text
    return lines[0]


NAMES = st.one_of(st.sampled_from((*RESERVED, "gpu_nodes", "slurm-master", "k8s_cluster")),
                  st.from_regex(re.compile(GROUP_NAME.rstrip("$") + r"\Z"), fullmatch=True)
                  .filter(lambda s: len(s) <= 40))


@pytest.mark.fuzz
@given(name=NAMES, members=st.lists(st.sampled_from(HOSTS), min_size=1, max_size=3,
                                    unique=True))
def test_a_group_is_the_sites_or_refused_never_pyinfras_or_the_modules(
        name: str, members: list[str]) -> None:
    quoted = "'" + name.replace("'", "''") + "'"
    inventory, code, text = _load(HEAD + f"groups:\n  {quoted}: [{', '.join(members)}]\n")
    if inventory is None:
        assert f"groups.{name}" in _refused(code, text)
        return
    assert name not in RESERVED and not name.startswith("_"), (name, text)
    assert sorted(h.name for h in inventory.get_group(name)) == sorted(members)
    # pyinfra's own groups keep their meaning: every host, in all and in the file's group
    assert sorted(h.name for h in inventory) == sorted(HOSTS)
    assert sorted(h.name for h in inventory.get_group("inventory")) == sorted(HOSTS)


class Huge:
    """An integer of 4,400 digits in the YAML (Python's str() refuses over 4,300)."""

    def __init__(self, negative: bool) -> None:
        self.negative = negative

    def __repr__(self) -> str:
        return f"Huge(negative={self.negative})"


_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20),
                    st.builds(Huge, st.booleans()))
_VALUES = st.recursive(_LEAVES, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)),
    max_leaves=20)


def _yaml(value: Any) -> str:
    """A flow-style YAML rendering, ``Huge`` as its digits."""
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, Huge):
        return ("-" if value.negative else "") + "9" * 4400
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value).replace("inf", ".inf").replace("nan", ".nan")
    if isinstance(value, str):
        return '"' + value.encode("unicode_escape").decode("ascii").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_yaml(v) for v in value) + "]"
    return "{" + ", ".join(f"{_yaml(str(k))}: {_yaml(v)}" for k, v in value.items()) + "}"


WHERE = st.sampled_from(["description: {v}\n", "groups: {v}\n", "slurm: {v}\n",
                         "profile_overrides: {v}\n", "defaults: {v}\n",
                         "hosts:\n  n9: {v}\n"])
HOSTILE = st.sampled_from([
    "groups: &g\n  loop: *g\n",
    # past Python's recursion limit (deeper ones: tests/badinput/test_exits.py, a process)
    "description: " + "[" * 1200 + "]" * 1200 + "\n",
    "description: " + "{a: " * 1200 + "1" + "}" * 1200 + "\n",
    "defaults: {ssh_port: " + "9" * 5000 + "}\n",
    "defaults: {ssh_port: \u0661\u0662}\n",
    "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
    "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n",
    "description: !!python/object:os.system 'true'\n",
    "\udcff: x\n",
    "groups:\n  g: &m [n1]\n  h: *m\n",
    "hosts: null\n",
])


@pytest.mark.fuzz
@given(where=WHERE, value=_VALUES, extra=st.one_of(st.just(""), HOSTILE))
def test_a_hostile_site_file_loads_or_is_one_line_and_exit_2(where: str, value: Any,
                                                             extra: str) -> None:
    inventory, code, text = _load(HEAD + extra + where.format(v=_yaml(value)))
    if inventory is None:
        _refused(code, text)
        return
    assert sorted(h.name for h in inventory) == sorted(HOSTS)
