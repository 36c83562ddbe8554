"""``nodegate health``: the quick level, cheap enough for cron every few minutes.

No torch, no pytest, no GPU load on this path; a lock makes a second concurrent run exit at
once with exit code 3, or wait up to ``--lock-wait`` seconds first. ``--skip-if-locked``
(Slurm's prolog/epilog) turns a lock still held after that into exit 0 with one line on
stderr and no report: the run holding the lock is the one judging the node.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from nodegate import collector
from nodegate.errors import CannotRunError


def register(subparsers: Any) -> None:
    from nodegate.battery_lock import MAX_LOCK_WAIT_S
    from nodegate.bounds import arg_number
    from nodegate.commands.session import add_common_arguments
    from nodegate.vocabulary import QUICK_GROUPS

    parser = subparsers.add_parser(
        "health", help="quick node health check (NVML, kernel log, host state)",
        description="Run the quick level of the battery and write JSON, JUnit and Prometheus "
                    "reports. Exit 0 passed, 1 a check failed, 2 bad input, 3 could not run "
                    "(another run holding the battery lock included; with --skip-if-locked "
                    "that one is 0, nothing checked).")
    add_common_arguments(parser, QUICK_GROUPS)
    parser.add_argument("--lock-wait", metavar="SECONDS", default=0.0,
                        type=arg_number(float, 0, MAX_LOCK_WAIT_S),
                        help=f"wait up to SECONDS (0 to {MAX_LOCK_WAIT_S}) for another "
                             "nodegate run's battery lock (default 0: exit 3 at once)")
    parser.add_argument("--skip-if-locked", action="store_true",
                        help="when another run still holds the lock after --lock-wait, exit "
                             "0 with one line on stderr, checking nothing and writing no "
                             "report (Slurm's prolog/epilog: the run holding the lock judges "
                             "the node; bad input is still 2)")
    parser.set_defaults(func=run)


#: What writing the report takes, imported while the board is read (not before it: see
#: ``nodegate.report``).
REPORT_MODULES = ("nodegate.report.model", "nodegate.report.junit", "nodegate.report.prometheus",
                  "nodegate.report.summary", "nodegate.report.exitcodes",
                  "nodegate.report.run_record", "nodegate.report._jsontext")


def run(args: argparse.Namespace) -> int:
    """The quick level with the cyclic garbage collector paused: a run builds ~800 results
    and their reports in well under a second and exits, and the collector's ~50 passes over
    those young objects were 5-10 % of it. It runs again afterwards (an in-process caller)."""
    with collector.paused(), _terminated_like_a_deadline():
        return _run(args)


class Terminated(CannotRunError):
    """SIGTERM (systemd's stop, Slurm's HealthCheckProgram timeout, ``kill``): the run ends
    as a deadline ends it, its NVML reader killed and its lock released; exit 3, nothing
    judged, no report written (docs/exit-codes.md)."""


@contextlib.contextmanager
def _terminated_like_a_deadline() -> Iterator[None]:
    """SIGTERM raises ``Terminated`` in the main thread for the duration: the ``with``
    blocks on the way out kill the forked NVML reader (``probes.deadline``) and release the
    battery lock; the default action (exit 143) did neither. Only in the main thread (an
    in-process caller elsewhere keeps its own handler)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        raise Terminated("terminated by SIGTERM; the NVML reader was stopped, nothing "
                         "judged, no report written")

    before = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def _run(args: argparse.Namespace) -> int:
    from nodegate import __version__
    from nodegate.battery.engine import (
        QuickOptions,
        parse_deadline,
        parse_duration,
        parse_groups,
    )
    from nodegate.battery_lock import BatteryLock
    from nodegate.commands.session import check_outputs, emit, node_name
    from nodegate.flock import LockHeldError
    from nodegate.profiles.installed import select_profile
    from nodegate.vocabulary import QUICK_GROUPS

    groups = parse_groups(args.checks, QUICK_GROUPS)
    window = parse_duration(args.xid_window)
    deadline = parse_deadline(args.nvml_timeout)
    profile = select_profile(args.profile)
    check_outputs(args, "quick")
    from nodegate.battery.engine import run_quick

    def waiting() -> None:
        print(f"nodegate health: another nodegate battery run holds {lock.path}; waiting up "
              f"to {args.lock_wait:g} s", file=sys.stderr, flush=True)

    lock = BatteryLock(wait_s=args.lock_wait, on_wait=None if args.quiet else waiting)
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(lock)
        except LockHeldError as exc:
            if not args.skip_if_locked:
                raise
            print(f"nodegate health: skipped: another nodegate battery run holds {lock.path} "
                  f"(pid {exc.holder}) after waiting {args.lock_wait:g} s; nothing checked, "
                  "no report written (--skip-if-locked: exit 0, that run judges this node)",
                  file=sys.stderr)
            return 0
        started = time.time()
        t0 = time.monotonic()
        outcome = run_quick(profile, QuickOptions(groups=groups, xid_window_s=window,
                                                   report_dir=args.report_dir,
                                                   nvml_deadline_s=deadline,
                                                   preload=REPORT_MODULES))
        from nodegate.report import build
        from nodegate.report.run_record import run_record

        report = build(
            outcome.results, node=node_name(args), profile=profile.name, level="quick",
            started_at=started, duration_s=time.monotonic() - t0, backend="nvml",
            boot_id=outcome.boot_id, nodegate_version=__version__,
            labels={"groups": ",".join(groups)}, run=run_record(groups, profile, "quick"),
            gpus=outcome.board.identities() if outcome.board is not None else None,
        )
        return emit(report, args, "health", outcome.notes)
