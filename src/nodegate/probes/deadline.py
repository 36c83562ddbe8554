"""Run a probe in a forked child and give up on it after a deadline.

A wedged NVML call is a C call blocked inside the driver: a thread cannot interrupt it and a
signal handler never runs while it blocks, so a thread with a join timeout would leave the
process (and the battery lock it holds) stuck. A child process can be abandoned: the parent
reads the answer from a pipe until the deadline, then kills the child and moves on. A child
blocked in the kernel (D state) may outlive the kill; it holds no lock (every inherited
descriptor but the pipe is closed at once), so the next cron run is not blocked by it.

The child sends pickled frames: any number of ``("progress", label)`` (what it is reading
now, so a timeout can say where it hung), then one ``("ok", value)`` or ``("raise", exc)``.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import struct
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

try:  # pickle's own C functions without pickle.py, whose import (~1.5 ms of the cron check's
    # start-up) scans its names with a regular expression; the same bytes and objects
    from _pickle import PicklingError, dumps, loads
except ImportError:  # an interpreter without the C accelerator
    from pickle import PicklingError, dumps, loads

T = TypeVar("T")

_HEADER = struct.Struct("!I")
#: After SIGKILL, how long to wait for the child to be reaped before abandoning it.
REAP_WAIT_S = 1.0


class DeadlineExceeded(Exception):
    """The child gave no answer within the deadline; ``last`` is its last progress label."""

    def __init__(self, deadline_s: float, last: str | None, reaped: bool) -> None:
        where = f" (last: {last})" if last else ""
        super().__init__(f"no answer within {deadline_s:g}s{where}")
        self.deadline_s, self.last, self.reaped = deadline_s, last, reaped


class ChildDied(Exception):
    """The child ended without an answer (a crash in the C library, a signal)."""


class Progress:
    """The child's side: report what it is doing, so the parent can name where it hung."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def __call__(self, label: str) -> None:
        _send(self._fd, ("progress", label))


def _send(fd: int, message: tuple[str, Any]) -> None:
    data = dumps(message)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def _die_with_parent(parent: int) -> None:
    """Let the kernel kill this child when its parent dies (``PR_SET_PDEATHSIG``, Linux): a
    ``health`` killed (SIGKILL, SIGTERM) during a hung NVML read leaves no reader behind.
    A parent already gone before the signal was armed is checked for after it."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):  # not Linux: the parent's close() still kills it
        pass
    if os.getppid() != parent:
        os._exit(70)


def _child(fn: Callable[[Progress], T], read_fd: int, write_fd: int, parent: int) -> None:
    """In the child: drop every inherited descriptor but stdio and the pipe, run, answer."""
    code = 0
    try:
        _die_with_parent(parent)
        os.close(read_fd)
        os.closerange(3, write_fd)
        os.closerange(write_fd + 1, 1 << 16)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        try:
            message: tuple[str, Any] = ("ok", fn(Progress(write_fd)))
        except BaseException as exc:  # everything goes back to the parent
            message = ("raise", exc)
        try:
            _send(write_fd, message)
        except (PicklingError, TypeError, AttributeError):
            _send(write_fd, ("raise", ChildDied(f"unpicklable answer: {message[1]!r}")))
    except BaseException:  # never return into the parent's code
        code = 70
    finally:
        os._exit(code)


def call_with_deadline(fn: Callable[[Progress], T], deadline_s: float) -> T:
    """``fn(progress)`` in a forked child; its value, or its exception re-raised here.

    Raises DeadlineExceeded when no answer came within ``deadline_s`` (the child is killed),
    ChildDied when it ended without answering.
    """
    return start_with_deadline(fn, deadline_s).result()


def start_with_deadline(fn: Callable[[Progress], T], deadline_s: float) -> Pending[T]:
    """``fn(progress)`` started in a forked child; ``result()`` waits for its answer.

    The parent may work meanwhile (the cron check decodes earlier reports while the child
    reads NVML): the deadline counts from now, not from ``result()``. Whoever starts one
    must end it: ``result()``, or ``close()`` (idempotent) on the way out of an error.
    """
    read_fd, write_fd = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child, which never returns
        _child(fn, read_fd, write_fd, parent)
    os.close(write_fd)
    return Pending(pid, read_fd, deadline_s)


#: Reads allowed once the deadline has passed: what the child wrote while the parent was
#: busy is still taken (an answer waiting in the pipe is an answer in time), but a child
#: that keeps writing after the deadline cannot keep the parent reading.
LATE_READS = 64


class Pending(Generic[T]):
    """A probe running in a forked child (``start_with_deadline``)."""

    def __init__(self, pid: int, read_fd: int, deadline_s: float) -> None:
        self._pid, self._fd, self._deadline_s = pid, read_fd, deadline_s
        self._end = time.monotonic() + deadline_s
        self._open = True

    def result(self) -> T:
        """The child's value, or its exception re-raised; DeadlineExceeded or ChildDied
        as ``call_with_deadline`` says. The child is reaped (or killed) either way: an
        interruption while waiting (SIGTERM raised as an exception, ^C) kills it too."""
        try:
            return self._result()
        except BaseException:
            if not _reaped(self._pid):
                _kill(self._pid)
            raise

    def _result(self) -> T:
        if not self._open:
            raise RuntimeError("the probe's result was already taken")
        pid = self._pid
        last: str | None = None
        buffer = b""
        late = 0
        try:
            while True:
                while len(buffer) >= _HEADER.size:
                    (size,) = _HEADER.unpack_from(buffer)
                    if len(buffer) < _HEADER.size + size:
                        break
                    kind, payload = loads(buffer[_HEADER.size:_HEADER.size + size])
                    buffer = buffer[_HEADER.size + size:]
                    if kind == "progress":
                        last = str(payload)
                        continue
                    _reap(pid, REAP_WAIT_S)
                    if kind == "raise":
                        raise payload
                    return payload  # type: ignore[no-any-return]
                left = self._end - time.monotonic()
                if left <= 0:
                    late += 1
                if late > LATE_READS or \
                        not select.select([self._fd], [], [], max(left, 0.0))[0]:
                    raise DeadlineExceeded(self._deadline_s, last, reaped=_kill(pid))
                chunk = os.read(self._fd, 1 << 16)
                if not chunk:
                    _reap(pid, REAP_WAIT_S)
                    raise ChildDied(f"the probe process ended without an answer (last: {last})")
                buffer += chunk
        finally:
            self._close_fd()

    def close(self) -> None:
        """Give up on the answer: kill and reap the child, close the pipe (no-op once the
        result was taken)."""
        if self._open:
            self._close_fd()
            _kill(self._pid)

    def _close_fd(self) -> None:
        if self._open:
            self._open = False
            os.close(self._fd)


def _kill(pid: int) -> bool:
    """SIGKILL the child; True when it was reaped (a child stuck in the kernel may not be)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    return _reap(pid, REAP_WAIT_S)


def _reap(pid: int, wait_s: float) -> bool:
    """Wait up to ``wait_s`` for the child to end and reap it; False when it did not end.

    Where the kernel offers a pidfd, the wait ends the moment the child does: the child
    answers just before it exits, so a fixed poll slept ~5 ms of every cron run here."""
    if _reaped(pid):
        return True
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # Python or kernel without pidfds: poll
        return _poll_reap(pid, wait_s)
    try:
        select.select([fd], [], [], wait_s)  # readable once the child has exited
    finally:
        os.close(fd)
    return _reaped(pid)


def _reaped(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return bool(done)


def _poll_reap(pid: int, wait_s: float) -> bool:
    end = time.monotonic() + wait_s
    while True:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return True
        if done:
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(0.005)
