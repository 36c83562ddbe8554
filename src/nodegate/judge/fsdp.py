"""Judging the FSDP burn-in (``nodegate.load.fsdp``): loss, per-rank step times, throughput,
checkpoint write and read rates, and the bit-for-bit round trip. Pure functions of the
workers' plain figures, so every verdict is testable without torch."""

from __future__ import annotations

import math
from typing import Any

from nodegate.judge.common import against, make
from nodegate.judge.load import _head_mean, gpu
from nodegate.judge.load_checks import CHECKS as DECLARED
from nodegate.load import formulas
from nodegate.profiles.loader import Threshold
from nodegate.profiles.threshold_keys import Key
from nodegate.results import CheckResult, Severity, Verdict
from nodegate.vocabulary import Subject

#: Check name -> meaning: this judge's declarations (``nodegate.judge.load_checks``).
CHECKS: dict[str, str] = {c.name: c.meaning for c in DECLARED if c.subject is Subject.FSDP}
JUDGED = [c for c in CHECKS if c != "fsdp_completed"]

#: What every step exercises (FSDP2 semantics, ``reshard_after_forward=True``).
COLLECTIVES = ("per step and FSDP unit: all-gather for forward, all-gather again for "
               "backward, reduce-scatter of the gradients")


def _loss(losses: list[float]) -> CheckResult:
    if not all(math.isfinite(x) for x in losses):
        return make("fsdp_loss", "node", Verdict.FAIL, measured="non-finite",
                    threshold="finite", severity=Severity.CRITICAL, steps=len(losses))
    first, last = _head_mean(losses, 0.25), _head_mean(losses[::-1], 0.25)
    return make("fsdp_loss", "node", Verdict.PASS if last < first * 0.98 else Verdict.FAIL,
                measured=round(last, 4), threshold=f"< {first * 0.98:.4f}", unit="nats",
                severity=Severity.CRITICAL, first_loss=round(losses[0], 4),
                last_loss=round(losses[-1], 4), steps=len(losses),
                rule="mean of the last quarter below 0.98 x the first quarter")


def _speed(values: dict[int, dict[str, Any]], th: dict[str, Threshold],
           run: dict[str, Any]) -> list[CheckResult]:
    out: list[CheckResult] = []
    step = {r: formulas.median(v["step_s"][1:] or v["step_s"]) for r, v in values.items()}
    ref = formulas.median(list(step.values()))
    # its own margin where the profile sets one (CPU workers sharing cores spread widely)
    margin = th.get(Key.FSDP_STRAGGLER_MARGIN_PCT_MAX) or th.get(Key.STRAGGLER_MARGIN_PCT_MAX)
    for rank, t in sorted(step.items()):
        opt = values[rank].get("opt_s") or []
        out.append(against("fsdp_straggler", gpu(rank), round(formulas.pct_above(t, ref), 2),
                           margin, step_s=round(t, 6), median_step_s=round(ref, 6),
                           optimizer_s=round(formulas.median(opt), 6) if opt else None))
    slowest = max(step.values())
    first = values[min(values)]
    tokens = sum(v["tokens_per_step"] for v in values.values()) / slowest
    out.append(against("fsdp_tokens_per_s", "node", round(tokens, 2),
                       th.get(Key.FSDP_TOKENS_PER_S_MIN), ranks=len(values),
                       step_s=round(slowest, 6), n_params=first["n_params"],
                       layers=first["layers"], sizing=run.get("sizing"),
                       collectives=COLLECTIVES))
    for rank, v in sorted(values.items()):
        out.append(against("fsdp_tflops", gpu(rank),
                           round(formulas.tflops(v["flops_per_step"], step[rank]), 6),
                           th.get(Key.FSDP_TFLOPS_MIN), n_params=v["n_params"],
                           local_params=v["local_params"], precision=v["precision"],
                           steps=v["steps"],
                           flops="6N + 12 x layers x d_model x seq_len per token (PaLM, app. B)"))
    return out


def _io(values: dict[int, dict[str, Any]], th: dict[str, Threshold],
        run: dict[str, Any]) -> list[CheckResult]:
    writes = values[0]["checkpoints"]
    where = {k: run[k] for k in ("where", "checkpoint_dir", "on_array") if k in run}
    rates = [{"step": w["step"], "bytes": w["bytes"], "seconds": round(w["seconds"], 4),
              "gbps": round(formulas.gbps(w["bytes"], w["seconds"]), 4)} for w in writes]
    worst = min(rates, key=lambda r: r["gbps"])
    out = [against("fsdp_checkpoint_write", "node", worst["gbps"],
                   th.get(Key.FSDP_CHECKPOINT_WRITE_GBPS_MIN), writes=rates,
                   judged="the slowest write", fsync=True, **where)]
    last = writes[-1]
    read_s = max(v["verify"]["read_seconds"] for v in values.values())
    out.append(against("fsdp_checkpoint_read", "node",
                       round(formulas.gbps(last["bytes"], read_s), 4),
                       th.get(Key.FSDP_CHECKPOINT_READ_GBPS_MIN), bytes=last["bytes"],
                       seconds=round(read_s, 4),
                       page_cache="dropped before the read (posix_fadvise DONTNEED)",
                       files_uncached=values[0]["verify"]["files_uncached"], **where))
    return out


def _verify(values: dict[int, dict[str, Any]]) -> list[CheckResult]:
    out: list[CheckResult] = []
    for rank, v in sorted(values.items()):
        ver = v["verify"]
        first = ver["first_difference"]
        if first is None:
            out.append(make("fsdp_checkpoint_verify", gpu(rank), Verdict.PASS,
                            measured=f"{ver['tensors']} tensors identical",
                            threshold="bit-identical", tensors=ver["tensors"],
                            reference=ver["reference"], step=v["checkpoints"][-1]["step"]))
            continue
        out.append(make("fsdp_checkpoint_verify", gpu(rank), Verdict.FAIL,
                        measured=first["tensor"], threshold="bit-identical",
                        severity=Severity.CRITICAL,
                        reason=f"checkpoint did not verify: {first['tensor']} "
                               f"{first['reason']} after the reload",
                        first_difference=first, differing_tensors=ver["differing"],
                        tensors=ver["tensors"], injected=ver.get("injected"),
                        step=v["checkpoints"][-1]["step"]))
    return out


def fsdp(values: dict[int, dict[str, Any]], th: dict[str, Threshold],
         run: dict[str, Any]) -> list[CheckResult]:
    """Every FSDP check but ``fsdp_completed``; ``run`` is the resolved phase settings plus
    the pre-flight's findings (where the checkpoint went)."""
    return [_loss(values[min(values)]["losses"]), *_speed(values, th, run),
            *_io(values, th, run), *_verify(values)]
