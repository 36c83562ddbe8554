"""The kernel log could not be read: no Xid verdict can be reached, so ``xid_events`` is
ERROR on every GPU it would have judged (never a PASS with nothing measured)."""

from __future__ import annotations

from nodegate.judge.common import make
from nodegate.results import CheckResult, Severity, Verdict


def judge_log_unreadable(entities: list[str], *, source: str, problem: str,
                         window: str) -> list[CheckResult]:
    """One ``xid_events`` ERROR per GPU entity (``node`` when no GPU is known)."""
    return [make("xid_events", entity, Verdict.ERROR, threshold="no Xid in window",
                 severity=Severity.CRITICAL, reason=f"kernel log unreadable: {problem}",
                 source=source, window=window,
                 hint="run as root, or allow reading the kernel log (journalctl -k, dmesg; "
                      "kernel.dmesg_restrict)")
            for entity in entities or ["node"]]
