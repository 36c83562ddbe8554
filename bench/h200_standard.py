"""The standard load level on one real H200, beside plain-torch reference figures.

Run on a GPU machine (about 5-7 minutes on one H200; P2P and all-reduce SKIP: no peers):

    .venv/bin/python bench/h200_standard.py                 # real GPU, profile h200-single
    .venv/bin/python bench/h200_standard.py --dry-run       # CPU/gloo, tiny sizes, seconds

It prints one table: each of our figures, the same card's figure measured without the harness
(a plain large bf16 ``torch.matmul``, a plain device-to-device copy, a plain pinned copy) and
the ratio (goal >= 0.95). Commit the printed table to docs/hardware-runs/ with the date, GPU,
driver, torch version and command (all printed in the header). ``--api`` names another module
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

H200_LOAD = {  # ~3 minutes of load on one H200 (standard level)
    "dtypes": ["bf16"], "gemm_size": 8192, "gemm_seconds": 60, "hbm_bytes": 8 << 30,
    "copy_bytes": 1 << 30, "p2p_bytes": 1 << 30, "allreduce_max_bytes": 1 << 30,
    "sample_hz": 2, "collective_timeout_s": 120, "copy_iters": 20,
}
DRY_LOAD = {
    "dtypes": ["bf16"], "gemm_size": 128, "gemm_seconds": 1, "hbm_bytes": 8 << 20,
    "copy_bytes": 4 << 20, "p2p_bytes": 1 << 20, "allreduce_max_bytes": 1 << 20,
    "sample_hz": 2, "collective_timeout_s": 30, "copy_iters": 5,
}


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
    after = references(profile["load"], not args.dry_run, ref_s)
    refs = {name: max(before[name], after[name]) for name in before}
    ours: dict[str, float] = {}
    for r in outcome.results:
        if r.entity == "gpu0" and r.check in refs and isinstance(r.measured, int | float):
            ours[r.check] = float(r.measured)
    print("\n".join(header(not args.dry_run, " ".join(sys.argv))))
    print(f"level: {args.level}, duration scale {args.duration_scale}")
    print(f"backend: {outcome.backend}   harness wall time: {harness_s:.1f} s\n")
    print(f"| {'figure':<16} | {'nodegate':>10} | {'plain before':>12} | {'plain after':>12} "
          f"| {'ratio':>6} | unit |")
    print(f"|{'-' * 18}|{'-' * 12}|{'-' * 14}|{'-' * 14}|{'-' * 8}|------|")
    for name, ref in refs.items():
        mine = ours.get(name)
        ratio = f"{mine / ref:6.3f}" if mine and ref else "   n/a"
        unit = "TFLOPS" if "tflops" in name else "GB/s"
        shown = f"{mine:10.2f}" if mine is not None else f"{'n/a':>10}"
        print(f"| {name:<16} | {shown} | {before[name]:12.2f} | {after[name]:12.2f} "
              f"| {ratio} | {unit} |")
    print("\nratio: nodegate's figure / the better plain-torch figure (goal >= 0.95)")
    print("\nverdicts:")
    for r in outcome.results:
        if r.entity in ("gpu0", "node"):
            reason = r.evidence.get("reason", "")
            print(f"  {r.test_id:<34} {r.verdict.value:<5} {r.measured!s:<20} {r.unit} {reason}")
    if args.json:
        args.json.write_text(json.dumps({"results": [r.to_dict() for r in outcome.results],
                                         "references": {"before": before, "after": after},
                                         "backend": outcome.backend,
                                         "phases": outcome.phases}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
