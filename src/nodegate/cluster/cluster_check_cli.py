"""``nodegate cluster-check``: every pair of a partition's nodes through Slurm, the pair matrix,
the node it names drained (run where Slurm's client commands reach the controller).
Module-level imports: argparse only."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nodegate.arguments import add_holds_dir, add_slurm_client
from nodegate.bounds import arg_number

#: Where the JSON report, the heat map and the nodes' report copies go by default.
DEFAULT_OUT = Path("/var/lib/nodegate/cluster-check")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "cluster-check", help="all pairs of a partition's nodes as 2-node Slurm jobs: the "
                              "pair matrix and the node it names",
        description="Rounds of disjoint 2-node jobs (srun --exclusive across each pair, the "
                    "pairs of a round at once) running `nodegate multinode` between the two "
                    "nodes; a pair that does not answer within --timeout is ERROR. The matrix "
                    "is localised (a node failing with everyone and passing with no one is "
                    "named), written as JSON and an HTML heat map, each node's pairs land in "
                    "its report folder (cluster-check-latest.json) and a named node is "
                    "drained. A pair whose job never started (pending past --timeout, "
                    "refused by Slurm) is no evidence: it is retried (--start-retries) and "
                    "reported, and no node is drained for it. Exit 0 every pair passed, 1 a "
                    "pair ran and failed, 2 bad input (nothing run), 3 the controller did not "
                    "answer, or a pair never started (nothing failed).")
    parser.add_argument("--partition", required=True, help="the partition whose nodes pair")
    parser.add_argument("--nodes", help="comma-separated nodes to pair (default: the "
                                        "partition's idle nodes in service)")
    parser.add_argument("--plan", choices=("all-pairs", "bisection"), default="all-pairs",
                        help="every pair (n-1 rounds), or about log2(n) rounds for a large "
                             "partition: names one bad node, not a bad path "
                             "(default %(default)s)")
    parser.add_argument("--timeout", type=arg_number(float, 0, 86400, low_open=True),
                        default=600.0, help="seconds each pair's srun may take, start to end "
                                            "(default %(default)s)")
    parser.add_argument("--start-retries", type=arg_number(int, 0, 10), default=1,
                        help="more tries of a pair whose job never started (default "
                             "%(default)s)")
    parser.add_argument("--join-timeout", type=arg_number(float, 0, 86400, low_open=True),
                        default=120.0, help="seconds a side waits for the other "
                                            "(nodegate multinode; default %(default)s)")
    parser.add_argument("--port", type=arg_number(int, 1, 65535), default=29500,
                        help="the rendezvous port on each pair's first node "
                             "(default %(default)s)")
    parser.add_argument("--ranks-per-node", type=arg_number(int, 1, 1024),
                        help="ranks on each node (default: the profile's GPU count)")
    parser.add_argument("--profile", help="the profile on the nodes (default: the installed "
                                          "one)")
    parser.add_argument("--qos", help="the pair jobs' QOS")
    parser.add_argument("--time-limit", default="20:00",
                        help="each pair job's Slurm time limit (default %(default)s)")
    parser.add_argument("--nodegate", default="/opt/nodegate/venv/bin/nodegate",
                        help="nodegate on the nodes (default %(default)s)")
    parser.add_argument("--node-report-dir", default="/var/lib/nodegate/reports",
                        help="the report folder on the nodes (default %(default)s)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help="where cluster-check.json, cluster-check.html and the nodes' "
                             "report copies go (default %(default)s)")
    parser.add_argument("--no-drain", action="store_true",
                        help="report only: drain no node the matrix names")
    parser.add_argument("--drain-budget", type=arg_number(float, 0, 1),
                        help="the share of the partition nodegate may hold drained at once "
                             "(as the gate's)")
    add_slurm_client(parser)
    parser.add_argument("--json", action="store_true", help="print the JSON report")
    add_holds_dir(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from nodegate.cluster.cluster_check import (
        CheckPolicy,
        act,
        preflight_out,
        report_dict,
        run_check,
        srun_runner,
        write_outputs,
    )
    from nodegate.cluster.holds_store import HoldStore
    from nodegate.cluster.slurm import NODE_NAME, RetryPolicy, SlurmScheduler
    from nodegate.errors import ConfigError, ExitCode, NodegateError

    if not NODE_NAME.fullmatch(args.partition):
        raise ConfigError(f"{args.partition[:80]!r} is not a partition name", key="--partition")
    nodes = node_list(args.nodes)
    if nodes is not None and len(nodes) < 2:
        raise ConfigError("name at least two nodes", key="--nodes")
    policy = CheckPolicy(
        partition=args.partition, nodegate=args.nodegate, timeout_s=args.timeout,
        port=args.port, join_timeout_s=args.join_timeout, ranks_per_node=args.ranks_per_node,
        profile=args.profile, qos=args.qos, time_limit=args.time_limit,
        report_dir=args.node_report_dir, drain=not args.no_drain,
        drain_budget=args.drain_budget, plan=args.plan, start_retries=args.start_retries)
    preflight_out(args.out)  # before any pair runs: a run must be able to leave its record
    store = HoldStore(args.holds_dir)
    store.check()  # the record of its drains, too, before anything runs
    scheduler = SlurmScheduler(conf=args.slurm_conf, retry=RetryPolicy(attempts=args.retries))
    runner = srun_runner(scheduler._bin("srun"), scheduler._bin("scancel"))

    def log(line: str) -> None:
        print(f"nodegate cluster-check: {line}", file=sys.stderr, flush=True)

    outcome = run_check(scheduler, policy, runner, nodes=nodes, log=log)
    for node, why in sorted(outcome.skipped.items()):
        log(f"skip {node}: {why}")
    if len(outcome.nodes) < 2:
        raise ConfigError(f"fewer than two nodes to pair in partition {policy.partition} "
                          f"({', '.join(outcome.nodes) or 'none'})", key="--partition")
    act(scheduler, policy, runner, outcome, args.out, log=log, store=store)
    try:
        json_path, html_path = write_outputs(policy, outcome, args.out)
    except NodegateError as exc:  # after the act: name it, keep the verdict's code
        done = "; ".join(f"{n} {why}" for n, why in sorted(outcome.drained.items()))
        log(f"{outcome.verdict}, acted ({done or 'no node drained'}); the report could not "
            f"be written: {exc}")
        return int(ExitCode.FAILED if outcome.failed else ExitCode.CANNOT_RUN)
    if args.json:
        print(json.dumps(report_dict(policy, outcome), indent=1, sort_keys=True))
    summarise(outcome, log)
    log(f"{outcome.verdict}: {len(outcome.results)} result(s) of "
        f"{sum(len(r) for r in outcome.rounds)} pair(s), {len(outcome.not_started)} never "
        f"started; report {json_path}, heat map {html_path}")
    if outcome.failed:
        return int(ExitCode.FAILED)
    return int(ExitCode.CANNOT_RUN if outcome.not_started else ExitCode.PASSED)


def summarise(outcome: Any, log: Callable[[str], None]) -> None:
    """What the matrix named per rail, and each pair that never started."""
    for rail, loc in outcome.localisations.items():
        where = f"rail {rail}" if rail else "collectives"
        if loc.undetermined:
            log(f"{where}: nothing named: {loc.undetermined}")
        for key, why in loc.why.items():
            log(f"{where}: named {key}: {why}")
    for ns in outcome.not_started.values():
        tries = "1 try" if ns.attempts == 1 else f"{ns.attempts} tries"
        log(f"{ns.a}+{ns.b} not measured after {tries}: {ns.why}")


def node_list(text: str | None) -> list[str] | None:
    """``--nodes``: None when not given; else every comma-separated name, each a single node
    name. An empty list or an empty name (``--nodes ,``, ``--nodes "$UNSET"``) is exit 2
    naming the option, never "the whole partition"."""
    from nodegate.cluster.slurm import NODE_NAME
    from nodegate.errors import ConfigError

    if text is None:
        return None
    names = [part.strip() for part in text.split(",")]
    if not any(names):
        raise ConfigError(f"{text!r} names no node (an unset variable?); leave --nodes out "
                          "to pair the partition's idle nodes", key="--nodes")
    for name in names:
        if not NODE_NAME.fullmatch(name):
            raise ConfigError(f"{name!r} in {text[:80]!r} is not a node name (an empty "
                              "name, a hostlist or a space)", key="--nodes")
    return names
