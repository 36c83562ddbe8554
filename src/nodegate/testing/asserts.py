"""Turn a judged CheckResult into a pytest outcome, so validation/ tests stay one line."""

from __future__ import annotations

import json
import warnings

import pytest

from nodegate.results import CheckResult, Verdict


class NodegateWarning(UserWarning):
    """A WARN verdict: the test passes, the warning shows in pytest's summary."""


class CheckError(Exception):
    """An ERROR verdict: the check could not judge (pytest reports an error, not a failure)."""


def describe(result: CheckResult) -> str:
    parts = [f"{result.check}[{result.entity}]: {result.verdict.value}",
             f"measured={result.measured!r}"]
    if result.threshold is not None:
        parts.append(f"expected={result.threshold!r}")
    if result.unit:
        parts.append(f"unit={result.unit}")
    parts.append(f"severity={result.severity.value}")
    text = " ".join(parts)
    if result.evidence:
        text += "\nevidence: " + json.dumps(result.evidence, default=str, sort_keys=True)
    return text


def assert_verdicts(results: list[CheckResult]) -> None:
    """One check's results on every entity: FAIL lists each failing entity; WARN warns; a
    check that does not apply to any entity (all SKIP) is a pytest skip."""
    for result in results:
        if result.verdict == Verdict.WARN:
            warnings.warn(describe(result), NodegateWarning, stacklevel=2)
    errors = [r for r in results if r.verdict == Verdict.ERROR]
    if errors:
        raise CheckError("\n".join(describe(r) for r in errors))
    failed = [r for r in results if r.verdict == Verdict.FAIL]
    if failed:
        pytest.fail("\n".join(describe(r) for r in failed), pytrace=False)
    if results and all(r.verdict == Verdict.SKIP for r in results):
        pytest.skip("; ".join(sorted({str(r.evidence.get("reason", describe(r)))
                                      for r in results})))
