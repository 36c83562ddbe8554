"""Whether the node boots systemd, and the state of the units that run nodegate's schedule:
what the agent role reads to choose cron or a timer and to verify the schedule runs."""

from __future__ import annotations

from pyinfra.api.command import QuoteString, StringCommand
from pyinfra.api.facts import FactBase
from typing_extensions import override


class SystemdBooted(FactBase[bool]):
    """True when systemd is the node's init (``/run/systemd/system`` exists: sd_booted(3)).

    ``systemctl`` on PATH is not enough: a chroot or a container started without systemd has
    the binary, and a timer installed there never fires."""

    @override
    def command(self) -> str:
        return "test -d /run/systemd/system && echo yes || echo no"

    @override
    @staticmethod
    def default() -> bool:
        return False

    @override
    def process(self, output: list[str]) -> bool:
        return bool(output) and output[0].strip() == "yes"


class ScheduleState(FactBase[dict[str, str]]):
    """``{unit: "<is-enabled> <is-active>"}`` for ``units`` (``"- -"`` where systemctl cannot
    say), plus ``{"stamp": <the first-run stamp's content>}``: the schedule is in effect only
    when its runner is enabled and active and its first run was seen."""

    @override
    def command(self, units: list[str], stamp: str) -> StringCommand:
        parts: list[str | QuoteString] = []
        for unit in units:
            parts += ["printf", "'%s %s %s\\n'", QuoteString(unit),
                      f'"$(systemctl is-enabled {unit} 2>/dev/null || echo -)"'
                      if _plain(unit) else "-",
                      f'"$(systemctl is-active {unit} 2>/dev/null || echo -)"'
                      if _plain(unit) else "-", ";"]
        parts += ["printf", "'stamp %s\\n'", f'"$(cat {stamp} 2>/dev/null)"'
                  if _plain(stamp) else "''"]
        return StringCommand(*parts)

    @override
    @staticmethod
    def default() -> dict[str, str]:
        return {}

    @override
    def process(self, output: list[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        for line in output:
            key, _, value = line.strip().partition(" ")
            if key:
                out[key] = value.strip()
        return out


def _plain(word: str) -> bool:
    """A unit name or path that needs no quoting (the ones the agent role passes)."""
    return bool(word) and all(c.isalnum() or c in "/._@-" for c in word)
