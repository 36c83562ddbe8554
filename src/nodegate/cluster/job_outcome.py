"""What an ``srun`` job's output says happened: ran and measured, ran and failed, or never
started; and the report each task wrote, read from a framed block, never by hope.

A job that never started is not a node that failed. ``srun`` ends before any task starts when
the job pends past its deadline (a user's job holds a node), when Slurm refuses it
("Requested node configuration is not available") and when the controller does not answer;
none of them measured anything, so none is evidence against a node. Each task therefore
prints ``TASK_STARTED`` first thing (``srun --label`` puts its task number in front): a job
where no task printed it never started, whatever srun's exit status.

Each task's report travels as a framed block: the task writes the report to a file of its own
and prints it between ``REPORT_BEGIN`` and ``REPORT_END`` afterwards, so a warning or a
library's chatter (``{`` included) on stdout is outside the frame; inside it, the report is
the JSON object that starts a line and decodes, and it must pass the report schema
(``nodegate.report.model.validate``) before anyone reads a verdict from it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nodegate.cluster.jobrun import Run
from nodegate.cluster.slurm import UNREACHABLE_MARKERS

#: The line each task prints before anything else (``srun --label``: ``N: <marker>``).
TASK_STARTED = "nodegate-task-started"
#: The lines around the report a task prints (its own file, ``cat`` between them).
REPORT_BEGIN = "-----BEGIN NODEGATE REPORT-----"
REPORT_END = "-----END NODEGATE REPORT-----"
#: srun's words for a job Slurm refused (``man srun``, the allocation's error messages).
REFUSED_MARKERS = ("requested node configuration is not available",
                   "unable to allocate resources", "invalid partition", "invalid qos",
                   "invalid account", "job violates accounting/qos policy",
                   "node count specification invalid", "required node not available")
_LABEL = re.compile(r"^\s*(\d{1,6}): ?(.*)$")


@dataclass(frozen=True)
class NotStarted:
    """A job whose tasks never started: why (never worded as a failure: nothing ran), and
    whether the controller was unreachable (the whole command stops: exit 3)."""

    a: str
    b: str
    why: str
    unreachable: bool = False
    attempts: int = 1

    def key(self) -> tuple[str, str]:
        return (self.a, self.b) if self.a <= self.b else (self.b, self.a)


def task_outputs(stdout: str) -> dict[int, str]:
    """Each task's stdout from srun ``--label`` output (``0: ...``); unlabelled lines (srun's
    own) are left out."""
    out: dict[int, list[str]] = {}
    for line in stdout.splitlines():
        match = _LABEL.match(line)
        if match:
            out.setdefault(int(match.group(1)), []).append(match.group(2))
    return {task: "\n".join(lines) for task, lines in out.items()}


def started_tasks(stdout: str) -> set[int]:
    """The tasks that printed ``TASK_STARTED``."""
    return {task for task, text in task_outputs(stdout).items()
            if TASK_STARTED in text.splitlines()}


def _one_line(text: str, limit: int = 240) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _scrub(text: str) -> str:
    """srun's message in one bounded line, without the word that would call it a failure
    (srun says "Job submit/allocate failed: ..." of a job that never ran)."""
    return _one_line(re.sub(r"\bfail(?:ed|ure|s)?\b", "refused", text, flags=re.IGNORECASE))


def never_started(a: str, b: str, run: Run, timeout_s: float) -> NotStarted | None:
    """The ``NotStarted`` of a job none of whose tasks started; None when one did."""
    if started_tasks(run.stdout):
        return None
    said = run.stderr.lower()
    if any(marker in said for marker in UNREACHABLE_MARKERS):
        return NotStarted(a, b, f"Slurm controller unreachable: {_scrub(run.stderr)}",
                          unreachable=True)
    if run.returncode is None:  # stopped at the deadline: what srun said after is its exit
        pending = "pending (a job holds a node, or no resources)" \
            if "queued and waiting" in said or not said.strip() else _scrub(run.stderr)
        return NotStarted(a, b, f"not started within {timeout_s:g} s: {pending}; cancelled")
    if any(marker in said for marker in REFUSED_MARKERS):
        return NotStarted(a, b, f"not started: Slurm refused the job: {_scrub(run.stderr)}")
    return NotStarted(a, b, f"not started: srun ended (exit {run.returncode}) before any task "
                            f"started: {_scrub(run.stderr) or 'no message'}")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def framed_reports(task_text: str) -> list[Any]:
    """The JSON objects that start a line inside the task's last complete frame, outermost
    first (a warning line with ``{`` before or after the report is one that does not decode,
    or decodes to something that is not a report)."""
    lines = task_text.splitlines()
    ends = [i for i, line in enumerate(lines) if line.strip() == REPORT_END]
    if not ends:
        return []
    end = ends[-1]
    begins = [i for i, line in enumerate(lines[:end]) if line.strip() == REPORT_BEGIN]
    if not begins:
        return []
    body = "\n".join(lines[begins[-1] + 1:end])
    found: list[Any] = []
    for match in re.finditer(r"(?m)^[ \t]*\{", body):
        try:
            found.append(_DECODER.raw_decode(body, match.end() - 1)[0])
        except (ValueError, RecursionError):  # int_max_str_digits, depth: not a report
            continue
    return found


def side_reports(stdout: str, nodes: tuple[str, ...]) -> tuple[dict[str, dict[str, Any]],
                                                                dict[str, str]]:
    """node -> the valid report its task printed in a frame, and node -> why a task's
    frame gave none (a report naming a node outside ``nodes`` is no one's)."""
    from nodegate.errors import ConfigError
    from nodegate.report.model import validate

    reports: dict[str, dict[str, Any]] = {}
    problems: dict[str, str] = {}
    for task, text in sorted(task_outputs(stdout).items()):
        candidates = [c for c in framed_reports(text) if isinstance(c, Mapping)
                      and "results" in c]
        if not candidates:
            problems[f"task {task}"] = "printed no framed report"
            continue
        why = ""
        for data in candidates:
            node = data.get("node")
            if node not in nodes:
                why = f"a report for {str(node)[:60]!r}, not one of {', '.join(nodes)}"
                continue
            try:
                validate(data, source=f"{node}'s pair report")
            except ConfigError as exc:
                why = f"an invalid report: {_one_line(str(exc))}"
                continue
            reports[str(node)] = dict(data)
            break
        else:
            problems[f"task {task}"] = why
    return reports, problems
