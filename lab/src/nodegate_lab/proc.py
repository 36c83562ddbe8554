"""Run host commands as argument lists and turn failures into one-line operator errors."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import nodegate
from nodegate.errors import CannotRunError


def run(cmd: Sequence[str], *, check: bool = True, input_text: str | None = None,
        timeout: float | None = 600) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` (never through a shell); raise CannotRunError with its stderr on failure."""
    try:
        proc = subprocess.run(list(cmd), capture_output=True, text=True, input=input_text,
                              timeout=timeout, check=False)
    except FileNotFoundError as exc:
        raise CannotRunError(f"{cmd[0]} not found (see lab/src/nodegate_lab/host-packages.txt)"
                             ) from exc
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise CannotRunError(f"{' '.join(cmd)} failed ({proc.returncode}): "
                             f"{detail[-1] if detail else 'no output'}")
    return proc


def ok(cmd: Sequence[str]) -> bool:
    """True when ``cmd`` exits 0 (a probe; output discarded)."""
    return run(cmd, check=False).returncode == 0


def need(*tools: str) -> None:
    """Fail early, naming the missing tool and the package list that provides it."""
    for tool in tools:
        if shutil.which(tool) is None:
            raise CannotRunError(f"{tool} not found on PATH: install the packages in "
                                 "lab/src/nodegate_lab/host-packages.txt")


def source_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a process the lab starts as ``python -m nodegate_lab.<module>``
    (host supervisors, PDU agent, BMCs): the very nodegate_lab and nodegate this process
    runs first on PYTHONPATH, so a detached service never picks up another checkout's copy;
    plus ``extra``."""
    env = dict(os.environ)
    sources = {str(Path(__file__).resolve().parents[1]),
               str(Path(nodegate.__file__).resolve().parents[1])}
    paths = [*sorted(sources), *filter(None, [env.get("PYTHONPATH")])]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.update(extra or {})
    return env
