"""The node's own verdict (``nodegate health|validate --json``) and the Slurm join decision
(``nodegate gate --mode join --json``), run on the node at execution time, read as facts."""

from __future__ import annotations

import json
from typing import Any, TypedDict

from pyinfra.api.command import QuoteString, StringCommand
from pyinfra.api.facts import FactBase
from typing_extensions import override

_EXIT = "NODEGATE_EXIT="


def _exit_and_json(output: list[str]) -> tuple[int, dict[str, Any] | None]:
    """Split a command's stdout into its JSON document and the exit code echoed after it."""
    code, body = 3, []
    for line in output:
        if line.startswith(_EXIT):
            code = int(line[len(_EXIT):] or 3)
        else:
            body.append(line)
    try:
        data = json.loads("\n".join(body)) if body else None
    except ValueError:
        data = None
    return code, data if isinstance(data, dict) else None


class GateResult(TypedDict):
    exit: int
    report: dict[str, Any] | None


class GateReport(FactBase[GateResult]):
    """Exit code and JSON report of ``nodegate health`` (exit codes: docs/exit-codes.md)."""

    @override
    def command(self, nodegate: str, profile: str, extra_args: list[str],
                subcommand: str = "health") -> StringCommand:
        return StringCommand(
            QuoteString(nodegate), QuoteString(subcommand), "--profile", QuoteString(profile),
            "--json",
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
        code, report = _exit_and_json(output)
        return {"exit": code, "report": report}


class JoinResult(TypedDict):
    exit: int
    decision: dict[str, Any] | None


class JoinDecision(FactBase[JoinResult]):
    """``nodegate gate --mode join``: resume in Slurm on a fresh pass, drain otherwise.

    Idempotent by construction (the adapter reads the node first), so a converged node reports
    ``changed: false`` and the deploy counts no change.
    """

    @override
    def command(self, nodegate: str, level: str, node: str, report_dir: str,
                require: list[str] | None = None) -> StringCommand:
        extra = [w for suite in require or () for w in ("--require", QuoteString(suite))]
        return StringCommand(
            QuoteString(nodegate), "gate", "--mode", "join", "--level", QuoteString(level),
            "--node", QuoteString(node), "--report-dir", QuoteString(report_dir), *extra,
            "--json",
            "2>/dev/null;", "echo", f"{_EXIT}$?",
        )

    @override
    @staticmethod
    def default() -> JoinResult:
        return {"exit": 3, "decision": None}

    @override
    def process(self, output: list[str]) -> JoinResult:
        code, decision = _exit_and_json(output)
        return {"exit": code, "decision": decision}


class MultinodeRun(GateReport):
    """``nodegate multinode --json``: one side of the two-node all-reduce, run at execution
    time on both nodes of a pair at once (pyinfra runs an operation on its hosts in
    parallel); exit code and the JSON report, read as ``GateReport`` reads them."""

    @override
    def command(self, nodegate: str, profile: str, role: str, endpoint: str,  # type: ignore[override]
                peer_name: str, rdzv_id: str, local_addr: str, join_timeout_s: float,
                report_dir: str) -> StringCommand:
        return StringCommand(
            QuoteString(nodegate), "multinode", "--role", QuoteString(role),
            "--endpoint", QuoteString(endpoint), "--peer-name", QuoteString(peer_name),
            "--rdzv-id", QuoteString(rdzv_id), "--local-addr", QuoteString(local_addr),
            "--join-timeout", QuoteString(str(join_timeout_s)), "--profile", QuoteString(profile),
            "--report-dir", QuoteString(report_dir), "--json", "--color", "never",
            "2>/dev/null;", "echo", f"{_EXIT}$?",
        )
