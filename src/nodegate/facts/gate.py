"""What the gate reads on a node, changing nothing: the join plan (``nodegate gate --mode join
--dry-run --json``) and the recorded result of a gate command an operation ran there.

The commands that change something (the battery, the all-reduce, the drain or resume) are
yielded by the operations in ``roles/ops/gate.py``; they record their JSON and exit code in
``<stem>.json`` and ``<stem>.exit`` on the node, which ``RecordedRun`` reads (or the operation
fetches). A fact is cached and assumed pure by pyinfra, so none of them acts.
"""

from __future__ import annotations

import json
from typing import Any, TypedDict, TypeVar

from pyinfra.api.command import QuoteString, StringCommand
from pyinfra.api.facts import FactBase
from typing_extensions import override

from nodegate.bounds import digits

_EXIT = "NODEGATE_EXIT="
_STDERR = "NODEGATE_STDERR="
#: The lines of a gate command's own stderr a failure message quotes (its last ones).
STDERR_LINES = 5

R = TypeVar("R")


def _exit_and_json(output: list[str]) -> tuple[int, dict[str, Any] | None]:
    """Split a command's stdout into its JSON document and the exit code echoed after it
    (3, could not run, when there is none)."""
    code, body = 3, []
    for line in output:
        if line.startswith(_EXIT):
            text = line[len(_EXIT):].strip()
            found = digits(text, max_chars=3)
            code = 3 if found is None else found
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
    stderr: str  # the command's last stderr lines (redacted): its own words for a failure


def stderr_tail(text: str, lines: int = STDERR_LINES) -> str:
    """The last ``lines`` non-empty lines of a command's stderr, secrets redacted, joined with
    `` | `` so they fit the one-line failure message."""
    from nodegate.redaction import redact

    kept = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
    return redact(" | ".join(kept))


class _ExitAndJson(FactBase[R]):
    """A fact whose command prints a JSON document and then its exit code; exit 3 and no
    document when it could not run."""

    @staticmethod
    def result(code: int, document: dict[str, Any] | None) -> R:
        """The fact's value from the exit code and the document."""
        raise NotImplementedError

    @override
    @classmethod
    def default(cls) -> R:
        return cls.result(3, None)

    @override
    def process(self, output: list[str]) -> R:
        return self.result(*_exit_and_json(output))


def parse_recorded(document: str, exit_text: str, stderr_text: str = "") -> GateResult:
    """A recorded run from its files' text: the JSON report (None when it is not one), the
    exit code (3 when the file is empty or not a number: the command did not finish) and its
    stderr (its last lines)."""
    code, data = _exit_and_json([*document.splitlines(), _EXIT + exit_text.strip()])
    return {"exit": code, "report": data, "stderr": stderr_tail(stderr_text)}


class RecordedRun(_ExitAndJson[GateResult]):
    """Exit code and JSON document a gate command left in ``<stem>.exit`` and ``<stem>.json``
    (exit 3 and no document when it left none). Reads the files; runs nothing."""

    @override
    def command(self, stem: str) -> StringCommand:
        return StringCommand(
            "cat", QuoteString(f"{stem}.json"), "2>/dev/null;",
            "echo", f"{_EXIT}$(cat", QuoteString(f"{stem}.exit"), "2>/dev/null);",
            "tail", "-n", str(STDERR_LINES * 4), QuoteString(f"{stem}.err"), "2>/dev/null",
            "|", "sed", f"'s/^/{_STDERR}/'",
        )

    @override
    @staticmethod
    def result(code: int, document: dict[str, Any] | None) -> GateResult:
        return {"exit": code, "report": document, "stderr": ""}

    @override
    def process(self, output: list[str]) -> GateResult:
        err = [line[len(_STDERR):] for line in output if line.startswith(_STDERR)]
        result = self.result(*_exit_and_json([x for x in output
                                              if not x.startswith(_STDERR)]))
        result["stderr"] = stderr_tail("\n".join(err))
        return result


class JoinResult(TypedDict):
    exit: int
    decision: dict[str, Any] | None
    stderr: str  # its last stderr lines (redacted), quoted when the plan could not be read


def join_argv(nodegate: str, level: str, node: str, report_dir: str,
              require: list[str] | None = None, *, plan: bool = False) -> list[Any]:
    """``nodegate gate --mode join ... --json``; with ``plan``, ``--dry-run``: decide from the
    node's Slurm state and reports, print the decision, change nothing."""
    extra = [w for suite in require or () for w in ("--require", QuoteString(suite))]
    return [QuoteString(nodegate), "gate", "--mode", "join", "--level", QuoteString(level),
            "--node", QuoteString(node), "--report-dir", QuoteString(report_dir), *extra,
            *(["--dry-run"] if plan else []), "--json"]


class JoinPlan(_ExitAndJson[JoinResult]):
    """What ``nodegate gate --mode join`` would do now (``--dry-run``): ``action`` ``resume``
    or ``drain`` only when the node's Slurm state would change (the policy answers ``none``,
    "already drained", for a node already right), so a converged node needs no command."""

    @override
    def command(self, nodegate: str, level: str, node: str, report_dir: str,
                require: list[str] | None = None) -> StringCommand:
        return StringCommand(
            "err=$(mktemp)", "||", "exit", "3;",
            *join_argv(nodegate, level, node, report_dir, require, plan=True),
            '2>"$err";', "echo", f"{_EXIT}$?;", "tail", "-n", str(STDERR_LINES * 4), '"$err"',
            "|", "sed", f"'s/^/{_STDERR}/';", "rm", "-f", '"$err"')

    @override
    @staticmethod
    def result(code: int, document: dict[str, Any] | None) -> JoinResult:
        return {"exit": code, "decision": document, "stderr": ""}

    @override
    def process(self, output: list[str]) -> JoinResult:
        err = [line[len(_STDERR):] for line in output if line.startswith(_STDERR)]
        result = self.result(*_exit_and_json([x for x in output
                                              if not x.startswith(_STDERR)]))
        result["stderr"] = stderr_tail("\n".join(err))
        return result
