"""A non-blocking exclusive lock so two battery runs never overlap on one node.

cron may start a health check while the previous one (or an acceptance run) still holds the
GPUs; the second run must exit at once with a clear message rather than queue up.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from types import TracebackType

from nodegate import flock


def default_lock_path() -> Path:
    env = os.environ.get("NODEGATE_LOCK_FILE")
    if env:
        return Path(env)
    run = Path("/run")
    if os.geteuid() == 0 and run.is_dir():
        return run / "nodegate.lock"
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return Path(runtime or "/tmp") / f"nodegate-{os.geteuid()}.lock"


class BatteryLock:
    """``with BatteryLock():`` — one battery run per node at a time (``nodegate.flock``)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or default_lock_path()
        self._held: contextlib.ExitStack | None = None
        self._fd: int | None = None  # the lock's descriptor while held

    def __enter__(self) -> BatteryLock:
        stack = contextlib.ExitStack()
        self._fd = stack.enter_context(flock.exclusive(
            self.path, what="battery lock", mode=0o644,
            hint=" (set NODEGATE_LOCK_FILE to a writable path)",
            busy=lambda pid: f"another nodegate battery run holds {self.path} (pid {pid}); "
                             "not starting"))
        self._held = stack
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._held is not None:
            self._held.close()
            self._held = None
            self._fd = None
