"""Shared fixtures: build the simulator once, run pynvml snippets in fresh subprocesses.

The library is loaded once per process, so every board is read in its own subprocess with the
env from ``runtime.prepare``; each snippet batches many checks to keep the suite fast.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nodegate.sim import build, runtime

# Helpers every snippet gets: pynvml as n, and `err(fn, *a)` -> error class name or value.
PRELUDE = """
import json, sys, time
import pynvml as n
from nodegate.sim import runtime
def err(fn, *a):
    try:
        fn(*a)
    except n.NVMLError as e:
        return type(e).__name__
    return None
n.nvmlInit()
out = {}
"""


@pytest.fixture(scope="session", autouse=True)
def sim_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Isolated cache so the test run builds the library itself (restored afterwards)."""
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NODEGATE_CACHE_DIR", str(cache))
        yield cache


@pytest.fixture(scope="session")
def lib_dir(sim_cache: Path) -> Path:
    return build.ensure_built()


NvmlRun = Callable[..., Any]


@pytest.fixture()
def nvml(lib_dir: Path, tmp_path: Path) -> NvmlRun:
    """``nvml(spec, code)``: prepare the board, run ``code`` under pynvml, return its ``out``."""
    counter = iter(range(1000))

    def run(spec: str, code: str, *, timeout: float = 30) -> Any:
        state_dir = tmp_path / f"board{next(counter)}"
        env = dict(os.environ)
        env.update(runtime.prepare(spec, state_dir))
        script = PRELUDE + textwrap.dedent(code) + "\nprint(json.dumps(out))\n"
        proc = subprocess.run(
            [sys.executable, "-c", script],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        result["_state_dir"] = str(state_dir)
        return result

    return run
