"""``--help`` is right on its own: every command, subcommand, option and argument says what
it is, every default is shown, and the help names exactly the check groups and levels the
code has (taken from the check registry and the vocabulary, never typed here)."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest

from nodegate import cli
from nodegate.battery.registry import groups_at
from nodegate.vocabulary import ALL_GROUPS, LEVELS, QUICK_GROUPS, Level

#: Actions whose default is implied by the flag itself.
FLAGS = (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse._HelpAction,
         argparse._VersionAction, argparse._CountAction)


def _walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ("nodegate",)
          ) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser, argparse.Action | None]]:
    """Every parser (with None) and every action in it, below the whole parser."""
    yield path, parser, None
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if name in cli.MOVED_COMMANDS:  # a hidden one-line pointer, no command
                    continue
                yield from _walk(sub, (*path, name))
        else:
            yield path, parser, action


def _commands_help(parser: argparse.ArgumentParser) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            out.update({c.dest: c.help for c in action._choices_actions})
    return out


def test_every_command_option_and_argument_is_described_with_its_default() -> None:
    missing = []
    whole = cli.build_parser()
    for path, parser, action in _walk(whole):
        if action is None:
            helps = _commands_help(parser)
            missing += [f"{' '.join(path)} {name}: no help" for name in
                        (n for n, sub in _subparsers(parser) if n not in cli.MOVED_COMMANDS)
                        if not helps.get(name)]
            continue
        if isinstance(action, argparse._HelpAction):
            continue
        name = " ".join(path) + " " + ("/".join(action.option_strings) or action.dest)
        if not action.help or action.help == argparse.SUPPRESS:
            missing.append(f"{name}: no help")
        elif (not isinstance(action, FLAGS) and action.default not in (None, [])
              and "default" not in action.help):
            missing.append(f"{name}: default {action.default!r} not shown")
    assert len(list(_walk(whole))) > 150  # the walk reached every command
    assert not missing, "\n".join(missing)


def _subparsers(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    return [item for action in parser._actions
            if isinstance(action, argparse._SubParsersAction) for item in action.choices.items()]


def _help(command: str) -> str:
    return cli.build_parser([command])._subparsers._group_actions[0].choices[  # type: ignore
        command].format_help()


def _option_help(command: str, option: str) -> str:
    parser = cli.build_parser([command])._subparsers._group_actions[0].choices[  # type: ignore
        command]
    (action,) = [a for a in parser._actions if option in a.option_strings]
    return str(action.help)


def _groups_named(text: str) -> set[str]:
    match = re.search(r"check groups, of ([a-z,]+)", text)
    assert match is not None, text
    return set(match.group(1).split(","))


def test_health_checks_help_names_exactly_the_quick_levels_groups() -> None:
    """What ``health --checks`` accepts is the quick level's groups in the registry."""
    quick = {g.value for g in groups_at(Level.QUICK)}
    assert set(QUICK_GROUPS) == quick
    assert _groups_named(_option_help("health", "--checks")) == quick


def test_validate_checks_help_names_exactly_every_groups_of_its_levels() -> None:
    every = {g.value for level in Level for g in groups_at(level)}
    assert set(ALL_GROUPS) == every
    assert _groups_named(_option_help("validate", "--checks")) == every


def test_validate_level_help_names_every_level_and_its_default() -> None:
    text = _option_help("validate", "--level")
    assert set(re.findall(r"\b(quick|standard|acceptance)\b", text)) == set(LEVELS)
    assert set(LEVELS) == {level.value for level in Level}
    parser = cli.build_parser(["validate"])
    args = parser.parse_args(["validate"])
    assert f"(default {args.level})" in " ".join(_help("validate").split())


def test_gate_help_speaks_of_hold_kinds_and_points_at_the_concepts_page() -> None:
    text = " ".join(_help("gate").split())
    assert "a person's drain is never touched" in text and "docs/concepts.md" in text
    assert "(default health)" in text


def test_power_read_help_shows_the_community_placeholder_through_redaction() -> None:
    """Help goes out through the redacting stdout: the placeholder must survive it."""
    env = {**os.environ, "COLUMNS": "200"}
    proc = subprocess.run([sys.executable, "-m", "nodegate", "power", "read", "--help"],
                          capture_output=True, text=True, timeout=60, check=False, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "snmp://<community>@HOST:PORT" in proc.stdout and "***@" not in proc.stdout


@pytest.mark.parametrize("command", ["health", "validate"])
def test_a_group_the_help_names_is_accepted(command: str) -> None:
    """The help's list and the parser's are the same list: each named group parses."""
    from nodegate.battery.engine import parse_groups

    allowed = QUICK_GROUPS if command == "health" else ALL_GROUPS
    for group in _groups_named(_option_help(command, "--checks")):
        assert parse_groups(group, allowed) == (group,)
