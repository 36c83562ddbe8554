"""``nodegate``'s parser built for one command parses, helps and fails as the whole one does.

``build_parser(argv)`` registers only the command ``argv`` names (the cron health check
should not import and build nine other commands' parsers). These tests hold the registry to
what the modules register, and compare the one-command parser with the whole parser on
command lines that pass, ask for help and fail, byte for byte.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import io
import re
from collections.abc import Sequence
from typing import Any

import pytest

from nodegate import cli


def _registered(module_name: str) -> list[str]:
    parser = argparse.ArgumentParser(prog="nodegate")
    subparsers = parser.add_subparsers(dest="command")
    importlib.import_module(module_name).register(subparsers)
    return list(subparsers.choices)


def _choices(parser: argparse.ArgumentParser) -> list[str]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return list(action.choices)


def test_each_command_is_registered_by_the_module_the_registry_names() -> None:
    assert {name: _registered(module) for name, module in cli.COMMANDS.items()} == {
        name: [name] for name in cli.COMMANDS}
    assert tuple(cli.COMMANDS.values()) == cli.COMMAND_MODULES
    assert _choices(cli.build_parser()) == [*cli.COMMANDS, *cli.MOVED_COMMANDS]


@pytest.mark.parametrize(("argv", "command"), [
    (["health", "--quiet"], "health"), (["--debug", "report", "/tmp"], "report"),
    (["lab", "up"], "lab"), (["--debug", "--debug", "sim", "env", "x"], "sim")])
def test_a_command_line_gets_only_its_command(argv: list[str], command: str) -> None:
    assert _choices(cli.build_parser(argv)) == [command]


@pytest.mark.parametrize("argv", [[], ["--help"], ["-h"], ["bogus"], ["--deb", "health"],
                                  ["--", "health"], ["--debug"], ["-x", "health"]])
def test_a_line_naming_no_command_plainly_gets_the_whole_parser(argv: list[str]) -> None:
    assert _choices(cli.build_parser(argv)) == [*cli.COMMANDS, *cli.MOVED_COMMANDS]


def _outcome(parser: argparse.ArgumentParser, argv: Sequence[str]) -> tuple[Any, ...]:
    """What parsing ``argv`` prints and exits with, or the namespace it yields."""
    out, err = io.StringIO(), io.StringIO()
    code: Any = None
    parsed: dict[str, Any] = {}
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            namespace = parser.parse_args(argv)
        except SystemExit as exc:
            code = exc.code
        else:
            parsed = {key: value for key, value in vars(namespace).items() if key != "func"}
            parsed["func"] = getattr(namespace.func, "__qualname__", None)
    return code, out.getvalue(), err.getvalue(), parsed


#: Every command's help and a bad option, plus lines that pass, lines missing an argument,
#: bad values, the moved command, and lines that name no command at all.
LINES: list[list[str]] = [
    *([name, "--help"] for name in cli.COMMANDS),
    *([name, "--no-such-option"] for name in cli.COMMANDS),
    *([name] for name in cli.COMMANDS),
    ["--debug", "health", "-h"], ["health", "--profile", "xe9680-h100", "--checks", "gpu,log"],
    ["health", "--lock-wait", "-1"], ["health", "--lock-wait", "nan"], ["health", "extra"],
    ["health", "--debug"], ["--debug", "health", "--quiet", "--skip-if-locked"],
    ["validate", "--level", "nope"], ["validate", "--level", "acceptance", "--help"],
    ["profiles", "show"], ["profiles", "show", "--help"], ["profiles", "nope"],
    ["sim", "run", "--help"], ["sim", "env"], ["power", "read", "--help"], ["power", "poll", "-h"],
    ["gate", "--help"], ["report", "/tmp", "--format", "nope"], ["version", "extra"],
    ["lab"], ["lab", "up", "--help"], ["--debug", "lab", "-h"],
    [], ["--help"], ["-h"], ["bogus"], ["bogus", "--help"], ["--debug"], ["--deb", "health"],
    ["--", "health"], ["-x"], ["--debug", "bogus"], ["Health"], ["helth", "--quiet"],
]


@pytest.mark.parametrize("argv", LINES, ids=lambda argv: " ".join(argv) or "(nothing)")
def test_one_command_parser_answers_as_the_whole_parser(
        argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    whole = _outcome(cli.build_parser(), argv)
    assert _outcome(cli.build_parser(argv), argv) == whole


def test_the_whole_help_still_lists_every_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    code, out, err, _ = _outcome(cli.build_parser(["--help"]), ["--help"])
    assert (code, err) == (0, "")
    assert out.startswith("usage: nodegate [-h] [--debug] COMMAND ...")
    for name in cli.COMMANDS:
        assert re.search(rf"^    {name}\s", out, re.M), name
    assert "\n    lab" not in out  # the moved command stays out of the help


def test_health_pauses_the_collector_only_while_it_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    from nodegate.commands import health

    seen: list[bool] = []

    def fake_run(args: argparse.Namespace) -> int:
        seen.append(gc.isenabled())
        if args.fail:
            raise RuntimeError("boom")
        return 0

    monkeypatch.setattr(health, "_run", fake_run)
    assert gc.isenabled()
    assert health.run(argparse.Namespace(fail=False)) == 0
    with pytest.raises(RuntimeError):
        health.run(argparse.Namespace(fail=True))
    assert seen == [False, False]
    assert gc.isenabled()
