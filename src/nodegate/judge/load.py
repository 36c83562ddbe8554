"""Judging the load phases: figures from ``nodegate.load`` (``tasks``, ``burnin``,
``telemetry``, ``workers``) against the profile.

Pure functions of plain data, so every verdict is testable without torch or a GPU. Thresholds
are looked up by ``Key``; the battery refuses a profile without one a running check needs
(called without it, a check SKIPs with the reason); a phase that ended early (a rank died or hung)
FAILs ``<phase>_completed`` naming the rank and its last step, and the checks that needed its
figures SKIP saying so.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from nodegate.judge.common import against, make, threshold_repr
from nodegate.judge.load_checks import BUSBW_KEY, GEMM_TFLOPS_KEY, HOST_COPY_KEY, P2P_KEY
from nodegate.load import formulas
from nodegate.load.telemetry import Telemetry
from nodegate.load.workers import PhaseOutcome, causes
from nodegate.probes import nvml_codes
from nodegate.profiles import loader
from nodegate.profiles.loader import Threshold
from nodegate.profiles.threshold_keys import Key
from nodegate.results import CheckResult, Severity, Verdict

CRIT = Severity.CRITICAL
HW = Severity.HARDWARE

#: nvmlClocksEventReason bits that mean the board itself is in trouble (from nvml_codes).
EVENT_BITS = nvml_codes.CLOCK_EVENT_FATAL_BITS
#: Phases whose telemetry windows count as "under GEMM-class load".
LOAD_PHASES = ("gemm", "soak", "burnin", "fsdp")


def thresholds_of(profile: dict[str, Any]) -> dict[str, Threshold]:
    """The profile's thresholds by name (``profiles.loader`` parses them, here and there)."""
    return loader.thresholds_of(profile)


def gpu(rank: int) -> str:
    return f"gpu{rank}"


def phase_completed(outcome: PhaseOutcome, world: int) -> list[CheckResult]:
    """PASS on ``node`` when every rank finished; otherwise FAIL per rank that died or hung."""
    check = f"{outcome.name}_completed"
    if outcome.ok:
        return [make(check, "node", Verdict.PASS, measured=world, unit="ranks",
                     duration_s=round(outcome.duration_s, 3))]
    named = causes(outcome.failures)
    others = [f.evidence() for f in outcome.failures if f not in named]
    return [make(check, gpu(f.rank), Verdict.FAIL, measured=f.kind, threshold="completed",
                 severity=CRIT, **f.evidence(), consequences=others or None)
            for f in named]


def skipped(checks: Iterable[str], reason: str, entity: str = "node") -> list[CheckResult]:
    return [make(c, entity, Verdict.SKIP, reason=reason) for c in checks]


def errored(checks: Iterable[str], reason: str, entity: str = "node") -> list[CheckResult]:
    """Checks the node should have answered and did not: ERROR, never SKIP (docs/verdicts.md)."""
    return [make(c, entity, Verdict.ERROR, severity=Severity.CRITICAL, reason=reason)
            for c in checks]


def outliers(check: str, figures: dict[str, float], unit: str,
             margin: Threshold | None) -> list[CheckResult]:
    """WARN an entity more than the profile's margin below the node's own median."""
    name = f"{check}_outlier"
    if margin is None:
        return skipped([name], "no outlier_margin_pct_max in the profile")
    if len(figures) < 3:
        return skipped([name], f"{len(figures)} figure(s): a median needs at least 3 to name "
                       "a weak one")
    ref = formulas.median(list(figures.values()))
    out = []
    for entity, value in sorted(figures.items()):
        below = formulas.pct_below(value, ref)
        verdict = Verdict.WARN if below > margin.value else Verdict.PASS
        out.append(make(name, entity, verdict, measured=round(below, 2),
                        threshold=threshold_repr(margin), unit="%", severity=Severity.WARNING,
                        value=value, value_unit=unit, node_median=ref))
    return out


def gemm(values: dict[int, dict[str, Any]], th: dict[str, Threshold],
         *, speed: bool = True) -> list[CheckResult]:
    """TFLOPS per GPU and the cross-GPU bit-identity compare (gpu-burn's, across the node)."""
    out: list[CheckResult] = []
    dtype = next(iter(values.values()))["dtype"]
    check = "gemm_tflops" if dtype == "bf16" else f"gemm_tflops_{dtype}"
    consistency = "gemm_consistency" if dtype == "bf16" else f"gemm_consistency_{dtype}"
    if speed:
        for rank, v in sorted(values.items()):
            # six significant figures: a CPU fp8 figure (~1e-6 TFLOPS) keeps its digits
            out.append(against(check, gpu(rank), float(f"{v['tflops']:.6g}"),
                               th.get(GEMM_TFLOPS_KEY[dtype]), dtype=dtype, n=v["n"],
                               iterations=v["iterations"], seconds=round(v["seconds"], 3)))
    reference, odd = formulas.odd_ones_out({gpu(r): v["digest"] for r, v in values.items()})
    for rank, v in sorted(values.items()):
        entity = gpu(rank)
        bad_self = int(v["self_mismatches"])
        if entity in odd or bad_self:
            if reference is None and entity in odd:
                why = "no majority output among the GPUs: cannot tell which one is right"
            elif entity in odd:
                why = "output differs from the other GPUs' (same seeded inputs)"
            else:
                why = f"{bad_self} iteration(s) differ from this GPU's first result"
            out.append(make(consistency, entity, Verdict.FAIL, measured=v["digest"][:16],
                            threshold=(reference or "majority")[:16], severity=HW, dtype=dtype,
                            reason=f"silent data corruption suspected: {why}",
                            self_mismatches=bad_self, peers=len(values)))
        else:
            out.append(make(consistency, entity, Verdict.PASS,
                            measured=v["digest"][:16], threshold=(reference or "")[:16],
                            dtype=dtype, peers=len(values)))
    if speed:
        out += outliers(check, {gpu(r): float(v["tflops"]) for r, v in values.items()},
                        "TFLOPS", th.get(Key.OUTLIER_MARGIN_PCT_MAX))
    return out


def memory(values: dict[int, dict[str, Any]], th: dict[str, Threshold]) -> list[CheckResult]:
    out: list[CheckResult] = []
    hbm = {gpu(r): float(v["hbm_gbps"]) for r, v in sorted(values.items())}
    for entity, value in hbm.items():
        out.append(against("hbm_bandwidth", entity, round(value, 3),
                           th.get(Key.HBM_BANDWIDTH_GBPS_MIN), counted="bytes read + written"))
    out += outliers("hbm_bandwidth", hbm, "GB/s", th.get(Key.OUTLIER_MARGIN_PCT_MAX))
    for way in ("h2d", "d2h"):
        figures: dict[str, float] = {}
        for rank, v in sorted(values.items()):
            local = v["host"].get("local", {})
            remote = v["host"].get("remote")
            value = float(local.get(f"{way}_gbps", 0.0))
            figures[gpu(rank)] = value
            out.append(against(
                f"{way}_bandwidth", gpu(rank), round(value, 3), th.get(HOST_COPY_KEY[way]),
                numa_node=local.get("numa_node"), cpu_bound=local.get("cpu_bound"),
                remote_numa_node=remote.get("numa_node") if remote else None,
                remote_gbps=round(remote[f"{way}_gbps"], 3) if remote else None,
                pinned=v.get("pinned"), pinning=local.get("pinning"),
                pages_on_node=local.get("pages_on_node"), placed=local.get("placed")))
        out += outliers(f"{way}_bandwidth", figures, "GB/s", th.get(Key.OUTLIER_MARGIN_PCT_MAX))
    return out


def p2p_matrix(value: dict[str, Any], world: int) -> dict[str, Any]:
    entities = [gpu(i) for i in range(world)]
    return {f"p2p_{kind}_gbps": {"unit": "GB/s", "entities": entities,
                                 "values": [[round(x, 3) for x in row]
                                            for row in value[f"{kind}_gbps"]]}
            for kind in ("unidir", "bidir")}


def p2p(value: dict[str, Any], world: int, th: dict[str, Threshold]) -> list[CheckResult]:
    out: list[CheckResult] = []
    for kind in ("unidir", "bidir"):
        figures: dict[str, float] = {}
        for s in range(world):
            for d in range(world):
                if s == d:
                    continue
                entity = f"{gpu(s)}-{gpu(d)}"
                figures[entity] = float(value[f"{kind}_gbps"][s][d])
                out.append(against(f"p2p_{kind}", entity, round(figures[entity], 3),
                                   th.get(P2P_KEY[kind]),
                                   peer_access=value["peer_access"][s][d],
                                   bytes=value["bytes"]))
        out += outliers(f"p2p_{kind}", figures, "GB/s", th.get(Key.OUTLIER_MARGIN_PCT_MAX))
    return out


def allreduce(value: dict[str, Any], th: dict[str, Threshold]) -> list[CheckResult]:
    """Judged at the largest size of the sweep (the profile's); the sweep kept as evidence."""
    sweep = value["sweep"]
    top = max(sweep, key=lambda r: r["bytes"])
    return [against("allreduce_busbw", "node", round(top["busbw_gbps"], 4),
                    th.get(Key.ALLREDUCE_BUSBW_GBPS_MIN), bytes=top["bytes"],
                    algbw_gbps=round(top["algbw_gbps"], 4), world=value["world"],
                    factor=formulas.busbw_factor(value["world"]),
                    sweep=[{k: (round(v, 6) if isinstance(v, float) else v)
                            for k, v in row.items()} for row in sweep])]


COLLECTIVE_CHECK = formulas.COLLECTIVE_CHECK
NODE_COLLECTIVES = formulas.NODE_COLLECTIVES


def collectives(value: dict[str, Any], th: dict[str, Threshold]) -> list[CheckResult]:
    """Each collective's busbw at the largest size against ``<infix>_busbw_gbps_min``; a
    collective the completed phase did not report is ERROR (it was not measured)."""
    out = []
    world = int(value["world"])
    for name in NODE_COLLECTIVES:
        check = f"{COLLECTIVE_CHECK[name]}_busbw"
        rows = (value.get("collectives") or {}).get(name) or []
        if not rows:
            out += errored([check], f"the phase reported no {name} sweep")
            continue
        top = max(rows, key=lambda r: r["bytes"])
        out.append(against(check, "node", round(top["busbw_gbps"], 4),
                           th.get(BUSBW_KEY[COLLECTIVE_CHECK[name]]), collective=name,
                           bytes=top["bytes"],
                           algbw_gbps=round(top["algbw_gbps"], 4), world=world,
                           factor=formulas.collective_factor(name, world),
                           sweep=_rounded(rows)))
    return out



#: The multi-node check's catalogue (``nodegate multinode``; not part of the node's battery).
MULTINODE_CHECKS: dict[str, str] = {
    "multinode_completed": "every node of the group finished the collective sweeps together",
    **{f"multinode_{infix}_busbw": f"{name} bus bandwidth with a known-good node (nccl-tests "
                                   "busbw over every node's ranks)"
       for name, infix in COLLECTIVE_CHECK.items() if name != "broadcast"},
}


#: nccl-tests collective -> the floor of its busbw between this node and known-good ones.
MULTINODE_BUSBW_KEY: dict[str, Key] = {
    "all_reduce": Key.MULTINODE_ALLREDUCE_BUSBW_GBPS_MIN,
    "all_gather": Key.MULTINODE_ALLGATHER_BUSBW_GBPS_MIN,
    "reduce_scatter": Key.MULTINODE_REDUCESCATTER_BUSBW_GBPS_MIN,
    "alltoall": Key.MULTINODE_ALLTOALL_BUSBW_GBPS_MIN,
}


def _rounded(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: (round(v, 6) if isinstance(v, float) else v) for k, v in r.items()}
            for r in rows]


def multinode(ok: bool, value: dict[str, Any] | None, evidence: dict[str, Any],
              th: dict[str, Threshold], entity: str, *,
              collectives: Iterable[str] = ("all_reduce",)) -> list[CheckResult]:
    """The group run: completed (else FAIL with torchrun's exit and output), then each
    collective's busbw at the profile's size against ``multinode_<infix>_busbw_gbps_min``.
    A collective the completed run did not report is ERROR: it was not measured."""
    names = list(collectives)
    checks = [f"multinode_{COLLECTIVE_CHECK[n]}_busbw" for n in names]
    sweeps = dict((value or {}).get("collectives") or {})
    if value is not None and "all_reduce" not in sweeps and value.get("sweep"):
        sweeps["all_reduce"] = value["sweep"]  # a worker from before the other collectives
    if not ok or value is None or not any(sweeps.values()):
        why = ("deadline passed" if evidence.get("timed_out") else
               f"torchrun exited {evidence.get('exit_code')}")
        return [make("multinode_completed", entity, Verdict.FAIL, measured=why,
                     threshold="completed", severity=CRIT, **evidence),
                *skipped(checks, "the group run did not complete", entity)]
    world = int(value["world"])
    out = [make("multinode_completed", entity, Verdict.PASS, measured=world, unit="ranks",
                hosts=value.get("hosts"), duration_s=evidence.get("duration_s"))]
    for name, check in zip(names, checks, strict=True):
        rows = sweeps.get(name) or []
        if not rows:
            out += errored([check], f"the run reported no {name} sweep", entity)
            continue
        top = max(rows, key=lambda r: r["bytes"])
        out.append(against(
            check, entity, round(top["busbw_gbps"], 4), th.get(MULTINODE_BUSBW_KEY[name]),
            reason_missing=f"no {MULTINODE_BUSBW_KEY[name]} in the profile (the inter-node "
                           "fabric is the site's: set it in a site profile)",
            collective=name, bytes=top["bytes"], algbw_gbps=round(top["algbw_gbps"], 4),
            world=world, factor=formulas.collective_factor(name, world),
            hosts=value.get("hosts"), backend=value.get("backend"), sweep=_rounded(rows)))
    return out


def _head_mean(values: list[float], frac: float) -> float:
    k = max(1, int(len(values) * frac))
    return sum(values[:k]) / k


def burnin(values: dict[int, dict[str, Any]], th: dict[str, Threshold]) -> list[CheckResult]:
    out: list[CheckResult] = []
    losses = values[min(values)]["losses"]
    finite = all(math.isfinite(x) for v in values.values() for x in v["losses"])
    if finite:
        first, last = _head_mean(losses, 0.25), _head_mean(losses[::-1], 0.25)
        falling = last < first * 0.98
        out.append(make("burnin_loss", "node", Verdict.PASS if falling else Verdict.FAIL,
                        measured=round(last, 4), threshold=f"< {first * 0.98:.4f}",
                        unit="nats", severity=CRIT, first_loss=round(losses[0], 4),
                        last_loss=round(losses[-1], 4), steps=len(losses),
                        rule="mean of the last quarter below 0.98 x the first quarter"))
    else:
        out.append(make("burnin_loss", "node", Verdict.FAIL, measured="non-finite",
                        threshold="finite", severity=CRIT, steps=len(losses)))
    # stragglers: per-rank median forward time (no collective in it) vs the median rank
    fwd = {gpu(r): formulas.median(v["forward_s"][1:] or v["forward_s"])
           for r, v in sorted(values.items())}
    ref = formulas.median(list(fwd.values()))
    for entity, t in fwd.items():
        out.append(against("burnin_straggler", entity, round(formulas.pct_above(t, ref), 2),
                           th.get(Key.STRAGGLER_MARGIN_PCT_MAX), forward_s=round(t, 6),
                           median_forward_s=round(ref, 6)))
    step = {r: formulas.median(v["step_s"][1:] or v["step_s"]) for r, v in values.items()}
    slowest = max(step.values())
    tokens = sum(v["tokens_per_step"] for v in values.values()) / slowest
    out.append(against("burnin_tokens_per_s", "node", round(tokens, 2),
                       th.get(Key.BURNIN_TOKENS_PER_S_MIN), ranks=len(values),
                       step_s=round(slowest, 6)))
    for rank, v in sorted(values.items()):
        out.append(against("burnin_tflops", gpu(rank),
                           round(formulas.tflops(v["flops_per_step"], step[rank]), 6),
                           th.get(Key.BURNIN_TFLOPS_MIN), n_params=v["n_params"],
                           precision=v["precision"], steps=v["steps"]))
    reference, odd = formulas.odd_ones_out({gpu(r): v["param_digest"] for r, v in values.items()})
    for rank, v in sorted(values.items()):
        bad = gpu(rank) in odd
        out.append(make("burnin_param_consistency", gpu(rank),
                        Verdict.FAIL if bad else Verdict.PASS, measured=v["param_digest"][:16],
                        threshold=(reference or "majority")[:16], severity=HW,
                        reason="parameters diverged from the other ranks" if bad else None))
    return out


TELEMETRY_CHECKS = ("thermal_peak", "mem_temp_peak", "thermal_events", "power_under_load",
                    "clock_floor")


def load_seconds(tel: Telemetry, phases: tuple[str, ...] = LOAD_PHASES) -> float:
    """How long the GEMM-class phases loaded the GPUs, summed over their windows."""
    return sum(b - a for p, a, b in tel.windows if p in phases)


def telemetry(tel: Telemetry, th: dict[str, Threshold], entities: list[str], *,
              power_settle_s: float = 0.0) -> list[CheckResult]:
    """Peaks, events, power and clocks per GPU. Power is judged only after at least
    ``power_settle_s`` of GEMM-class load: NVML's power reading is an average over about a
    second and a board takes seconds to reach its draw, so a shorter run (a scaled-down
    test) says nothing about the power the GPU can reach."""
    loaded_s = load_seconds(tel)
    if not tel.available:  # GPUs under load whose telemetry nobody could read
        return [r for e in entities
                for r in errored(TELEMETRY_CHECKS, f"telemetry unavailable: {tel.reason}", e)]
    out: list[CheckResult] = []
    for entity in entities:
        static = tel.static.get(entity)
        temps = tel.samples(entity, "temp_c")
        if static is None or not temps:
            out += errored(TELEMETRY_CHECKS, "no telemetry samples for this GPU under load",
                           entity)
            continue
        peak = max(temps)
        if static.slowdown_c is None:
            out += skipped(["thermal_peak"], "slowdown threshold not reported", entity)
        else:
            out.append(against("thermal_peak", entity, round(static.slowdown_c - peak, 2),
                               th.get(Key.THERMAL_MARGIN_C_MIN), severity=HW, peak_c=peak,
                               slowdown_c=static.slowdown_c, samples=len(temps)))
        mem = tel.samples(entity, "mem_temp_c")
        out.append(against("mem_temp_peak", entity, max(mem) if mem else None,
                           th.get(Key.MEM_TEMP_MAX_C), severity=HW))
        reasons = [int(x) for x in tel.samples(entity, "clock_event_reasons")]
        seen = 0
        for mask in reasons:
            seen |= mask
        events = [name for bit, name in EVENT_BITS.items() if seen & bit]
        if not reasons:
            out += skipped(["thermal_events"], "clock event reasons not reported", entity)
        else:
            out.append(make("thermal_events", entity, Verdict.FAIL if events else Verdict.PASS,
                            measured=events or "none", threshold="none", severity=HW,
                            samples=len(reasons)))
        power = tel.samples(entity, "power_w", LOAD_PHASES)
        if loaded_s < power_settle_s:
            out += skipped(["power_under_load"], f"GEMM-class load lasted {loaded_s:.1f} s, "
                           f"under the {power_settle_s:.0f} s power needs to settle", entity)
        elif not power or not static.power_limit_w:
            out += skipped(["power_under_load"], "no power samples under GEMM or no limit",
                           entity)
        else:
            out.append(against("power_under_load", entity,
                               round(max(power) / static.power_limit_w, 4),
                               th.get(Key.POWER_FRACTION_MIN), peak_w=max(power),
                               limit_w=static.power_limit_w, samples=len(power)))
        clocks = tel.samples(entity, "sm_clock_mhz", LOAD_PHASES)
        out.append(against("clock_floor", entity,
                           formulas.median(clocks) if clocks else None,
                           th.get(Key.CLOCK_FLOOR_MHZ_MIN),
                           minimum_mhz=min(clocks) if clocks else None, samples=len(clocks)))
    return out


def pcie_under_load(tel: Telemetry, entities: list[str], gen: int | None) -> list[CheckResult]:
    """The current PCIe generation under load against the profile's ``pcie.gen``, judged
    by the highest generation sampled while the GPUs were busy: an idle GPU trains its link
    down to save power, so only a link that never reaches the profile's gen under load is
    slow. Unsampled is ERROR: a link not seen under load has not been shown to train."""
    check = "pcie_gen_under_load"
    if gen is None:
        return [r for e in entities for r in skipped([check], "no pcie.gen in the profile", e)]
    expected = f">= Gen{gen}"
    if not tel.available:
        return [make(check, e, Verdict.ERROR, threshold=expected, severity=HW,
                     reason=f"PCIe generation not sampled under load: {tel.reason}")
                for e in entities]
    out: list[CheckResult] = []
    for entity in entities:
        gens = [int(g) for g in tel.samples_loaded(entity, "pcie_gen")]
        if not gens:
            out.append(make(check, entity, Verdict.ERROR, threshold=expected, severity=HW,
                            reason="no PCIe generation sampled while the GPU was busy"))
            continue
        peak = max(gens)
        ok = peak >= gen
        out.append(make(check, entity, Verdict.PASS if ok else Verdict.FAIL,
                        measured=f"Gen{peak}", threshold=expected, severity=HW,
                        lowest=f"Gen{min(gens)}", samples=len(gens),
                        hint=None if ok else "the link never trained to the profile's gen "
                                             "under load: reseat the GPU or check the riser"))
    return out
