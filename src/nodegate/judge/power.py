"""Power-path judge functions: measurements in, ``CheckResult`` out.

Every limit comes from the resolved profile: counts and ratings from ``profile["power"]``,
bounds from ``profile["thresholds"][NAME] = {min|max, unit, source}``. No number that decides
a verdict lives in this file. The battery refuses a profile without a threshold a check
needs (``nodegate.battery.registry.require_thresholds``); called without one, a check SKIPs
and says which key.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from nodegate.profiles.threshold_keys import Key
from nodegate.results import CheckResult, Severity, Verdict

Profile = dict[str, Any]


def _threshold(profile: Profile, name: Key) -> dict[str, Any] | None:
    value = (profile.get("thresholds") or {}).get(name)
    return value if isinstance(value, dict) and ("min" in value or "max" in value) else None


def _skip(check: str, entity: str, why: str, unit: str = "") -> CheckResult:
    return CheckResult(check, entity, None, None, unit, Verdict.SKIP, Severity.INFO,
                       {"reason": why})


def _error(check: str, entity: str, why: str, threshold: Any, unit: str, *,
           severity: Severity = Severity.WARNING) -> CheckResult:
    return CheckResult(check, entity, None, threshold, unit, Verdict.ERROR, severity,
                       {"reason": why})


def _bound(check: str, entity: str, measured: float, limit: dict[str, Any], *,
           severity: Severity, evidence: dict[str, Any]) -> CheckResult:
    """Compare ``measured`` with a {min|max} threshold dict; the verdict carries its source."""
    if "max" in limit:
        bound = float(limit["max"])
        ok = measured <= bound
    else:
        bound = float(limit["min"])
        ok = measured >= bound
    evidence = {**evidence, "threshold_source": limit.get("source", "")}
    return CheckResult(check, entity, measured, limit, str(limit.get("unit", "")),
                       Verdict.PASS if ok else Verdict.FAIL, Severity.INFO if ok else severity,
                       evidence)


# Resource.Status.State values (DMTF Resource schema) in which a PSU carries or can take the
# load: Enabled, or StandbySpare ("may become available automatically as part of a failover").
# Unknown = the BMC left State out; its Health then decides.
_PSU_USABLE_STATES = ("Enabled", "StandbySpare", "Unknown")


def psu_ok(psu: dict[str, Any]) -> bool:
    """Present, Health OK and in a usable State."""
    return bool(psu.get("present", True) and psu.get("health") == "OK"
                and psu.get("state", "Enabled") in _PSU_USABLE_STATES)


def check_psu_count(psus: list[dict[str, Any]], profile: Profile,
                    entity: str = "node") -> CheckResult:
    """Present and healthy PSUs vs ``power.psu_count``: a missing or failed PSU is a
    field-service ticket, not something a re-run fixes. An empty bay (State Absent) is listed
    as absent, apart from the present PSUs that are unhealthy."""
    expected = (profile.get("power") or {}).get("psu_count")
    if expected is None:
        return _skip("psu_count", entity, "profile has no power.psu_count", "count")
    healthy = [p for p in psus if psu_ok(p)]
    absent = [p.get("id") for p in psus if not p.get("present", True)]
    bad = [p.get("id") for p in psus if p.get("present", True) and not psu_ok(p)]
    ok = len(healthy) >= int(expected)
    return CheckResult("psu_count", entity, len(healthy), {"min": int(expected),
                       "unit": "count", "source": "profile: power.psu_count"}, "count",
                       Verdict.PASS if ok else Verdict.FAIL,
                       Severity.INFO if ok else Severity.HARDWARE,
                       {"present": len(psus) - len(absent), "absent": absent, "not_ok": bad})


def check_psu_redundancy(psus: list[dict[str, Any]], redundancy: dict[str, Any],
                         profile: Profile, entity: str = "node") -> CheckResult:
    """With ``power.psu_redundant`` the node must survive losing a PSU: healthy PSUs exceed the
    BMC's MinNumNeeded and the BMC's own redundancy status is OK."""
    wanted = (profile.get("power") or {}).get("psu_redundant")
    if wanted is None:
        return _skip("psu_redundancy", entity, "profile has no power.psu_redundant")
    if not wanted:
        return CheckResult("psu_redundancy", entity, None, {"redundant": False}, "",
                           Verdict.PASS, Severity.INFO, {"reason": "profile does not require it"})
    healthy = sum(1 for p in psus if psu_ok(p))
    min_needed = redundancy.get("min_needed")
    if not isinstance(min_needed, int):
        min_needed = _psus_needed(profile, psus)
    bmc_health = redundancy.get("health", "Unknown")
    bmc_state = redundancy.get("state", "Unknown")
    # The BMC's own word counts only as Health OK with State Enabled: a redundancy group that
    # is UnavailableOffline (DMTF: "present but not able to be used") or Disabled protects
    # nothing, whatever its Health says. Unknown = the BMC left it out; the count decides.
    ok = (healthy > min_needed and bmc_health in ("OK", "Unknown")
          and bmc_state in ("Enabled", "Unknown"))
    return CheckResult("psu_redundancy", entity, healthy,
                       {"min": min_needed + 1, "unit": "count",
                        "source": "BMC Redundancy MinNumNeeded + 1"}, "count",
                       Verdict.PASS if ok else Verdict.FAIL,
                       Severity.INFO if ok else Severity.HARDWARE,
                       {"mode": redundancy.get("mode"), "bmc_redundancy_health": bmc_health,
                        "bmc_redundancy_state": bmc_state,
                        "min_needed": min_needed, "healthy": healthy})


def check_inlet_temp(inlet_c: float | None, profile: Profile,
                     entity: str = "node") -> CheckResult:
    """Chassis inlet within ``inlet_temp_max_c``: a hot aisle throttles GPUs and fails burn-in
    for reasons that are not the node's."""
    limit = _threshold(profile, Key.INLET_TEMP_MAX_C)
    if limit is None:
        return _skip("inlet_temp", entity, "no threshold inlet_temp_max_c", "C")
    if inlet_c is None:
        return _error("inlet_temp", entity, "BMC reports no inlet temperature", limit, "C")
    return _bound("inlet_temp", entity, float(inlet_c), limit, severity=Severity.CRITICAL,
                  evidence={})


def _psus_needed(profile: Profile, psus: list[dict[str, Any]]) -> int:
    power = profile.get("power") or {}
    count = int(power.get("psu_count") or len(psus))
    # Without a BMC figure a redundant node is taken as grid-redundant (N+N): half carry it.
    return math.ceil(count / 2) if power.get("psu_redundant") else count


def check_psu_budget(node_power_w: float | None, profile: Profile,
                     min_needed: int | None = None, entity: str = "node") -> CheckResult:
    """Node draw under load within ``psu_budget_fraction_max`` of the capacity that remains
    after losing the redundant PSUs (MinNumNeeded x psu_watts): otherwise a PSU failure trips
    the node instead of being survived."""
    limit = _threshold(profile, Key.PSU_BUDGET_FRACTION_MAX)
    power = profile.get("power") or {}
    if limit is None:
        return _skip("psu_budget", entity, "no threshold psu_budget_fraction_max", "W")
    if not power.get("psu_watts") or not power.get("psu_count"):
        return _skip("psu_budget", entity, "profile has no power.psu_watts/psu_count", "W")
    needed = min_needed if isinstance(min_needed, int) and min_needed > 0 else \
        _psus_needed(profile, [])
    capacity = float(power["psu_watts"]) * needed
    if node_power_w is None:
        return _error("psu_budget", entity, "no node power reading", limit, "W",
                      severity=Severity.CRITICAL)
    fraction = round(float(node_power_w) / capacity, 4)
    result = _bound("psu_budget", entity, fraction, limit, severity=Severity.CRITICAL,
                    evidence={"node_power_w": node_power_w, "non_redundant_capacity_w": capacity,
                     "psus_carrying_load": needed})
    return result


def feed_capacity_w(amps: float, volts: float, phases: int = 1) -> float:
    """What one branch circuit delivers: V x I single-phase; line-to-line V x I x sqrt 3 for a
    3-phase feed (a 60 A / 415 V 3-phase PDU is ~43 kW, not 25)."""
    return float(amps) * float(volts) * (math.sqrt(3) if phases == 3 else 1.0)


def check_circuit_load(draw_w: float | None, circuits: int, profile: Profile,
                       entity: str = "node",
                       feeds: list[dict[str, Any]] | None = None) -> CheckResult:
    """Draw within ``circuit_load_fraction_max`` (the 80 % continuous-load rule) of the
    *weakest single* feed: with A and B feeds, each must carry the whole node when the other
    fails, so their ratings are never added. ``feeds`` are the site's PDUs feeding the node
    (``{pdu, amps, volts, phases}``, from node.json); a feed without its own rating, or no
    feeds at all (``circuits`` of them), takes the profile's ``power.circuit_amps/volts``."""
    limit = _threshold(profile, Key.CIRCUIT_LOAD_FRACTION_MAX)
    power = profile.get("power") or {}
    if limit is None:
        return _skip("circuit_load", entity, "no threshold circuit_load_fraction_max", "ratio")
    fallback = (power.get("circuit_amps"), power.get("circuit_volts"))
    listed = feeds or [{"pdu": f"circuit{index + 1}"} for index in range(circuits)]
    if not listed:
        return _error("circuit_load", entity, "no outlets/circuits mapped to this node", limit,
                      "ratio", severity=Severity.CRITICAL)
    rated = []
    for feed in listed:
        amps, volts = feed.get("amps") or fallback[0], feed.get("volts") or fallback[1]
        if not amps or not volts:
            return _skip("circuit_load", entity, f"no rating for feed {feed.get('pdu')}: "
                         "site PDU circuit_amps/circuit_volts or profile power.circuit_amps/"
                         "circuit_volts", "ratio")
        phases = int(feed.get("phases") or 1)
        rated.append({"pdu": feed.get("pdu"), "amps": amps, "volts": volts, "phases": phases,
                      "capacity_w": round(feed_capacity_w(amps, volts, phases), 1)})
    if draw_w is None:
        return _error("circuit_load", entity, "no draw reading", limit, "ratio",
                      severity=Severity.CRITICAL)
    weakest = min(rated, key=lambda f: f["capacity_w"])
    return _bound("circuit_load", entity, round(float(draw_w) / weakest["capacity_w"], 4),
                  limit, severity=Severity.CRITICAL,
                  evidence={"draw_w": draw_w, "circuit_rating_w": weakest["capacity_w"],
                            "binding_feed": weakest["pdu"], "feeds": rated,
                            "circuits": len(rated),
                            "rule": "each feed carries the whole node when the others fail"})


def check_bmc_vs_gpu_power(bmc_node_w: float | None, gpu_sum_w: float | None, profile: Profile,
                           entity: str = "bmc") -> CheckResult:
    """BMC node power not below ``bmc_to_gpu_power_ratio_min`` x the NVML GPU sum: a node that
    reports less than its GPUs draw has a broken power sensor, and the PSU/circuit checks built
    on it cannot be trusted."""
    limit = _threshold(profile, Key.BMC_TO_GPU_POWER_RATIO_MIN)
    if limit is None:
        return _skip("bmc_gpu_power", entity, "no threshold bmc_to_gpu_power_ratio_min", "ratio")
    if bmc_node_w is None or gpu_sum_w is None:
        return _error("bmc_gpu_power", entity, "missing BMC node power or NVML GPU sum", limit,
                      "ratio")
    if gpu_sum_w <= 0:
        return _error("bmc_gpu_power", entity, "NVML GPU power sum is zero: GPUs not loaded?",
                      limit, "ratio")
    return _bound("bmc_gpu_power", entity, round(float(bmc_node_w) / float(gpu_sum_w), 4), limit,
                  severity=Severity.WARNING,
                  evidence={"bmc_node_power_w": bmc_node_w, "gpu_power_sum_w": gpu_sum_w})


def check_power_sources_agree(sources: list[dict[str, Any]], profile: Profile,
                              entity: str = "bmc") -> CheckResult:
    """The node power figures one BMC offers (EnvironmentMetrics, a chassis power Sensor,
    legacy PowerControl) within ``bmc_power_source_spread_max`` of each other, as a fraction of
    the largest. WARN, not FAIL: the node may be fine, but the budget checks read one of these
    figures and nothing says which one is right."""
    limit = _threshold(profile, Key.BMC_POWER_SOURCE_SPREAD_MAX)
    if limit is None:
        return _skip("bmc_power_sources", entity, "no threshold bmc_power_source_spread_max",
                     "ratio")
    watts = [(float(s["watts"]), str(s.get("source", ""))) for s in sources
             if isinstance(s.get("watts"), (int, float)) and not isinstance(s["watts"], bool)]
    if len(watts) <= 1:
        return _skip("bmc_power_sources", entity,
                     f"the BMC offers {len(watts)} node power figure(s); nothing to compare",
                     "ratio")
    high, low = max(w for w, _ in watts), min(w for w, _ in watts)
    if high <= 0:
        return _error("bmc_power_sources", entity, "every node power figure is zero", limit,
                      "ratio")
    spread = round((high - low) / high, 4)
    result = _bound("bmc_power_sources", entity, spread, limit, severity=Severity.WARNING,
                    evidence={"sources": {src: w for w, src in watts}})
    return replace(result, verdict=Verdict.WARN) if result.verdict is Verdict.FAIL else result


def outlet_draw_w(pdu_readings: list[Any], outlets: list[str]) -> float | None:
    """Sum the power of the outlets feeding a node, named ``PDU.outletN`` (``pdu-a.outlet3``),
    across PDU ``DeviceReading``s; None when none of them was read."""
    total, found = 0.0, False
    for dev in pdu_readings:
        for r in dev.readings:
            if (f"{dev.name}.{r.entity}" in outlets and r.quantity == "power"
                    and isinstance(r.value, float)):
                total += r.value
                found = True
    return round(total, 3) if found else None
