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


def assert_verdict(result: CheckResult) -> None:
    if result.verdict == Verdict.PASS:
        return
    if result.verdict == Verdict.WARN:
        warnings.warn(describe(result), NodegateWarning, stacklevel=2)
        return
    if result.verdict == Verdict.SKIP:
        pytest.skip(str(result.evidence.get("reason", describe(result))))
    if result.verdict == Verdict.ERROR:
        raise CheckError(describe(result))
    pytest.fail(describe(result), pytrace=False)
