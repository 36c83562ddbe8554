"""``nodegate validate --level standard|acceptance``: load every GPU and judge what it delivers.

Same outputs and exit codes as ``nodegate health``; the quick checks run first, so a node
that is already sick fails fast without being loaded.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any


def register(subparsers: Any) -> None:
    from nodegate.battery.session import add_common_arguments

    parser = subparsers.add_parser(
        "validate", help="full validation: quick checks, then GEMM/bandwidth/burn-in load",
        description="Run the battery at the standard (~3 min) or acceptance (<= 15 min) level. "
                    "Exit 0 passed, 1 a check failed, 2 bad input, 3 could not run.")
    parser.add_argument("--level", choices=("quick", "standard", "acceptance"),
                        default="standard")
    parser.add_argument("--duration-scale", type=float, default=1.0,
                        help="multiply every load duration (tests use 0.02)")
    parser.add_argument("--workers", type=int, help="load workers (default: the GPU count)")
    add_common_arguments(parser)
    parser.set_defaults(func=run)


def _power_sampler(level: str, groups: tuple[str, ...]) -> Any:
    """A power sampler for the load phase, when this node has power wiring installed."""
    if level != "acceptance" or "power" not in groups:
        return None
    from nodegate.battery.power import PowerSampler, load_wiring

    wiring = load_wiring()
    if wiring is None:
        return None
    return PowerSampler(wiring).start()


def run(args: argparse.Namespace) -> int:
    from nodegate import __version__
    from nodegate.battery.engine import (
        ALL_GROUPS,
        QUICK_GROUPS,
        QuickOptions,
        parse_duration,
        parse_groups,
        run_quick,
    )
    from nodegate.battery.lock import BatteryLock
    from nodegate.battery.session import emit, node_name, select_profile
    from nodegate.errors import ConfigError
    from nodegate.progress import for_stream
    from nodegate.report import build

    if args.duration_scale <= 0:
        raise ConfigError("must be positive", key="--duration-scale")
    groups = parse_groups(args.checks, ALL_GROUPS)
    window = parse_duration(args.xid_window)
    profile = select_profile(args.profile)
    quick = tuple(g for g in groups if g in QUICK_GROUPS)
    progress = for_stream(sys.stderr)  # a live line on a terminal, stamped lines in logs
    with BatteryLock():
        started = time.time()
        t0 = time.monotonic()
        results = []
        notes: list[str] = []
        boot_id = None
        series: dict[str, Any] = {}
        matrices: dict[str, Any] = {}
        backend = "nvml"
        if quick:
            progress.line(f"quick checks: {','.join(quick)}")
            outcome = run_quick(profile, QuickOptions(groups=quick, xid_window_s=window))
            results += outcome.results
            notes += outcome.notes
            boot_id = outcome.boot_id
        if args.level != "quick" and "load" in groups:
            from nodegate.battery.load import run_load_group

            progress.line(f"load checks, level {args.level}, duration scale {args.duration_scale}")
            sampler = _power_sampler(args.level, groups)
            try:
                load = run_load_group(profile, args.level, args.duration_scale,
                                      workers=args.workers, progress=progress)
            finally:
                progress.clear()
                if sampler is not None:
                    sampler.stop()
            results += load.results
            if sampler is not None:
                from nodegate.battery.power import judge_under_load

                results += judge_under_load(sampler, profile)
            series, matrices, backend = load.series, load.matrices, load.backend
        report = build(
            results, node=node_name(args), profile=profile.name, level=args.level,
            started_at=started, duration_s=time.monotonic() - t0, backend=backend,
            boot_id=boot_id, nodegate_version=__version__, series=series or None,
            matrices=matrices or None, labels={"groups": ",".join(groups)},
        )
        return emit(report, args, "validate", notes)
