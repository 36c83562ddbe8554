"""One scheduler client process (``srun``), bounded in time and in memory.

``subprocess.run(timeout=...)`` kills only the process it started and then waits for its
pipes: an ``srun`` whose local child ignores SIGTERM, or that left a child holding stdout,
outlived the timeout by as long as that child lived, and ``communicate`` kept every byte it
printed (120 MB of output was 489 MB of memory). So the process starts in its own process
group (session), the whole group gets SIGTERM at the deadline and SIGKILL ``grace_s`` later
(and SIGKILL once the leader has exited, so no child of it outlives the call), and each
stream is read in chunks of which at most ``max_output`` bytes are kept; past that the
group is stopped the same way and the run says how much it printed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

#: Bytes kept of each stream: a pair's two reports and srun's lines fit many times over.
MAX_OUTPUT = 4 * 1024 * 1024
#: Seconds between SIGTERM (srun cancels its step) and SIGKILL of the process group.
GRACE_S = 5.0
_CHUNK = 64 * 1024


@dataclass(frozen=True)
class Run:
    """One finished (or stopped) client process.

    ``returncode`` None: stopped at its deadline (or for its output); ``over_cap`` the cap
    its output went over (None: within it), the process group stopped as at a deadline."""

    returncode: int | None
    stdout: str
    stderr: str
    duration_s: float
    over_cap: int | None = None


class _Capped:
    """Reads one stream to its end, keeping at most ``cap`` bytes."""

    def __init__(self, stream: object, cap: int, over: threading.Event) -> None:
        self.data = bytearray()
        self.total = 0
        self._stream, self._cap, self._over = stream, cap, over
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        read = self._stream.read  # type: ignore[attr-defined]
        while chunk := read(_CHUNK):
            self.total += len(chunk)
            room = self._cap - len(self.data)
            if room > 0:
                self.data += chunk[:room]
            if self.total > self._cap:
                self._over.set()  # keep draining: a blocked writer would never exit

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def run_bounded(argv: Sequence[str], timeout_s: float, text: str | None = None, *,
                max_output: int = MAX_OUTPUT, grace_s: float = GRACE_S) -> Run:
    """Run ``argv`` (stdin ``text`` when given) in its own process group; at ``timeout_s``
    or when its output passes ``max_output`` the group gets SIGTERM, then SIGKILL after
    ``grace_s``. Never waits on a pipe past the group's end."""
    started = time.monotonic()
    proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE if text is not None
                            else subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    over = threading.Event()
    readers = [_Capped(proc.stdout, max_output, over), _Capped(proc.stderr, max_output, over)]
    if text is not None:
        threading.Thread(target=_feed, args=(proc, text), daemon=True).start()
    deadline = started + timeout_s
    stopped = False
    while proc.poll() is None:
        if over.is_set() or time.monotonic() >= deadline:
            stopped = True
            _signal_group(proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=grace_s)
            break
        over.wait(min(0.05, max(0.0, deadline - time.monotonic())))
    _signal_group(proc.pid, signal.SIGKILL)  # what is left of the tree: nothing outlives us
    proc.wait()
    for reader in readers:
        reader.thread.join(timeout=grace_s)
    return Run(None if stopped else proc.returncode, readers[0].text(), readers[1].text(),
               time.monotonic() - started, max_output if over.is_set() else None)


def _feed(proc: subprocess.Popen[bytes], text: str) -> None:
    assert proc.stdin is not None
    with contextlib.suppress(OSError):
        proc.stdin.write(text.encode("utf-8"))
        proc.stdin.close()
