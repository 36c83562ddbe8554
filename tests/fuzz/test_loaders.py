"""Hostile YAML and hostile files through the profile and site loaders and the one reader.

Whatever the text (alias bombs of any shape, merge keys, self-references, deep nesting,
numbers of thousands of digits, non-ASCII digits, bytes that are not UTF-8) and whatever has
the name (a FIFO, a directory, a link), a loader answers with its value or a ConfigError
(exit 2), never another exception, and in bounded time.
"""

from __future__ import annotations

import itertools
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from nodegate.bounds import ascii_float, ascii_int, parse_number  # noqa: E402
from nodegate.errors import ConfigError  # noqa: E402
from nodegate.fileio import LIMITS, read_bytes, read_text  # noqa: E402
from nodegate.profiles.loader import check_files  # noqa: E402
from nodegate.site.loader import load_site  # noqa: E402
from nodegate.yamlio import load_yaml_text  # noqa: E402

pytestmark = pytest.mark.fuzz

#: Seconds one example may take: a bomb that got through would take minutes.
BOUND_S = 10.0
PROFILE_HEAD = "schema: nodegate.profile/1\nlayer: profile\nextends: [gpu/h100-sxm5-80gb]\n"
SITE_HEAD = "schema: nodegate.site/1\nname: t\nhosts:\n  n1:\n    address: 10.0.0.1\n"
_names = itertools.count()


def _bomb(levels: int, width: int, merge: bool) -> str:
    """Nested aliases (or merge keys) ``levels`` deep, ``width`` wide."""
    if merge:
        lines = ["a0: &a0 {k0: 1}"]
        for i in range(1, levels + 1):
            refs = ",".join([f"*a{i - 1}"] * width)
            lines.append(f"a{i}: &a{i} {{<<: [{refs}], z{i}: 1}}")
    else:
        lines = ["a0: &a0 [x, x]"]
        for i in range(1, levels + 1):
            lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


_digits = st.sampled_from(["0", "7", "\u0661", "\u0662", "\u06f3", "\uff11", "\u00b2", "_"])
_scalars = st.one_of(
    st.integers(min_value=1, max_value=6000).map(lambda n: "9" * n),
    st.lists(_digits, min_size=1, max_size=12).map("".join),
    st.sampled_from([".nan", ".inf", "-.inf", "0x1F", "0o17", "190:20:30", "1e999", "~", "null",
                     "!!binary aGk=", "!!python/object:os.system x", "!!set {a}", "&x 1"]),
    st.text(max_size=30),
)


@st.composite
def hostile_yaml(draw: st.DrawFn) -> str:
    """Bombs, self-references, deep nesting, long numbers, odd tags and random text."""
    kind = draw(st.sampled_from(["bomb", "self", "deep", "scalar", "text", "mix"]))
    if kind == "bomb":
        return _bomb(draw(st.integers(1, 12)), draw(st.integers(1, 12)), draw(st.booleans()))
    if kind == "self":
        return draw(st.sampled_from(["x: &a [*a]\n", "x: &a {k: *a}\n", "x: &a {<<: *a}\n",
                                     "*a\n", "x: &a 1\ny: &a 2\n"]))
    if kind == "deep":
        depth = draw(st.integers(1, 400))
        opener, closer = draw(st.sampled_from([("[", "]"), ("{a: ", "}")]))
        return "x: " + opener * depth + "1" + closer * depth + "\n"
    if kind == "scalar":
        return f"x: {draw(_scalars)}\ny: [{draw(_scalars)}, {draw(_scalars)}]\n"
    if kind == "text":
        return draw(st.text(alphabet=st.sampled_from(list("&*<:[]{}-,!|>'\"#%@`\n a1?")),
                            max_size=200))
    return "\n".join(draw(st.lists(hostile_yaml(), min_size=1, max_size=3)))


@pytest.fixture(scope="module")
def folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="nodegate-fuzz-loaders-") as name:
        yield Path(name)


def _timed_config_error(call: object, *args: object) -> None:
    """Run ``call(*args)``: its value or a ConfigError, nothing else, in bounded time."""
    started = time.monotonic()
    try:
        call(*args)  # type: ignore[operator]
    except ConfigError as exc:
        assert str(exc)
    assert time.monotonic() - started < BOUND_S


@given(text=hostile_yaml())
def test_yaml_text_is_a_value_or_config_error(text: str) -> None:
    _timed_config_error(lambda: load_yaml_text(text, source="fuzz.yaml"))


@given(text=hostile_yaml())
def test_profile_check_is_ok_or_config_error(folder: Path, text: str) -> None:
    path = folder / f"p{next(_names)}.yaml"  # a fresh name: layers are cached by path
    path.write_text(PROFILE_HEAD + text, encoding="utf-8")
    _timed_config_error(check_files, [path])


@given(text=hostile_yaml(), indent=st.booleans())
def test_site_load_is_a_site_or_config_error(folder: Path, text: str, indent: bool) -> None:
    path = folder / f"s{next(_names)}.yaml"
    body = "".join(f"    {line}\n" for line in text.splitlines()) if indent else text
    path.write_text(SITE_HEAD + body, encoding="utf-8")
    _timed_config_error(load_site, str(path))


@given(data=st.binary(max_size=300), kind=st.sampled_from(sorted(LIMITS)),
       limit=st.integers(0, 400),
       what=st.sampled_from(["file", "fifo", "dir", "link-to-file", "link-to-fifo",
                             "broken-link", "missing"]))
def test_the_reader_returns_the_file_or_names_it(folder: Path, data: bytes, kind: str,
                                                  limit: int, what: str) -> None:
    path = folder / f"r{next(_names)}"
    target = folder / f"t{next(_names)}"
    if what in ("file", "link-to-file"):
        target.write_bytes(data)
    elif what in ("fifo", "link-to-fifo"):
        os.mkfifo(target)
    elif what == "dir":
        target.mkdir()
    if what.startswith("link") or what == "broken-link":
        os.symlink(target, path)
    elif what != "missing":
        target.rename(path)
    started = time.monotonic()
    try:
        text = read_text(path, kind=kind, limit=limit)
    except ConfigError as exc:
        assert exc.file == str(path)
        regular = what in ("file", "link-to-file")
        assert not regular or len(data) > limit or "UTF-8" in exc.message, exc.message
    else:
        assert what in ("file", "link-to-file")
        assert text.encode("utf-8") == data
        assert read_bytes(path, kind=kind) == data[: LIMITS[kind]]
    assert time.monotonic() - started < BOUND_S


@given(text=st.one_of(st.text(max_size=80), _scalars))
def test_numbers_from_text_are_ascii_bounded_and_finite(text: str) -> None:
    for kind in (int, float):
        try:
            value = parse_number(text, kind, low=-1e9, high=1e9, key="--n")
        except ConfigError as exc:
            assert exc.key == "--n"
        else:
            assert text.isascii() and len(text) <= 64
            assert -1e9 <= value <= 1e9
    for convert in (ascii_int, ascii_float):
        try:
            convert(text)
        except ValueError:
            continue
        assert text.isascii() and len(text) <= 64
