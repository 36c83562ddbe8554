"""Small builders shared by every judge module, so results look the same everywhere."""

from __future__ import annotations

from typing import Any

from nodegate.profiles.loader import Threshold
from nodegate.results import CheckResult, Severity, Verdict


def make(check: str, entity: str, verdict: Verdict, *, measured: Any = None,
         threshold: Any = None, unit: str = "", severity: Severity = Severity.INFO,
         **evidence: Any) -> CheckResult:
    if verdict == Verdict.PASS:
        severity = Severity.INFO
    return CheckResult(check=check, entity=entity, measured=measured, threshold=threshold,
                       unit=unit, verdict=verdict, severity=severity,
                       evidence={k: v for k, v in evidence.items() if v is not None})


def threshold_repr(threshold: Threshold) -> dict[str, Any]:
    return {threshold.bound: threshold.value, "source": threshold.source}


def against(check: str, entity: str, measured: float | int | None,
            threshold: Threshold | None, *, fail: Verdict = Verdict.FAIL,
            severity: Severity = Severity.CRITICAL, reason_missing: str | None = None,
            **evidence: Any) -> CheckResult:
    """Judge one number against a profile threshold (min or max bound). A battery run never
    gets here without the threshold of a check it runs (``registry.require_thresholds``
    refuses the profile at load); the SKIP is for direct callers and the checks outside the
    battery whose key is the site's to set (``nodegate multinode``)."""
    if threshold is None:
        return make(check, entity, Verdict.SKIP,
                    reason=reason_missing or "no threshold for this check in the profile",
                    **evidence)
    if measured is None:
        return make(check, entity, Verdict.SKIP, threshold=threshold_repr(threshold),
                    unit=threshold.unit, reason="not reported by this GPU/driver", **evidence)
    ok = measured >= threshold.value if threshold.bound == "min" else measured <= threshold.value
    return make(check, entity, Verdict.PASS if ok else fail, measured=measured,
                threshold=threshold_repr(threshold), unit=threshold.unit, severity=severity,
                **evidence)


def expect(check: str, entity: str, measured: Any, expected: Any, *, unit: str = "",
           severity: Severity = Severity.CRITICAL, fail: Verdict = Verdict.FAIL,
           **evidence: Any) -> CheckResult:
    """Judge a value that must equal what the profile says."""
    if measured is None:
        return make(check, entity, Verdict.SKIP, threshold=expected, unit=unit,
                    reason="not reported by this GPU/driver", **evidence)
    verdict = Verdict.PASS if measured == expected else fail
    return make(check, entity, verdict, measured=measured, threshold=expected, unit=unit,
                severity=severity, **evidence)
