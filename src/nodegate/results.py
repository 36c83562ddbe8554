"""The one result shape every check returns.

Probes measure (each into its own typed snapshot in ``nodegate.probes``), the judge decides
(``CheckResult``). Reports, JUnit, Prometheus and the summary table are all rendered from
lists of ``CheckResult``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nodegate.vocabulary import VERDICT_RANK, Severity, Verdict

__all__ = ["VERDICT_RANK", "CheckResult", "Severity", "Verdict"]


@dataclass(frozen=True)
class CheckResult:
    """The judged outcome of one check on one entity."""

    check: str
    entity: str
    measured: Any
    threshold: Any
    unit: str
    verdict: Verdict
    severity: Severity
    evidence: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.verdict in (Verdict.FAIL, Verdict.ERROR)

    @property
    def test_id(self) -> str:
        """The id a pytest run or a JUnit testcase shows: ``nvlink_state[gpu3.link5]``."""
        return f"{self.check}[{self.entity}]"

    def to_dict(self) -> dict[str, Any]:
        # hand-written rather than dataclasses.asdict: that deep-copies every value and is
        # the slowest step of rendering an 8-GPU report (~800 results)
        return {
            "check": self.check,
            "entity": self.entity,
            "measured": self.measured,
            "threshold": self.threshold,
            "unit": self.unit,
            "verdict": self.verdict.value,
            "severity": self.severity.value,
            "evidence": dict(self.evidence),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CheckResult:
        return cls(
            check=data["check"],
            entity=data["entity"],
            measured=data.get("measured"),
            threshold=data.get("threshold"),
            unit=data.get("unit", ""),
            verdict=Verdict(data["verdict"]),
            severity=Severity(data["severity"]),
            evidence=dict(data.get("evidence") or {}),
        )


def overall_verdict(results: list[CheckResult]) -> Verdict:
    """The node's verdict: the worst of its judged results.

    A SKIP (nothing to judge: no threshold, not supported) never outranks a PASS; the node is
    SKIP only when every result was skipped, and PASS when there are none to fail.
    """
    judged = [r for r in results if r.verdict != Verdict.SKIP]
    if results and not judged:
        return Verdict.SKIP
    worst = Verdict.PASS
    for result in judged:
        if VERDICT_RANK[result.verdict] > VERDICT_RANK[worst]:
            worst = result.verdict
    return worst
