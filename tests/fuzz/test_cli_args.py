"""Hostile values for every option of every command that takes a number or a path, through
the real parsers in this process (``nodegate.cli.build_parser`` and nodegate-lab's, parsed by
``nodegate.cli.parse`` as ``cli.run`` does), never running a handler: each value is either taken (a finite number; a path as text) or refused with exit 2 and a message naming the option, never a traceback.

The options are found by walking the parsers, so a new command or option is fuzzed too.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from nodegate import cli  # noqa: E402

PATH_WORDS = ("dir", "path", "file", "conf", "bundle", "profile", "config", "cache", "html")


@dataclass(frozen=True)
class Option:
    """One option of one (sub)command: how to reach it and what it takes."""

    prog: str
    words: tuple[str, ...]  # subcommand words before the option
    flag: str
    numeric: bool


def _subparsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def _walk(parser: argparse.ArgumentParser, prog: str,
          words: tuple[str, ...] = ()) -> Iterator[Option]:
    for action in parser._actions:
        flags = [o for o in action.option_strings if o.startswith("--")]
        if not flags or action.nargs == 0 or action.choices is not None:
            continue
        kind = action.type
        numeric = kind in (int, float) or getattr(kind, "__name__", "") in ("int", "float")
        pathlike = kind is Path or any(w in action.dest for w in PATH_WORDS)
        if numeric or pathlike:
            yield Option(prog, words, flags[0], numeric)
    for name, sub in _subparsers(parser):
        if name not in cli.MOVED_COMMANDS:
            yield from _walk(sub, prog, (*words, name))


@functools.cache
def _parser(prog: str) -> argparse.ArgumentParser:
    """One parser per program, reused: argparse keeps no state between parses."""
    if prog == "nodegate":
        return cli.build_parser()
    from nodegate_lab.cli import build_parser

    return build_parser()


OPTIONS = [*_walk(_parser("nodegate"), "nodegate"), *_walk(_parser("nodegate-lab"),
                                                         "nodegate-lab")]
NUMBERS = st.one_of(
    st.sampled_from(["nan", "NaN", "inf", "-inf", "1e309", "-1", "0", "-0", "1e9", "0x10",
                     "1_000", "\uff19", "\u0661\u0662", "9" * 5000, "1." + "9" * 5000, "", " ", "1e-400",
                     "--", "-", "+", "1 2", "\udcff"]),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(min_value=-(10**40), max_value=10**40).map(str),
    st.text(max_size=40).filter(lambda s: "\x00" not in s),
)
#: No NUL byte: execve cannot pass one in an argument, so no command line can hold it.
PATHS = st.one_of(
    st.sampled_from(["", " ", "/dev/null", "/dev/zero", "/proc/self/fd/0",
                     "../" * 300, "x" * 5000, "-", "--", "~", "$HOME", "\udcff"]),
    st.text(max_size=60).filter(lambda s: "\x00" not in s),
)


def _parse(option: Option, value: str) -> tuple[int | None, argparse.Namespace | None, str]:
    """(exit code or None, the namespace when parsed, what argparse printed)."""
    err = io.StringIO()
    argv = [*option.words, f"{option.flag}={value}"]
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            return None, cli.parse(_parser(option.prog), argv), err.getvalue()
        except SystemExit as exc:
            return int(exc.code or 0), None, err.getvalue()


def _check(option: Option, value: str) -> None:
    code, args, text = _parse(option, value)
    if code is None:
        assert args is not None
        # a required positional or option is missing: 2 naming it, never the value's fault
        return
    assert code == 2, (option, value, text)
    assert "Traceback" not in text
    lines = [line for line in text.splitlines() if "error:" in line]
    assert lines, text
    named = option.flag in lines[-1] or "the following arguments are required" in lines[-1]
    assert named, (option, value, text)


def _value_of(option: Option, args: argparse.Namespace) -> object:
    return getattr(args, option.flag.lstrip("-").replace("-", "_"), None)


@pytest.mark.fuzz
@given(option=st.sampled_from([o for o in OPTIONS if o.numeric]), value=NUMBERS)
def test_numeric_options_take_a_finite_number_or_exit_2_naming_the_option(
        option: Option, value: str) -> None:
    code, args, _ = _parse(option, value)
    if code is None:
        assert args is not None
        got = _value_of(option, args)
        assert isinstance(got, (int, float)) and math.isfinite(got), (option, value, got)
        return
    _check(option, value)


@pytest.mark.fuzz
@given(option=st.sampled_from([o for o in OPTIONS if not o.numeric]), value=PATHS)
def test_path_options_take_a_usable_path_or_exit_2_naming_the_option(
        option: Option, value: str) -> None:
    code, args, _ = _parse(option, value)
    if code is None:
        assert args is not None
        assert isinstance(_value_of(option, args), (str, Path)), (option, value)
        return
    _check(option, value)


#: Options whose text the handler reads as a duration (``nodegate.battery.engine``) before any
#: check runs: fuzzed through those converters, the handler never called.
DURATIONS = {"--xid-window": "parse_duration", "--max-age": "parse_duration",
             "--nvml-timeout": "parse_deadline"}


@pytest.mark.fuzz
@given(flag=st.sampled_from(sorted(DURATIONS)),
       value=st.one_of(NUMBERS, NUMBERS.map(lambda v: v + "s"), NUMBERS.map(lambda v: v + "d")))
def test_duration_options_give_a_finite_positive_time_or_a_config_error_naming_them(
        flag: str, value: str) -> None:
    from nodegate.battery import engine
    from nodegate.errors import ConfigError

    convert = getattr(engine, DURATIONS[flag])
    try:
        got = convert(value, key=flag) if DURATIONS[flag] == "parse_duration" else convert(value)
    except ConfigError as exc:
        assert exc.key == flag and exc.exit_code == 2
        return
    boot = got is None and value == "boot" and flag != "--nvml-timeout"
    assert boot or (isinstance(got, float) and math.isfinite(got) and got > 0), (flag, value)


def test_the_walk_finds_the_options_it_fuzzes() -> None:
    flags = {(o.words, o.flag) for o in OPTIONS}
    assert (("health",), "--lock-wait") in flags
    assert (("validate",), "--duration-scale") in flags
    assert (("health",), "--report-dir") in flags
    assert (("power", "read"), "--timeout") in flags
    assert (("up",), "--nodes") in {(o.words, o.flag) for o in OPTIONS
                                     if o.prog == "nodegate-lab"}
