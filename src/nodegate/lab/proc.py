"""Run host commands as argument lists and turn failures into one-line operator errors."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence

from nodegate.errors import CannotRunError


def run(cmd: Sequence[str], *, check: bool = True, input_text: str | None = None,
        timeout: float | None = 600) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` (never through a shell); raise CannotRunError with its stderr on failure."""
    try:
        proc = subprocess.run(list(cmd), capture_output=True, text=True, input=input_text,
                              timeout=timeout, check=False)
    except FileNotFoundError as exc:
        raise CannotRunError(f"{cmd[0]} not found (see src/nodegate/lab/host-packages.txt)"
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
                                 "src/nodegate/lab/host-packages.txt")
