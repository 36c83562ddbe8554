"""The standard load level on one real H200, beside plain-torch reference figures.

Run on a GPU machine (about 5-7 minutes on one H200; P2P and all-reduce SKIP: no peers):

    .venv/bin/python bench/h200_standard.py                 # real GPU, profile h200-single
    .venv/bin/python bench/h200_standard.py --dry-run       # CPU/gloo, tiny sizes, seconds

It prints one table: each of our figures, the same card's figure measured without the harness
(a plain large bf16 ``torch.matmul``, a plain fp8 ``torch._scaled_mm``, a plain
device-to-device copy, a plain pinned copy) and the ratio (goal >= 0.95). Then the
acceptance level's whole-HBM pattern test and the FSDP burn-in (model sized from the card's
memory, a DCP checkpoint written and read back verified), each run alone on the card (the
acceptance level's phases, through the same worker gang), with the rates they reached: they
have no plain-torch counterpart. Commit the
printed table to docs/hardware-runs/ with the date, GPU, driver, torch version and command
(all printed in the header). ``--api`` names another module
that provides ``run(profile, level, ...)`` (default ``nodegate.battery.load_levels``).
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

H200_LOAD = {  # ~4 minutes of load on one H200 (standard level, bf16 and fp8 GEMM)
    "dtypes": ["bf16", "fp8"], "gemm_size": 8192, "gemm_seconds": 60, "hbm_bytes": 8 << 30,
    "copy_bytes": 1 << 30, "p2p_bytes": 1 << 30, "allreduce_max_bytes": 1 << 30,
    "sample_hz": 2, "collective_timeout_s": 120, "copy_iters": 20,
    "hbm_test_fraction": 0.90, "hbm_test_seconds": 30,
    "fsdp_seconds": 40,  # the sized model (0.2 of HBM, ~1.8 B parameters on one H200)
}
DRY_LOAD = {
    "dtypes": ["bf16", "fp8"], "gemm_size": 128, "gemm_seconds": 1, "hbm_bytes": 8 << 20,
    "copy_bytes": 4 << 20, "p2p_bytes": 1 << 20, "allreduce_max_bytes": 1 << 20,
    "sample_hz": 2, "collective_timeout_s": 30, "copy_iters": 5,
    "hbm_test_fraction": 0.90, "hbm_test_seconds": 1, "hbm_test_cpu_bytes": 1 << 20,
    "fsdp_seconds": 2,
}
#: Our figures with no plain-torch counterpart: printed with n/a in the reference columns.
OURS_ONLY = ("hbm_patterns_gbps", "fsdp_tflops", "fsdp_tokens_per_s")


def _profile(dry: bool) -> dict[str, Any]:
    """The shipped ``h200-single`` profile, one GPU, our load sizes. A dry run keeps the
    profile's thresholds too (CPU figures then FAIL them: the point is that every check finds
    its threshold and the import path works where only the bench's packages are installed)."""
    from nodegate.profiles import resolve_profile

    prof: Any = resolve_profile("h200-single")
    data: dict[str, Any] = dict(getattr(prof, "data", prof))
    data["load"] = {**(data.get("load") or {}), **(DRY_LOAD if dry else H200_LOAD)}
    data["gpu"] = {**(data.get("gpu") or {}), "count": 1}
    return data


def _timed(fn: Any, sync: Any, seconds: float) -> tuple[int, float]:
    fn()
    sync()
    iters, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(10):
            fn()
        sync()
        iters += 10
    return iters, time.perf_counter() - start


def _plain(load: dict[str, Any], cuda: bool, seconds: float) -> dict[str, float]:
    import torch

    dev = torch.device("cuda" if cuda else "cpu")
    if not cuda:
        torch.set_num_threads(1)  # as each CPU worker of the harness runs

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    n = int(load["gemm_size"])
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    iters, el = _timed(lambda: torch.matmul(a, b), sync, seconds)
    out = {"gemm_tflops": 2 * n**3 * iters / el / 1e12}
    fp8 = _plain_fp8(n if cuda else min(n, 64), dev, sync, seconds / 2)
    if fp8 is not None:
        out["gemm_tflops_fp8"] = fp8
    half = int(load["hbm_bytes"]) // 2
    # written before timing, as the harness's buffers are: untouched host pages all map the
    # kernel's one zero page, and reading it runs from cache
    src = torch.empty(half, dtype=torch.uint8, device=dev).fill_(7)
    dst = torch.empty_like(src)
    iters, el = _timed(lambda: dst.copy_(src), sync, seconds / 3)
    out["hbm_bandwidth"] = 2 * half * iters / el / 1e9
    nbytes = int(load["copy_bytes"])
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=cuda).fill_(3)
    devbuf = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    iters, el = _timed(lambda: devbuf.copy_(host, non_blocking=True), sync, seconds / 3)
    out["h2d_bandwidth"] = nbytes * iters / el / 1e9
    iters, el = _timed(lambda: host.copy_(devbuf, non_blocking=True), sync, seconds / 3)
    out["d2h_bandwidth"] = nbytes * iters / el / 1e9
    return out


def _plain_fp8(n: int, dev: Any, sync: Any, seconds: float) -> float | None:
    """A plain e4m3 ``torch._scaled_mm`` (unit scales, bf16 out), or None where the device or
    this torch has none (compute capability below 8.9)."""
    import torch

    if not hasattr(torch, "_scaled_mm") or (
            dev.type == "cuda" and torch.cuda.get_device_capability(dev) < (8, 9)):
        return None
    a = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn).t()  # column-major, as required
    one = torch.ones((), device=dev)
    iters, el = _timed(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one,
                                                out_dtype=torch.bfloat16), sync, seconds)
    return 2 * n**3 * iters / el / 1e12


def hbm_patterns(profile: dict[str, Any], dry: bool) -> tuple[list[Any], float]:
    """The acceptance level's whole-HBM pattern test on this one card, through a worker gang
    as the level runs it; its judged results and the phase's wall time."""
    from nodegate.judge import load as verdicts
    from nodegate.judge import load_integrity
    from nodegate.load import config, devices, hbm_test
    from nodegate.load.workers import Gang

    cfg = config.from_profile(profile, "acceptance")
    backend = devices.for_world(devices.choose("cpu" if dry else "cuda"), 1)
    gang = Gang(1, backend, collective_timeout_s=cfg.collective_timeout_s)
    try:
        started = gang.start()
        if not started.ok:
            return verdicts.phase_completed(started, 1), started.duration_s
        outcome = gang.run("hbm_patterns", hbm_test.patterns, 4 * cfg.hbm_test_seconds + 120,
                           kwargs={"fraction": cfg.hbm_test_fraction,
                                   "seconds": cfg.hbm_test_seconds,
                                   "cpu_bytes": cfg.hbm_test_cpu_bytes,
                                   "chunk_bytes": cfg.hbm_test_chunk_bytes})
    finally:
        gang.close()
    results = verdicts.phase_completed(outcome, 1)
    if outcome.ok:
        results += load_integrity.hbm_patterns(outcome.values,
                                               verdicts.thresholds_of(profile))
    return results, outcome.duration_s


def fsdp_step(profile: dict[str, Any], dry: bool) -> tuple[list[Any], float]:
    """The acceptance level's FSDP burn-in on this one card (sized from its memory, sharded
    over one rank: the step, the DCP checkpoint write and the verified read), through a
    worker gang as the level runs it; its judged results and the phase's wall time. The
    checkpoint goes to the profile's ``fsdp_checkpoint_dir`` and is removed afterwards."""
    import os
    import shutil

    from nodegate.judge import fsdp as fsdp_verdicts
    from nodegate.judge import load as verdicts
    from nodegate.load import config, devices, fsdp, fsdp_size
    from nodegate.load.workers import Gang

    cfg = config.from_profile(profile, "acceptance")
    backend = devices.for_world(devices.choose("cpu" if dry else "cuda"), 1)
    settings = fsdp_size.resolve(cfg.fsdp, cuda=backend.cuda, world=1)
    where = fsdp_size.preflight(settings)
    settings = {**settings, "checkpoint_dir": os.path.join(
        settings["checkpoint_dir"], f"bench-{os.getpid()}")}
    gang = Gang(1, backend, collective_timeout_s=cfg.collective_timeout_s)
    try:
        started = gang.start()
        if not started.ok:
            return verdicts.phase_completed(started, 1), started.duration_s
        outcome = gang.run("fsdp", fsdp.train, float(settings["seconds"]) + 600,
                           kwargs={"fsdp": settings})
    finally:
        gang.close()
        shutil.rmtree(settings["checkpoint_dir"], ignore_errors=True)
    results = verdicts.phase_completed(outcome, 1)
    if outcome.ok:
        results += fsdp_verdicts.fsdp(outcome.values, verdicts.thresholds_of(profile),
                                      {**settings, **where})
    return results, outcome.duration_s


def references(load: dict[str, Any], cuda: bool, seconds: float) -> dict[str, float]:
    """The same card without our harness: plain matmul, plain D2D copy, plain pinned copies."""
    figures = _plain(load, cuda, seconds)
    if cuda:
        import torch

        torch.cuda.empty_cache()  # hand the blocks back: the harness's workers need the memory
    return figures


def header(cuda: bool, command: str) -> list[str]:
    import torch

    lines = [f"date: {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}",
             f"torch: {torch.__version__}", f"python: {platform.python_version()}",
             f"command: {command}"]
    if cuda:
        lines.append(f"gpu: {torch.cuda.get_device_name(0)}")
        lines.append(f"cuda (torch build): {torch.version.cuda}")
        try:
            import pynvml

            pynvml.nvmlInit()
            lines.append(f"driver: {pynvml.nvmlSystemGetDriverVersion()}")
        except Exception as exc:
            lines.append(f"driver: unknown ({exc})")
    else:
        lines.append("gpu: none (dry run on CPU/gloo: figures are not GPU figures)")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--dry-run", action="store_true", help="CPU/gloo with tiny sizes")
    parser.add_argument("--api", default="nodegate.battery.load_levels",
                        help="module providing run(profile, level, ...)")
    parser.add_argument("--json", type=Path, help="also write the outcome here")
    parser.add_argument("--duration-scale", type=float, default=1.0)
    parser.add_argument("--level", choices=["standard", "acceptance"], default="standard",
                        help="acceptance adds the burn-in and the soak (their figures are "
                             "in the verdicts under the table)")
    args = parser.parse_args(argv)
    api: Any = importlib.import_module(args.api)
    device = "cpu" if args.dry_run else "cuda"
    profile = _profile(args.dry_run)
    ref_s = 3.0 if args.dry_run else 20.0
    # the plain figures before and after the harness: the card is cool before and hot after,
    # and each of ours is divided by the better of the two (the ratio can only be understated)
    before = references(profile["load"], not args.dry_run, ref_s)
    started = time.monotonic()
    outcome = api.run(profile, args.level, duration_scale=args.duration_scale, workers=1,
                      device=device, progress=lambda line: print(line, file=sys.stderr))
    harness_s = time.monotonic() - started
    hbm_results, hbm_s = hbm_patterns(profile, args.dry_run)
    fsdp_results, fsdp_s = fsdp_step(profile, args.dry_run)
    after = references(profile["load"], not args.dry_run, ref_s)
    refs = {name: max(before[name], after[name]) for name in before}
    results = [*outcome.results, *hbm_results, *fsdp_results]
    ours: dict[str, float] = {}
    for r in results:
        if (r.entity in ("gpu0", "node") and (r.check in refs or r.check in OURS_ONLY)
                and isinstance(r.measured, int | float)):
            ours[r.check] = float(r.measured)
    print("\n".join(header(not args.dry_run, " ".join(sys.argv))))
    print(f"level: {args.level}, duration scale {args.duration_scale}")
    print(f"backend: {outcome.backend}   harness wall time: {harness_s:.1f} s   "
          f"hbm_patterns phase: {hbm_s:.1f} s   fsdp phase: {fsdp_s:.1f} s\n")
    print(f"| {'figure':<17} | {'nodegate':>10} | {'plain before':>12} | {'plain after':>12} "
          f"| {'ratio':>6} | unit |")
    print(f"|{'-' * 19}|{'-' * 12}|{'-' * 14}|{'-' * 14}|{'-' * 8}|------|")
    for name, ref in refs.items():
        mine = ours.get(name)
        ratio = f"{mine / ref:6.3f}" if mine and ref else "   n/a"
        unit = "TFLOPS" if "tflops" in name else "GB/s"
        shown = f"{mine:10.2f}" if mine is not None else f"{'n/a':>10}"
        print(f"| {name:<17} | {shown} | {before[name]:12.2f} | {after[name]:12.2f} "
              f"| {ratio} | {unit} |")
    for name in OURS_ONLY:
        mine = ours.get(name)
        shown = f"{mine:10.2f}" if mine is not None else f"{'n/a':>10}"
        unit = {"fsdp_tflops": "TFLOPS", "fsdp_tokens_per_s": "tok/s"}.get(name, "GB/s")
        print(f"| {name:<17} | {shown} | {'n/a':>12} | {'n/a':>12} | {'n/a':>6} | {unit} |")
    print("\nratio: nodegate's figure / the better plain-torch figure (goal >= 0.95); "
          "hbm_patterns_gbps: bytes written + verified per second over "
          f"{profile['load']['hbm_test_fraction']:.0%} of the free memory")
    print("\nverdicts:")
    for r in results:
        if r.entity in ("gpu0", "node"):
            reason = r.evidence.get("reason", "")
            print(f"  {r.test_id:<34} {r.verdict.value:<5} {r.measured!s:<20} {r.unit} {reason}")
    if args.json:
        args.json.write_text(json.dumps({"results": [r.to_dict() for r in results],
                                         "references": {"before": before, "after": after},
                                         "backend": outcome.backend,
                                         "phases": outcome.phases}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
