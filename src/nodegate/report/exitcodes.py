"""Verdict -> process exit code: the one mapping every entry point (CLI, battery, cron) uses.

Codes 2 and 3 never come from a verdict: they mean nothing was judged (bad input, or the
machine could not run the checks) and are raised as ``ConfigError`` / ``CannotRunError``.
A check that ran and hit an ERROR did run, so it is exit 1: the node is not proven healthy.
"""

from __future__ import annotations

from collections.abc import Iterable

from nodegate.errors import ExitCode
from nodegate.report.model import NodeReport
from nodegate.results import CheckResult, Verdict, overall_verdict

_BY_VERDICT: dict[Verdict, ExitCode] = {
    Verdict.PASS: ExitCode.PASSED,
    Verdict.WARN: ExitCode.PASSED,
    Verdict.SKIP: ExitCode.PASSED,
    Verdict.FAIL: ExitCode.FAILED,
    Verdict.ERROR: ExitCode.FAILED,
}


def exit_code_for(subject: Verdict | str | NodeReport | Iterable[CheckResult]) -> ExitCode:
    """0 for PASS/WARN/SKIP (warnings never fail a gate), 1 for FAIL or ERROR."""
    if isinstance(subject, NodeReport):
        verdict = subject.verdict
    elif isinstance(subject, (Verdict, str)):
        verdict = Verdict(subject)
    else:
        verdict = overall_verdict(list(subject))
    return _BY_VERDICT[verdict]
