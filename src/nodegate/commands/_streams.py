"""Standard output and error that can fail without changing a command's exit code.

A command's exit code is its verdict (docs/exit-codes.md). Output is a copy of it for a
person or a pipe, and the pipe can go away (``| head``), the disk can fill (``> /dev/full``)
or the descriptor can be closed before the process starts (``>&-``). None of those may turn a
FAIL into 0, nor a PASS into a traceback, nor Python's own exit status 120 (a failed flush at
interpreter exit). ``guarded`` makes that so for everything written through ``sys.stdout``
and ``sys.stderr`` while a command runs:

- the three standard descriptors are made valid first (``/dev/null`` where one is closed), so
  a file the command opens can never take descriptor 1 and receive its output;
- SIGPIPE is ignored, so a write into a closed pipe is an error (EPIPE) and never kills the
  process with 141 whatever disposition it inherited or a library set;
- a write or flush that fails is recorded once per stream, the descriptor is pointed at
  ``/dev/null`` (what Python buffered drains there, so the exit-time flush cannot fail) and
  the command carries on to its verdict.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import signal
import sys
from collections.abc import Iterator
from dataclasses import field
from typing import Any, TextIO

from nodegate import records

_STD_FDS = (0, 1, 2)


@records.record
class Lost:
    """Which standard streams lost output, and why (the first error of each)."""

    errors: dict[str, OSError] = field(default_factory=dict)

    def record(self, name: str, exc: OSError) -> None:
        self.errors.setdefault(name, exc)

    def note(self, name: str) -> str | None:
        """One line for stderr when ``name`` lost output to something other than a reader
        that went away (EPIPE is the reader's choice, ``| head``: nothing to say)."""
        exc = self.errors.get(name)
        if exc is None or exc.errno == errno.EPIPE:
            return None
        return f"{name}: {exc.strerror or exc}; output lost (the exit code is unchanged)"


class GuardedStream(io.TextIOBase):
    """A text stream whose writes never raise: the first failure sends its descriptor to
    ``/dev/null`` and is recorded in ``lost``; later writes go there too."""

    def __init__(self, stream: TextIO, name: str, lost: Lost) -> None:
        super().__init__()
        self._stream = stream
        self._name = name
        self._lost = lost

    def _failed(self, exc: OSError | ValueError) -> None:
        if not isinstance(exc, OSError):  # a closed file object: nothing left to drain
            exc = OSError(errno.EBADF, os.strerror(errno.EBADF))
        self._lost.record(self._name, exc)
        with contextlib.suppress(OSError, ValueError, io.UnsupportedOperation):
            _to_devnull(self._stream.fileno())

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except (OSError, ValueError) as exc:
            self._failed(exc)
        with contextlib.suppress(OSError, ValueError):  # now /dev/null: drain the buffer there
            self._stream.flush()
        return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except (OSError, ValueError) as exc:
            self._failed(exc)
            with contextlib.suppress(OSError, ValueError):
                self._stream.flush()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        try:
            return self._stream.isatty()
        except (OSError, ValueError):
            return False

    def fileno(self) -> int:
        return self._stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return str(getattr(self._stream, "encoding", "utf-8"))

    def __getattr__(self, name: str) -> Any:  # buffer, errors, ...: the stream's own
        return getattr(self._stream, name)


def _to_devnull(fd: int) -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        if devnull != fd:
            os.dup2(devnull, fd)
    finally:
        if devnull != fd:
            os.close(devnull)


def _valid_std_fds() -> set[int]:
    """Open ``/dev/null`` on every standard descriptor that is closed; return those."""
    closed = set()
    for fd in _STD_FDS:
        try:
            os.fstat(fd)
        except OSError:
            closed.add(fd)
    for fd in sorted(closed):
        opened = os.open(os.devnull, os.O_RDWR)
        if opened != fd:  # the lowest free number is fd itself unless a lower one is closed
            os.dup2(opened, fd)
            os.close(opened)
    return closed


def _ignore_sigpipe() -> None:
    with contextlib.suppress(AttributeError, ValueError, OSError):  # no SIGPIPE / not main
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)


@contextlib.contextmanager
def guarded() -> Iterator[Lost]:
    """Run the body with guarded ``sys.stdout``/``sys.stderr``; restore them after, flushed.

    A stream that was closed before the process started (Python sets it to None) counts as
    lost from the start, with EBADF."""
    lost = Lost()
    closed = _valid_std_fds()
    _ignore_sigpipe()
    saved = sys.stdout, sys.stderr
    streams = []
    for name, fd, current in (("stdout", 1, sys.stdout), ("stderr", 2, sys.stderr)):
        if current is None or (fd in closed and _is_fd(current, fd)):
            lost.record(name, OSError(errno.EBADF, "closed before the start"))
        target = current if current is not None else open(  # noqa: SIM115  (lives as long)
            os.devnull, "w", encoding="utf-8")
        streams.append(GuardedStream(target, name, lost))
    sys.stdout, sys.stderr = streams[0], streams[1]
    try:
        yield lost
    finally:
        for stream in streams:
            stream.flush()
        sys.stdout, sys.stderr = saved
        for name, original in (("stdout", saved[0]), ("stderr", saved[1])):
            if original is not None:  # what bypassed the guard is drained now, or dropped
                GuardedStream(original, name, lost).flush()


def _is_fd(stream: TextIO, fd: int) -> bool:
    try:
        return stream.fileno() == fd
    except (OSError, ValueError, io.UnsupportedOperation):
        return False


__all__ = ["GuardedStream", "Lost", "guarded"]
