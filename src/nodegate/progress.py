"""Progress of long work: one live status line on a terminal, plain stamped lines in logs.

Why two renderers: an operator at a console wants a line that moves (phase, elapsed of
expected, every rank's step) without scrolling hundreds of lines; cron, journald and CI logs
want a few timestamped lines and no control characters. ``for_stream`` picks by ``isatty``.
Light on purpose (no torch, no third-party package): the cron path imports it.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TextIO, runtime_checkable

#: Width of the bar in the terminal status line, in characters.
BAR_WIDTH = 24


@dataclass(frozen=True)
class Beat:
    """Where a long phase stands: sent every ``Progress.beat_s`` seconds while it runs."""

    phase: str
    elapsed_s: float
    expected_s: float
    steps: tuple[int, ...]  # each rank's last reported step

    @property
    def fraction(self) -> float:
        """Elapsed over expected, capped at 1 (a phase may run past its estimate)."""
        return min(1.0, self.elapsed_s / self.expected_s) if self.expected_s > 0 else 1.0

    def steps_text(self) -> str:
        if not self.steps:
            return "no ranks"
        low, high = min(self.steps), max(self.steps)
        spread = f"{low}" if low == high else f"{low}-{high}"
        return f"{len(self.steps)} rank(s) at step {spread}"


@runtime_checkable
class Progress(Protocol):
    """What long work reports to: free-form lines and periodic beats of the running phase."""

    beat_s: float

    def line(self, message: str) -> None: ...

    def beat(self, beat: Beat) -> None: ...

    def clear(self) -> None:
        """Drop the live status: its phase is over (or all work is)."""


def _seconds(value: float) -> str:
    """An estimate as people read it: tenths below ten seconds, whole seconds above."""
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


def _stamp() -> str:
    return time.strftime("%H:%M:%S")


class PlainProgress:
    """Timestamped lines, a beat every ``beat_s`` seconds: what a log file should hold."""

    def __init__(self, stream: TextIO, beat_s: float = 10.0) -> None:
        self.stream = stream
        self.beat_s = beat_s

    def line(self, message: str) -> None:
        print(f"[{_stamp()}] {message}", file=self.stream, flush=True)

    def beat(self, beat: Beat) -> None:
        self.line(f"{beat.phase}: {beat.elapsed_s:.0f}/{_seconds(beat.expected_s)} s, "
                  f"{beat.steps_text()}, steps per rank {list(beat.steps)}")

    def clear(self) -> None:
        return None


class TerminalProgress:
    """A status line redrawn in place (carriage return, erase line); messages scroll above it."""

    CLEAR = "\r\x1b[2K"

    def __init__(self, stream: TextIO, beat_s: float = 0.5, width: int | None = None) -> None:
        self.stream = stream
        self.beat_s = beat_s
        self.width = width
        self._status = ""

    def _columns(self) -> int:
        return self.width or shutil.get_terminal_size((100, 24)).columns

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()

    def line(self, message: str) -> None:
        self._write(f"{self.CLEAR}[{_stamp()}] {message}\n")
        if self._status:
            self._write(self._status)

    def beat(self, beat: Beat) -> None:
        filled = round(beat.fraction * BAR_WIDTH)
        bar = "#" * filled + "." * (BAR_WIDTH - filled)
        late = "  (past estimate)" if beat.elapsed_s > beat.expected_s > 0 else ""
        text = (f"{beat.phase} [{bar}] {beat.elapsed_s:5.1f}/{_seconds(beat.expected_s)} s  "
                f"{beat.steps_text()}{late}")
        self._status = self.CLEAR + text[: max(10, self._columns() - 1)]
        self._write(self._status)

    def clear(self) -> None:
        if self._status:
            self._write(self.CLEAR)
            self._status = ""


class CallbackProgress:
    """Adapts a plain ``print``-like callable (scripts, older callers) to ``Progress``."""

    def __init__(self, say: Callable[[str], None], beat_s: float = 2.0) -> None:
        self.say = say
        self.beat_s = beat_s

    def line(self, message: str) -> None:
        self.say(message)

    def beat(self, beat: Beat) -> None:
        self.say(f"{beat.phase} progress per rank {list(beat.steps)}")

    def clear(self) -> None:
        return None


class SilentProgress:
    beat_s = 5.0

    def line(self, message: str) -> None:
        return None

    def beat(self, beat: Beat) -> None:
        return None

    def clear(self) -> None:
        return None


def for_stream(stream: TextIO) -> Progress:
    """A live line where a person watches a terminal, plain lines everywhere else."""
    interactive = bool(getattr(stream, "isatty", lambda: False)())
    if interactive and os.environ.get("TERM", "") not in ("", "dumb"):
        return TerminalProgress(stream)
    return PlainProgress(stream)


def adapt(progress: Progress | Callable[[str], None] | None) -> Progress:
    """Accept a ``Progress``, a callable taking one line, or None (silence)."""
    if progress is None:
        return SilentProgress()
    if isinstance(progress, Progress):
        return progress
    return CallbackProgress(progress)
