"""``nodegate sweep``: submit the active battery to idle, due nodes of a partition (run on the
Slurm controller, from a timer). Module-level imports: argparse only."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from nodegate.arguments import add_slurm_client
from nodegate.bounds import arg_number

#: Where the controller keeps its record of submissions.
DEFAULT_LEDGER = Path("/var/lib/nodegate/sweep/ledger.json")


def register(subparsers: Any) -> None:
    from nodegate.cluster.sweep import DEFAULT_COMMAND

    parser = subparsers.add_parser(
        "sweep", help="run the standard battery on idle, due nodes as Slurm jobs",
        description="On the Slurm controller: pick the partition's idle nodes whose last sweep "
                    "is older than --period and submit one exclusive job per node running "
                    "the standard level and then the gate (a FAIL drains). Never a node with "
                    "a user's job, at most --max-concurrent sweep jobs, within --drain-budget. "
                    "Exit 0 done (whatever was submitted), 2 bad input (nothing submitted: "
                    "the ledger's path is checked first), 3 the controller did not answer or "
                    "answered a garbled job id, a submission failed, a submitted job could "
                    "not be recorded, or another sweep runs (the nodes before it were "
                    "submitted and recorded). A ledger over its cap is rotated.")
    parser.add_argument("--partition", required=True, help="the partition to sweep")
    parser.add_argument("--period", default="7d",
                        help="sweep a node again after this long: 12h, 7d (default %(default)s)")
    parser.add_argument("--max-concurrent", type=arg_number(int, 1, 10000), default=1,
                        help="sweep jobs queued or running at once (default %(default)s)")
    parser.add_argument("--drain-budget", type=arg_number(float, 0, 1),
                        help="the share of the partition that may be out of users' reach at "
                             "once: nodegate's drains plus nodes a sweep holds (0.25: 1 of 4)")
    parser.add_argument("--qos", help="the sweep jobs' QOS (a low-priority one, so users' "
                                      "jobs come first)")
    parser.add_argument("--nice", type=arg_number(int, 0, 2147483645),
                        help="the sweep jobs' nice value (higher: later)")
    parser.add_argument("--time-limit", default="30:00",
                        help="each job's Slurm time limit (default %(default)s)")
    parser.add_argument("--command",
                        help=f"what each job runs on its node (default: {DEFAULT_COMMAND}, "
                             "with --drain-budget passed on to the gate)")
    parser.add_argument("--output-dir", help="where the jobs' output goes (sbatch --output)")
    parser.add_argument("--ledger", type=Path, default=DEFAULT_LEDGER,
                        help="the controller's record of submissions (default %(default)s)")
    add_slurm_client(parser)
    parser.add_argument("--dry-run", action="store_true", help="plan and print, submit nothing")
    parser.add_argument("--json", action="store_true", help="print the outcome as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from nodegate.battery.engine import parse_duration
    from nodegate.cluster.slurm import RetryPolicy, SlurmScheduler
    from nodegate.cluster.sweep import SweepPolicy, sweep
    from nodegate.errors import ConfigError, ExitCode

    period = parse_duration(args.period, key="--period")
    if period is None:
        raise ConfigError("--period must be a length of time (12h, 7d), not 'boot'",
                          key="--period")
    policy = SweepPolicy(
        partition=args.partition, period_s=period,
        max_concurrent=args.max_concurrent, drain_budget=args.drain_budget, qos=args.qos,
        nice=args.nice, time_limit=args.time_limit, command=args.command,
        output_dir=args.output_dir)
    scheduler = SlurmScheduler(conf=args.slurm_conf, retry=RetryPolicy(attempts=args.retries))
    outcome = sweep(scheduler, policy, args.ledger, dry_run=args.dry_run)
    if args.json:
        print(json.dumps({"partition": policy.partition, "dry_run": args.dry_run,
                          "planned": list(outcome.plan.submit), "submitted": outcome.submitted,
                          "skipped": dict(outcome.plan.skipped), "error": outcome.error,
                          "notes": outcome.notes},
                         indent=1, sort_keys=True))
    else:
        for line in outcome.lines(dry_run=args.dry_run):
            print(f"nodegate sweep: {line}")
    return int(ExitCode.CANNOT_RUN if outcome.error else ExitCode.PASSED)
