"""Error counters judged by their growth, not their total.

NVLink CRC/replay/recovery, PCIe replay and ECC single-bit counters only ever rise: a total
says how old the card is as much as how healthy. So each is judged by how fast it grew since
the node's previous report of this boot, against a per-hour threshold in the profile; the
total stays in the evidence. With nothing to compare (first run, a previous report of another
boot, a counter that went down because the driver reloaded, no per-hour threshold), the
total is judged against the profile's ``*_max`` as before, and the evidence says why.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from nodegate.judge.common import make, threshold_repr
from nodegate.judge.network_checks import COUNTERS
from nodegate.profiles import Profile
from nodegate.profiles.loader import Threshold
from nodegate.profiles.threshold_keys import Key
from nodegate.results import CheckResult, Severity, Verdict
from nodegate.vocabulary import VERDICT_RANK

#: check -> its per-hour threshold key (``profiles.threshold_keys``).
RATE_KEYS: dict[str, Key] = {
    "nvlink_crc_errors": Key.NVLINK_CRC_ERRORS_PER_HOUR_MAX,
    "nvlink_replay_errors": Key.NVLINK_REPLAY_ERRORS_PER_HOUR_MAX,
    "nvlink_recovery_errors": Key.NVLINK_RECOVERY_ERRORS_PER_HOUR_MAX,
    "pcie_replays": Key.PCIE_REPLAYS_PER_HOUR_MAX,
    "ecc_sbe_volatile": Key.ECC_SBE_PER_HOUR_MAX,
    # RDMA port error counters (nodegate.judge.network_checks.COUNTERS)
    **{check: rate for check, _, rate in COUNTERS.values()},
}

#: How many of the newest reports are searched for one of this boot (the cron check's own
#: report is normally the newest; a standard run in between holds the counters too).
COUNTER_HISTORY = 4

#: The shortest interval a rate is computed over: the cron check runs minutes apart, and one
#: stray CRC error 20 s after the previous report must not read as 180 an hour.
MIN_INTERVAL_S = 300.0


def _timestamp(text: Any) -> float | None:
    from nodegate.report.model import parse_timestamp

    try:
        return parse_timestamp(str(text)).timestamp()
    except (ValueError, TypeError):
        return None


def _totals(report: Mapping[str, Any]) -> dict[tuple[str, str], float]:
    """(check, entity) -> the counter's total in ``report``: ``evidence.absolute`` where
    the report judged a rate, its ``measured`` where it judged the total."""
    out: dict[tuple[str, str], float] = {}
    for item in report.get("results") or ():
        if not isinstance(item, Mapping) or item.get("check") not in RATE_KEYS:
            continue
        evidence = item.get("evidence")
        value = evidence.get("absolute") if isinstance(evidence, Mapping) else None
        if value is None:
            value = item.get("measured")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[(str(item["check"]), str(item.get("entity")))] = float(value)
    return out


def previous_of_boot(reports: Iterable[Mapping[str, Any]],
                     boot_id: str | None) -> Mapping[str, Any] | None:
    """The newest report of this boot that holds counters, by the reports' own order
    (``nodegate.report.order``), never the wall clock."""
    from nodegate.report.order import dict_key

    if boot_id is None:
        return None
    for report in sorted(reports, key=dict_key, reverse=True):
        if report.get("boot_id") == boot_id and _totals(report):
            return report
    return None


def interval(previous: Mapping[str, Any], *, now: float,
             boottime_s: float | None) -> tuple[float | None, str]:
    """Seconds since ``previous`` (a report of this boot) and how they were measured; None
    with the reason when they cannot be trusted. The boot-relative clock (``boottime_s``,
    CLOCK_BOOTTIME now; the report's own) is used where both have it: no wall-clock step
    changes it. Else the wall clock, refused when it says the report is from the future or
    from before this boot began (a clock step: a rate over 26 years hides any storm)."""
    before = previous.get("boottime_s")
    if boottime_s is not None and isinstance(before, (int, float)) and \
            not isinstance(before, bool):
        since = boottime_s - float(before)
        if since < 0:
            return None, "the previous report's boot time is after now"
        return since, "boot-relative clock"
    then = _timestamp(previous.get("finished_at"))
    if then is None:
        return None, "the previous report's finish time does not parse"
    since = now - then
    if since < 0:
        return None, "the previous report is dated in the future (clock step?)"
    if boottime_s is not None and since > boottime_s + CLOCK_SLACK_S:
        return None, "the previous report of this boot is dated before the boot (clock step?)"
    return since, "wall clock"


#: Wall-clock slack when a report's date is compared with the boot's start.
CLOCK_SLACK_S = 300.0


def judge_growth(results: Sequence[CheckResult], previous: Mapping[str, Any] | None,
                 profile: Profile, *, now: float,
                 boottime_s: float | None = None) -> list[CheckResult]:
    """``results`` with each counter check rejudged by its growth since ``previous`` (a report
    dict of this boot, or None); other results are returned unchanged. ``boottime_s``: this
    boot's CLOCK_BOOTTIME now (``interval``). The total is judged as well: a rate that
    passes never hides a total above the profile's maximum."""
    totals = _totals(previous) if previous is not None else {}
    since, clock = (interval(previous, now=now, boottime_s=boottime_s)
                    if previous is not None else (None, ""))
    out = []
    for result in results:
        key = RATE_KEYS.get(result.check)
        measured = result.measured
        if key is None or result.verdict in (Verdict.ERROR, Verdict.SKIP) or \
                not isinstance(measured, (int, float)) or isinstance(measured, bool):
            out.append(result)
            continue
        prior = totals.get((result.check, result.entity))
        threshold = profile.threshold(key)
        if previous is None:
            why = "no earlier report of this boot"
        elif since is None:
            why = clock
        elif prior is None:
            why = "the previous report has no figure for it"
        elif measured < prior:
            why = "the counter went down since the previous report (driver reloaded)"
        elif threshold is None:
            why = f"no {key} in the profile"
        else:
            rated = _rate(result, float(measured), prior, threshold, since_s=since,
                          report_id=str(previous.get("report_id")), clock=clock)
            out.append(_with_total(rated, result))
            continue
        out.append(dataclasses.replace(result, evidence={
            **result.evidence, "absolute": measured,
            "basis": f"total against the profile's maximum: {why}"}))
    return out


def _with_total(rated: CheckResult, total: CheckResult) -> CheckResult:
    """The rate's result, made as bad as the total's own verdict against ``*_max`` where that
    is worse (totals are judged as well as rates)."""
    if VERDICT_RANK[total.verdict] <= VERDICT_RANK[rated.verdict]:
        return rated
    return dataclasses.replace(rated, verdict=total.verdict, severity=total.severity,
                               evidence={**rated.evidence, "total_verdict": total.verdict.value,
                                         "total_threshold": total.threshold,
                                         "basis": rated.evidence["basis"]
                                         + "; the total is above the profile's maximum"})


def _rate(result: CheckResult, total: float, prior: float, threshold: Threshold, *,
          since_s: float, report_id: str, clock: str = "wall clock") -> CheckResult:
    hours = max(since_s, MIN_INTERVAL_S) / 3600.0
    rate = round((total - prior) / hours, 3)
    ok = rate <= threshold.value
    # a counter climbing faster than the profile allows is an active fault (a degrading
    # link, an SBE storm before DBEs): it fails, whatever the total's own verdict would be
    return make(result.check, result.entity, Verdict.PASS if ok else Verdict.FAIL,
                measured=rate, threshold=threshold_repr(threshold), unit=threshold.unit,
                severity=Severity.HARDWARE, **{
                    **result.evidence, "absolute": _number(total), "previous": _number(prior),
                    "growth": _number(total - prior), "since_s": round(since_s, 1),
                    "previous_report": report_id, "clock": clock,
                    "basis": "growth since the previous report of this boot"})


def _number(value: float) -> float | int:
    return int(value) if value.is_integer() else value
