"""``nodegate validate --level standard|acceptance``: load every GPU and judge what it delivers.

Same outputs and exit codes as ``nodegate health``; the quick checks run first, so a node
that is already sick fails fast without being loaded.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from nodegate.bounds import arg_number
from nodegate.vocabulary import ALL_GROUPS, LEVELS


def register(subparsers: Any) -> None:
    from nodegate.commands.session import add_common_arguments

    parser = subparsers.add_parser(
        "validate", help="full validation: quick checks, then GEMM/bandwidth/burn-in load",
        description="Run the battery at a level: quick (the health check's groups), standard "
                    "(~3 min of load, the default) or acceptance (<= 15 min). Exit 0 passed, "
                    "1 a check failed, 2 bad input, 3 could not run.")
    parser.add_argument("--level", choices=LEVELS, default="standard",
                        help=f"the battery level, one of {', '.join(LEVELS)} "
                             "(default %(default)s)")
    parser.add_argument("--duration-scale", type=arg_number(float, 0, 100, low_open=True),
                        default=1.0,
                        help="multiply every load duration (tests use 0.02; default "
                             "%(default)s)")
    parser.add_argument("--workers", type=arg_number(int, 1, 1024),
                        help="load workers (default: the GPU count)")
    add_common_arguments(parser, ALL_GROUPS)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from nodegate import __version__
    from nodegate.battery.engine import parse_deadline, parse_duration, parse_groups
    from nodegate.battery.run import run_battery
    from nodegate.commands.session import check_outputs, emit, node_name
    from nodegate.errors import ConfigError
    from nodegate.profiles.installed import select_profile
    from nodegate.progress import for_stream
    from nodegate.report import build
    from nodegate.report.run_record import run_record
    from nodegate.vocabulary import ALL_GROUPS

    if args.duration_scale <= 0:
        raise ConfigError("must be positive", key="--duration-scale")
    groups = parse_groups(args.checks, ALL_GROUPS)
    window = parse_duration(args.xid_window)
    deadline = parse_deadline(args.nvml_timeout)
    profile = select_profile(args.profile)
    check_outputs(args, args.level)
    if args.level == "acceptance" and "load" in groups:
        # exit 2 before any check runs: the FSDP keys valid, the checkpoint directory takes a
        # file (its room is checked once the workers' backend, and so the model, is known)
        from nodegate.load import config, fsdp_size

        fsdp_size.preflight(config.from_profile(profile.data, "acceptance",
                                                args.duration_scale).fsdp)
    progress = for_stream(sys.stderr)  # a live line on a terminal, stamped lines in logs
    ran = run_battery(profile, args.level, groups, xid_window_s=window,
                      duration_scale=args.duration_scale, workers=args.workers,
                      progress=progress, report_dir=args.report_dir,
                      nvml_deadline_s=deadline)
    report = build(
        ran.results, node=node_name(args), profile=profile.name, level=args.level,
        started_at=ran.started_at, duration_s=ran.duration_s, backend=ran.backend,
        boot_id=ran.boot_id, nodegate_version=__version__, series=ran.series or None,
        matrices=ran.matrices or None, labels={"groups": ",".join(groups)},
        gpus=ran.gpus, run=run_record(groups, profile, args.level, args.duration_scale),
    )
    return emit(report, args, "validate", ran.notes)
