"""Progress of long phases: a live line on a terminal, plain stamped lines in logs."""

from __future__ import annotations

import io
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nodegate.progress import (
    Beat,
    CallbackProgress,
    PlainProgress,
    SilentProgress,
    TerminalProgress,
    adapt,
    for_stream,
)
from tests.conftest import ROOT

CONTROL = re.compile(r"[\r\x1b]")


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


def beat(elapsed: float, expected: float = 10.0, steps: tuple[int, ...] = (3, 5)) -> Beat:
    return Beat("load: gemm", elapsed, expected, steps)


def test_terminal_redraws_one_line_and_keeps_messages_above_it() -> None:
    out = FakeTty()
    progress = TerminalProgress(out, width=120)
    progress.beat(beat(5.0))
    progress.line("load: memory on 2 worker(s)")
    progress.beat(beat(10.0))
    progress.clear()
    text = out.getvalue()
    first, message, redraw, full, cleared = text.split(TerminalProgress.CLEAR)[1:]
    assert first.startswith("load: gemm [" + "#" * 12 + "." * 12 + "]")
    assert "2 rank(s) at step 3-5" in first
    assert re.fullmatch(r"\[\d\d:\d\d:\d\d\] load: memory on 2 worker\(s\)\n", message)
    assert redraw == first  # the status line comes back under the message
    assert "[" + "#" * 24 + "]" in full
    assert cleared == ""  # clear() leaves an empty line, not a stale bar
    assert "\n" not in first + full  # the bar never scrolls the terminal


def test_terminal_line_is_cut_to_the_terminal_width_and_says_when_late() -> None:
    out = FakeTty()
    progress = TerminalProgress(out, width=40)
    progress.beat(beat(30.0, steps=tuple(range(8))))
    status = out.getvalue().split(TerminalProgress.CLEAR)[-1]
    assert len(status) == 39
    wide = FakeTty()
    TerminalProgress(wide, width=200).beat(beat(30.0))
    assert "(past estimate)" in wide.getvalue()


def test_plain_lines_have_no_control_characters() -> None:
    out = io.StringIO()
    progress = PlainProgress(out)
    progress.line("quick checks: gpu,log")
    progress.beat(beat(4.2, steps=(7, 7)))
    progress.clear()
    lines = out.getvalue().splitlines()
    assert not CONTROL.search(out.getvalue())
    assert lines[1].endswith("load: gemm: 4/10 s, 2 rank(s) at step 7, steps per rank [7, 7]")
    assert all(re.match(r"\[\d\d:\d\d:\d\d\] ", line) for line in lines)


@pytest.mark.parametrize(("tty", "term", "kind"), [
    (True, "xterm-256color", TerminalProgress),
    (True, "dumb", PlainProgress),
    (True, "", PlainProgress),
    (False, "xterm", PlainProgress),
])
def test_for_stream_picks_by_tty_and_term(monkeypatch: pytest.MonkeyPatch, tty: bool,
                                          term: str, kind: type) -> None:
    monkeypatch.setenv("TERM", term)
    stream = FakeTty() if tty else io.StringIO()
    assert isinstance(for_stream(stream), kind)


def test_adapt_takes_a_progress_a_callable_or_nothing() -> None:
    seen: list[str] = []
    wrapped = adapt(seen.append)
    assert isinstance(wrapped, CallbackProgress)
    wrapped.line("hello")
    wrapped.beat(beat(1.0, steps=(1, 2)))
    assert seen == ["hello", "load: gemm progress per rank [1, 2]"]
    plain = PlainProgress(io.StringIO())
    assert adapt(plain) is plain
    assert isinstance(adapt(None), SilentProgress)


def test_beat_fraction_and_steps_text_edges() -> None:
    assert Beat("x", 5, 0, ()).fraction == 1.0
    assert Beat("x", 1, 4, ()).fraction == 0.25
    assert Beat("x", 1, 4, ()).steps_text() == "no ranks"


@pytest.mark.slow
def test_validate_on_a_terminal_draws_the_live_line_and_in_a_pipe_does_not(
        tmp_path: Path) -> None:
    """``nodegate validate`` as an operator runs it: stderr a real pseudo-terminal, then a pipe."""
    pytest.importorskip("torch")
    args = [sys.executable, "-m", "nodegate.cli", "sim", "run", "h100-hgx", "--",
            sys.executable, "-m", "nodegate.cli", "validate", "--level", "standard",
            "--checks", "load", "--profile", "sim-h100-hgx", "--duration-scale", "0.02",
            "--workers", "2", "--report-dir", str(tmp_path / "r"),
            "--textfile-dir", str(tmp_path / "t")]
    env = {**os.environ, "TERM": "xterm", "PATH": f"{Path(sys.executable).parent}:"
           f"{os.environ.get('PATH', '')}"}
    master, slave = pty.openpty()
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=slave, env=env, cwd=ROOT)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: every writer closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert proc.wait(timeout=300) in (0, 1)
    screen = b"".join(chunks).decode(errors="replace")
    assert "\x1b[2Kload: gemm [" in screen
    assert "2 rank(s) at step" in screen
    piped = subprocess.run(args, capture_output=True, text=True, env=env, cwd=ROOT,
                           timeout=300, check=False)
    assert piped.returncode in (0, 1)
    assert "load: gemm done in" in piped.stderr
    assert not CONTROL.search(piped.stderr)
