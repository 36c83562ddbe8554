"""An exclusive lock so two battery runs never overlap on one node.

cron may start a health check while the previous one (or an acceptance run) still holds the
GPUs; the second run must exit at once with a clear message rather than queue up. A caller
that must not give up at once (Slurm's prolog/epilog: ``nodegate health --lock-wait``) waits
a bounded time instead.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from nodegate import flock

#: The longest bounded wait (``nodegate health --lock-wait``, the slurm_node role's
#: ``slurm_node_prolog_lock_wait``): a prolog waiting longer holds its job for nothing.
MAX_LOCK_WAIT_S = 3600


def default_lock_path() -> Path:
    from nodegate.paths import env_path

    env = env_path("NODEGATE_LOCK_FILE")
    if env is not None:
        return env
    run = Path("/run")
    if os.geteuid() == 0 and run.is_dir():
        return run / "nodegate.lock"
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return Path(runtime or "/tmp") / f"nodegate-{os.geteuid()}.lock"


class BatteryLock:
    """``with BatteryLock():`` — one battery run per node at a time (``nodegate.flock``).

    Held by another run, it raises ``flock.LockHeldError`` (exit 3) at once, or after up to
    ``wait_s`` seconds of waiting (``on_wait`` is called once when the wait begins)."""

    def __init__(self, path: Path | None = None, *, wait_s: float = 0.0,
                 on_wait: Callable[[], None] | None = None) -> None:
        self.path = path or default_lock_path()
        self.wait_s = wait_s
        self._on_wait = on_wait
        self._held: contextlib.ExitStack | None = None
        self._fd: int | None = None  # the lock's descriptor while held

    def __enter__(self) -> BatteryLock:
        stack = contextlib.ExitStack()
        waited = f" after waiting {self.wait_s:g} s" if self.wait_s > 0 else ""
        self._fd = stack.enter_context(flock.exclusive(
            self.path, what="battery lock", mode=0o644, wait_s=self.wait_s,
            on_wait=self._on_wait, hint=" (set NODEGATE_LOCK_FILE to a writable path)",
            busy=lambda pid: f"another nodegate battery run holds {self.path} (pid {pid})"
                             f"{waited}; not starting"))
        self._held = stack
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._held is not None:
            self._held.close()
            self._held = None
            self._fd = None
