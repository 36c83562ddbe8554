"""``nodegate health``: the quick level, cheap enough for cron every few minutes.

No torch, no pytest, no GPU load on this path; a lock makes a second concurrent run exit at
once with exit code 3.
"""

from __future__ import annotations

import argparse
import time
from typing import Any


def register(subparsers: Any) -> None:
    from nodegate.battery.session import add_common_arguments

    parser = subparsers.add_parser(
        "health", help="quick node health check (NVML, kernel log, host state)",
        description="Run the quick level of the battery and write JSON, JUnit and Prometheus "
                    "reports. Exit 0 passed, 1 a check failed, 2 bad input, 3 could not run.")
    add_common_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from nodegate import __version__
    from nodegate.battery.engine import (
        QuickOptions,
        parse_deadline,
        parse_duration,
        parse_groups,
    )
    from nodegate.battery.evidence import run_record
    from nodegate.battery.lock import BatteryLock
    from nodegate.battery.session import check_outputs, emit, node_name, select_profile
    from nodegate.report import build
    from nodegate.vocabulary import QUICK_GROUPS

    groups = parse_groups(args.checks, QUICK_GROUPS)
    window = parse_duration(args.xid_window)
    deadline = parse_deadline(args.nvml_timeout)
    profile = select_profile(args.profile)
    check_outputs(args)
    from nodegate.battery.engine import run_quick

    with BatteryLock():
        started = time.time()
        t0 = time.monotonic()
        outcome = run_quick(profile, QuickOptions(groups=groups, xid_window_s=window,
                                                   report_dir=args.report_dir,
                                                   nvml_deadline_s=deadline))
        report = build(
            outcome.results, node=node_name(args), profile=profile.name, level="quick",
            started_at=started, duration_s=time.monotonic() - t0, backend="nvml",
            boot_id=outcome.boot_id, nodegate_version=__version__,
            labels={"groups": ",".join(groups)}, run=run_record(groups, profile, "quick"),
            gpus=outcome.board.identities() if outcome.board is not None else None,
        )
        return emit(report, args, "health", outcome.notes)
