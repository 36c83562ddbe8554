"""The one exclusive file lock: the battery's (one run per node), the lab's (one ``up``/``down``
per instance) and the md rehearsal VM's (one user per VM directory) are all this.

``flock(2)`` on a file opened for the lock: the kernel drops it when the holder dies, so a
crashed run never leaves a stale lock behind. The holder's pid is written into the file so a
refused caller can say who holds it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from nodegate.errors import CannotRunError


class LockHeldError(CannotRunError):
    """Another process still holds the lock (after any wait): exit 3, as every
    CannotRunError. Its own class so a caller can tell "busy" from "cannot create"."""

    def __init__(self, message: str, *, holder: str) -> None:
        super().__init__(message)
        self.holder = holder


@contextlib.contextmanager
def exclusive(path: Path, *, busy: Callable[[str], str], what: str = "lock", hint: str = "",
              wait_s: float = 0.0, poll_s: float = 0.5, mode: int = 0o600,
              on_wait: Callable[[], None] | None = None) -> Iterator[int]:
    """Hold ``path`` exclusively for the ``with`` block (which gets the lock's descriptor),
    waiting up to ``wait_s`` for it.

    ``busy(holder_pid)`` words the LockHeldError when the lock stays held; ``on_wait`` is
    called once when the first try finds it held (to tell a waiting operator). A lock file
    that cannot be created is a CannotRunError naming ``what``, the path and ``hint``.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NONBLOCK, mode)
    except OSError as exc:
        raise CannotRunError(f"cannot create the {what} {path}: "
                             f"{exc.strerror or exc}{hint}") from None
    try:
        mode_now = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode_now):  # a FIFO or device where the lock belongs: not ours
            from nodegate.fileio import describe_mode

            raise CannotRunError(f"cannot use the {what} {path}: it is "
                                 f"{describe_mode(mode_now)}, not a regular file{hint}")
        _acquire(fd, wait_s=wait_s, poll_s=poll_s, busy=busy, on_wait=on_wait)
        _note_holder(fd, f"{os.getpid()}\n".encode())
        try:
            yield fd
        finally:
            _note_holder(fd, b"")
    finally:
        os.close(fd)  # closing releases the flock


def _note_holder(fd: int, data: bytes) -> None:
    """Write the holder's pid into the lock, best effort: the flock is the lock, the pid
    only names the holder to a refused caller (who then reads "?"). A full filesystem must
    not end a run that holds the lock (a judged FAIL would become "could not run")."""
    try:
        os.ftruncate(fd, 0)
        if data:
            os.pwrite(fd, data, 0)
    except OSError:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)


def _acquire(fd: int, *, wait_s: float, poll_s: float, busy: Callable[[str], str],
             on_wait: Callable[[], None] | None) -> None:
    deadline = time.monotonic() + wait_s
    told = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.lseek(fd, 0, os.SEEK_SET)
                holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
                raise LockHeldError(busy(holder), holder=holder) from None
            if on_wait is not None and not told:
                on_wait()
                told = True
            time.sleep(poll_s)
