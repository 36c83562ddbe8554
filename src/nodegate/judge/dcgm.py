"""DCGM's diagnostic as nodegate results: one ``dcgm_diag`` result per DCGM test and entity.

The verdict is DCGM's own, mapped word for word from the result names dcgmi prints
(NVIDIA/DCGM dcgmi/Diag.cpp ``HelperDisplayDiagResult``: Pass, Skip, Warn, Fail, Not Run;
DCGM 2.x/3.x wrote them upper case and SKIPPED). A word DCGM does not define, a run that
reported a runtime error, or a run with no results is ERROR: it did not establish anything.
DCGM's messages are the evidence, and the source is ``peer-tool:dcgm``.
"""

from __future__ import annotations

from typing import Any

from nodegate.judge.common import make
from nodegate.probes.dcgm import DcgmDiag
from nodegate.results import CheckResult, Severity, Verdict

SOURCE = "peer-tool:dcgm"
#: DCGM's result names (case-insensitive) -> nodegate verdicts. "Not Run" is ERROR: a test
#: the level includes that did not run proves nothing (dcgmi normally leaves it out).
STATUS: dict[str, Verdict] = {
    "pass": Verdict.PASS,
    "warn": Verdict.WARN,
    "fail": Verdict.FAIL,
    "skip": Verdict.SKIP,
    "skipped": Verdict.SKIP,
    "not run": Verdict.ERROR,
}
#: dcgm_errors.h dcgmErrorSeverity_t values that mean the GPU must not take work
#: (DCGM_ERROR_ISOLATE 2, DCGM_ERROR_RESET 6)
ISOLATING_SEVERITIES = {2: "ISOLATE", 6: "RESET"}


def judge_diag(diag: DcgmDiag) -> list[CheckResult]:
    if diag.runtime_error:
        return [make("dcgm_diag", "node", Verdict.ERROR, severity=Severity.CRITICAL,
                     reason=f"dcgmi diag -r {diag.level}: {diag.runtime_error}",
                     source=SOURCE, dcgm_version=diag.version or None)]
    if not diag.entries:
        return [make("dcgm_diag", "node", Verdict.ERROR, severity=Severity.CRITICAL,
                     reason=f"dcgmi diag -r {diag.level} reported no test results",
                     source=SOURCE, dcgm_version=diag.version or None)]
    out = []
    for entry in diag.entries:
        verdict = STATUS.get(entry.status.strip().lower(), Verdict.ERROR)
        isolating = sorted({ISOLATING_SEVERITIES[s] for s in entry.error_severities
                            if s in ISOLATING_SEVERITIES})
        severity = Severity.CRITICAL if verdict in (Verdict.FAIL, Verdict.ERROR) \
            else Severity.WARNING
        evidence: dict[str, Any] = {
            "source": SOURCE, "category": entry.category, "test": entry.test,
            "dcgm_status": entry.status, "messages": list(entry.messages) or None,
            "info": list(entry.info) or None, "error_ids": list(entry.error_ids) or None,
            "dcgm_severity": isolating or None, "level": diag.level,
            "dcgm_version": diag.version or None,
        }
        if verdict == Verdict.ERROR and entry.status.strip().lower() not in STATUS:
            evidence["reason"] = f"DCGM result {entry.status!r} is not one DCGM defines"
        elif verdict in (Verdict.SKIP, Verdict.ERROR):
            evidence["reason"] = "; ".join(entry.messages + entry.info) or \
                f"DCGM reported {entry.status}"
        out.append(make("dcgm_diag", f"{entry.entity}:{entry.test}", verdict,
                        measured=entry.status, threshold={"status": "Pass", "source": SOURCE},
                        severity=severity, **evidence))
    return out


def judge_absent(reason: str) -> list[CheckResult]:
    """DCGM not installed (or not asked for): SKIP with the reason, never a failure."""
    return [make("dcgm_diag", "node", Verdict.SKIP, reason=reason, source=SOURCE)]
