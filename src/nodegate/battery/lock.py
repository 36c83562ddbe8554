"""A non-blocking exclusive lock so two battery runs never overlap on one node.

cron may start a health check while the previous one (or an acceptance run) still holds the
GPUs; the second run must exit at once with a clear message rather than queue up.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType

from nodegate.errors import CannotRunError


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
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or default_lock_path()
        self._fd: int | None = None

    def __enter__(self) -> BatteryLock:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise CannotRunError(f"cannot create the battery lock {self.path}: "
                                 f"{exc.strerror or exc} (set NODEGATE_LOCK_FILE to a writable "
                                 "path)") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise CannotRunError(
                f"another nodegate battery run holds {self.path} (pid {holder}); not starting"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
