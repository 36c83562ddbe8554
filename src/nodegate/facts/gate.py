"""The node's own verdict: ``nodegate health --json`` run on the node, read as a fact."""

from __future__ import annotations

import json
from typing import Any, TypedDict

from pyinfra.api.command import QuoteString, StringCommand
from pyinfra.api.facts import FactBase
from typing_extensions import override

_EXIT = "NODEGATE_EXIT="


class GateResult(TypedDict):
    exit: int
    report: dict[str, Any] | None


class GateReport(FactBase[GateResult]):
    """Exit code and JSON report of ``nodegate health`` (exit codes: docs/exit-codes.md)."""

    @override
    def command(self, nodegate: str, profile: str, extra_args: list[str]) -> StringCommand:
        return StringCommand(
            QuoteString(nodegate), "health", "--profile", QuoteString(profile), "--json",
            "--color", "never",
            *[QuoteString(a) for a in extra_args],
            "2>/dev/null;", "echo", f"{_EXIT}$?",
        )

    @override
    @staticmethod
    def default() -> GateResult:
        return {"exit": 3, "report": None}

    @override
    def process(self, output: list[str]) -> GateResult:
        code = 3
        body: list[str] = []
        for line in output:
            if line.startswith(_EXIT):
                code = int(line[len(_EXIT):] or 3)
            else:
                body.append(line)
        try:
            report = json.loads("\n".join(body)) if body else None
        except ValueError:
            report = None
        return {"exit": code, "report": report if isinstance(report, dict) else None}
