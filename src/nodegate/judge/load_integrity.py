"""Judging what arrived, not how fast: the whole-HBM pattern test, the copy checksums of the
bandwidth phases, the all-reduce result check and GEMM dtypes a device cannot run.

Pure functions of the plain data ``nodegate.load.hbm_test`` and ``nodegate.load.tasks``
return. A wrong word, copy or sum is FAIL by rule (no threshold: no count of wrong data is
acceptable); the pattern test's rate is judged against the profile's floor.
"""

from __future__ import annotations

from typing import Any

from nodegate.judge.common import against, make
from nodegate.judge.load_checks import CHECKS as DECLARED
from nodegate.profiles.loader import Threshold
from nodegate.profiles.threshold_keys import Key
from nodegate.results import CheckResult, Severity, Verdict
from nodegate.vocabulary import Subject

HW = Severity.HARDWARE
#: Dtypes whose GEMM checks carry a suffix (bf16 keeps the original names).
SUFFIXED_DTYPES = ("fp16", "tf32", "fp8", "fp4", "fp64")

#: Check name -> meaning: this judge's declarations, and the further GEMM dtypes' checks it
#: names when their phase did not run (``nodegate.judge.load_checks``).
CHECKS: dict[str, str] = {
    c.name: c.meaning for c in DECLARED
    if c.subject in (Subject.HBM_PATTERNS, Subject.INTEGRITY, Subject.COMPUTE_DTYPES)}


def gpu(rank: int) -> str:
    return f"gpu{rank}"


def gemm_checks(dtype: str) -> list[str]:
    """The speed and bit-compare checks one dtype's GEMM phase emits."""
    if dtype == "bf16":
        return ["gemm_tflops", "gemm_consistency"]
    return [f"gemm_tflops_{dtype}", f"gemm_consistency_{dtype}"]


def gemm_unsupported(values: dict[int, dict[str, Any]]) -> str | None:
    """The reason a GEMM dtype did not run on this node's devices, or None when it ran."""
    reasons = sorted({str(v["unsupported"]) for v in values.values() if v.get("unsupported")})
    return "; ".join(reasons) or None


def hbm_patterns(values: dict[int, dict[str, Any]], th: dict[str, Threshold]
                 ) -> list[CheckResult]:
    """Per GPU: FAIL naming the bad words' count and first addresses; the rate reached."""
    out: list[CheckResult] = []
    for rank, v in sorted(values.items()):
        entity = gpu(rank)
        errors = int(v["errors"])
        coverage = {"bytes_tested": v["bytes_tested"], "free_bytes": v["free_bytes"],
                    "fraction": v["fraction"], "rounds": v["rounds"], "passes": v["passes"],
                    "patterns": v["patterns"], "on": "gpu" if v.get("cuda") else "cpu buffer"}
        if errors:
            first = v["first_bad"][0] if v["first_bad"] else {}
            out.append(make("hbm_patterns", entity, Verdict.FAIL, measured=errors,
                            threshold=0, unit="words", severity=HW,
                            reason=f"{errors} bad word(s); first at offset "
                                   f"{first.get('offset')} ({first.get('address')}), "
                                   f"pattern {first.get('pattern')}, bits "
                                   f"{first.get('bits')}",
                            first_bad=v["first_bad"], **coverage))
        else:
            out.append(make("hbm_patterns", entity, Verdict.PASS, measured=0, threshold=0,
                            unit="words", severity=HW, **coverage))
        out.append(against("hbm_patterns_gbps", entity, round(float(v["gbps"]), 3),
                           th.get(Key.HBM_PATTERN_GBPS_MIN), counted=v["counted"],
                           seconds=round(float(v["seconds"]), 3),
                           bytes_tested=v["bytes_tested"]))
    return out


def _copy(check: str, entity: str, verify: dict[str, Any] | None, **evidence: Any
          ) -> CheckResult:
    if not verify:  # the copy ran but nothing checked it: never a pass
        return make(check, entity, Verdict.ERROR, severity=Severity.CRITICAL,
                    reason="the copy's checksums were not reported", **evidence)
    ok = bool(verify["ok"])
    return make(check, entity, Verdict.PASS if ok else Verdict.FAIL,
                measured=verify["dst_checksum"], threshold=verify["src_checksum"],
                severity=HW, bytes=verify["bytes"], **evidence,
                reason=None if ok else "the destination's checksum differs from the "
                                       "source's: the copy corrupted data")


def memory_copies(values: dict[int, dict[str, Any]]) -> list[CheckResult]:
    """HBM, H2D and D2H copies of every GPU, each placement's H2D/D2H checked."""
    out: list[CheckResult] = []
    for rank, v in sorted(values.items()):
        out.append(_copy("hbm_copy_verified", gpu(rank), v.get("hbm_verify")))
        for way in ("h2d", "d2h"):
            placements = {where: fig.get(f"{way}_verify")
                          for where, fig in (v.get("host") or {}).items()}
            bad = [w for w, ver in placements.items() if ver and not ver["ok"]]
            missing = [w for w, ver in placements.items() if not ver]
            chosen = (placements[bad[0]] if bad else None if missing or not placements
                      else placements.get("local") or next(iter(placements.values())))
            out.append(_copy(f"{way}_copy_verified", gpu(rank), chosen,
                             placements=sorted(placements), failed_placements=bad or None))
    return out


def p2p_copies(value: dict[str, Any], world: int) -> list[CheckResult]:
    verified = value.get("verify") or {}
    return [_copy("p2p_copy_verified", f"{gpu(s)}-{gpu(d)}", verified.get(f"{s}-{d}"))
            for s in range(world) for d in range(world) if s != d]


def allreduce_results(values: dict[int, dict[str, Any]]) -> list[CheckResult]:
    """Every rank's result of every swept size against the exact sum."""
    out: list[CheckResult] = []
    for rank, v in sorted(values.items()):
        rows = v.get("sweep") or []
        if not rows or any("wrong" not in r for r in rows):
            out.append(make("allreduce_verified", gpu(rank), Verdict.ERROR,
                            severity=Severity.CRITICAL, reason="no result check reported"))
            continue
        bad = [r for r in rows if r["wrong"]]
        wrong = sum(int(r["wrong"]) for r in rows)
        out.append(make(
            "allreduce_verified", gpu(rank), Verdict.FAIL if bad else Verdict.PASS,
            measured=wrong, threshold=0, unit="elements", severity=HW,
            sizes=[r["bytes"] for r in rows], world=v.get("world"),
            failed_sizes=[{"bytes": r["bytes"], "wrong": r["wrong"],
                           "first_wrong": r["first_wrong"]} for r in bad] or None,
            reason=(f"{wrong} element(s) differ from the exact sum (first at index "
                    f"{bad[0]['first_wrong']} of the {bad[0]['bytes']}-byte run)")
            if bad else None))
    return out


#: Every check a GEMM phase (speed, bit compare, completion) can emit, bf16's names included.
GEMM_PHASE_CHECKS = frozenset(
    {"gemm_completed", "gemm_tflops", "gemm_consistency", "gemm_tflops_outlier"}
    | {name for name in CHECKS if name.startswith("gemm_")})


def gemm_emitted(dtypes: list[str]) -> set[str]:
    """The GEMM checks a level that runs ``dtypes`` (in run order) emits: the first dtype's
    phase is ``gemm``, every other one's ``gemm_<dtype>``."""
    out: set[str] = set()
    for i, dtype in enumerate(dtypes):
        speed, consistency = gemm_checks(dtype)
        out |= {speed, consistency, f"{speed}_outlier",
                "gemm_completed" if i == 0 else f"gemm_{dtype}_completed"}
    return out


def gemm_not_run(dtypes: list[str], level: str) -> list[CheckResult]:
    """SKIP, saying why, every GEMM check of a dtype this level did not run: the profile
    chose its dtypes (``load.dtypes`` at every load level, ``load.acceptance_dtypes`` at
    acceptance), and a join asks every registered check for a result or a reason."""
    keys = "load.dtypes" + (" and load.acceptance_dtypes" if level == "acceptance" else "")
    why = f"the profile's {keys} at the {level} level: {', '.join(dtypes)}"
    out = []
    for name in sorted(GEMM_PHASE_CHECKS - gemm_emitted(dtypes)):
        reason = ("bf16 runs first: its phase is gemm (gemm_completed)"
                  if name == "gemm_bf16_completed" and dtypes[:1] == ["bf16"] else
                  f"not a dtype of {why}")
        out.append(make(name, "node", Verdict.SKIP, reason=reason))
    return out
