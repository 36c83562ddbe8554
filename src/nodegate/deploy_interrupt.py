"""An interrupted deploy exits 3 and says what it left half-done (docs/exit-codes.md).

Why: pyinfra's CLI answers SIGINT with "Exiting upon user request!" and exit 0
(``pyinfra_cli/main.py``: ``_handle_interrupt``), so CI and scripts read an aborted bring-up
(Ctrl-C, or a timeout's SIGINT: the only way out of a hang) as a success.

``install`` (inventory.py calls it: pyinfra loads the inventory first in every run, after its
CLI installed its own handler) replaces that Python-level handler with one that prints, on
stderr, the stage the run was in and, while operations executed, each host's operation in
flight (it may be half-applied on that host) and how many of its operations never ran, then
exits 3. pyinfra's greenlets are killed by its own gevent handler as before. Only in pyinfra's
CLI (``pyinfra.is_cli``): an import elsewhere (tests, the library) changes nothing.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType
from typing import Any

#: The exit status of an interrupted deploy: "could not run" (docs/exit-codes.md).
EXIT_INTERRUPTED = 3
_STATE: list[Any] = []  # the CLI's State, kept at install (its context is greenlet-local)


def summary(state: Any) -> str:
    """What an interrupt leaves behind, from pyinfra's State: the stage, each host's
    operation in flight and the count of its operations not run."""
    if state is None or not getattr(state, "initialised", False):
        return "interrupted before the inventory was loaded: nothing was changed"
    stage = getattr(getattr(state, "current_stage", None), "name", "?").lower()
    if not getattr(state, "is_executing", False):
        return (f"interrupted while pyinfra was in its {stage} stage, before any operation "
                "executed: nothing was changed")
    parts = []
    for host in state.inventory:
        total = len(state.ops.get(host, {}))
        done = state.results[host].ops if host in state.results else 0
        op_hash = getattr(host, "executing_op_hash", None)
        if op_hash:
            names = ", ".join(sorted(state.get_op_meta(op_hash).names)) or op_hash
            parts.append(f"{host.name}: '{names}' was running (it may be half-applied), "
                         f"{max(total - done - 1, 0)} of {total} operations not run")
        elif done < total:
            parts.append(f"{host.name}: {total - done} of {total} operations not run")
    if not parts:
        return "interrupted after every operation ran"
    return ("interrupted while operations executed; left half-done: " + "; ".join(parts)
            + ". Rerun the same command: the roles converge")


def _handler(signum: int, frame: FrameType | None) -> None:
    state = _STATE[0] if _STATE else None
    try:
        text = summary(state)
    except Exception as exc:  # the message must never stop the exit
        text = f"interrupted (the run's state could not be read: {type(exc).__name__})"
    sys.stderr.write(f"nodegate: error: {text} (exit {EXIT_INTERRUPTED})\n")
    sys.stderr.flush()
    sys.exit(EXIT_INTERRUPTED)


def install() -> bool:
    """Take over SIGINT in pyinfra's CLI; True when installed."""
    import pyinfra
    from pyinfra.context import ctx_state

    if not getattr(pyinfra, "is_cli", False):
        return False
    _STATE[:] = [ctx_state.get()]  # type: ignore[no-untyped-call]
    signal.signal(signal.SIGINT, _handler)
    return True


__all__ = ["EXIT_INTERRUPTED", "install", "summary"]
