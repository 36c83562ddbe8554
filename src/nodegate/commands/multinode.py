"""``nodegate multinode``: collectives between this node, a known-good one and maybe others.

Run on every node of the group at once (``deploy/multinode.py`` does it through pyinfra): the
known-good one with ``--role host`` (it hosts the rendezvous), each node under test with
``--role join``; ``--nnodes`` says how many take part (2: a pair). Each
joining node writes a report (``multinode-latest.json``, label ``suite=multinode``) that the
join gate requires when a peer was named; the host side only prints its figures. Exit codes as
``nodegate health``: 0 passed, 1 a check failed, 2 bad input, 3 could not run.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from nodegate.bounds import arg_number
from nodegate.commands.suites import add_suite_arguments, emit_suite

SUITE = "multinode"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "multinode", help="collectives between this node and known-good ones (torchrun)",
        description="all_reduce, all_gather, reduce_scatter and alltoall sweeps over "
                    "torchrun's c10d rendezvous (gloo on CPU, NCCL on GPUs) among --nnodes "
                    "nodes, each judged on nccl-tests bus bandwidth at the profile's "
                    "load.multinode_max_bytes against multinode_<collective>_busbw_gbps_min. "
                    "Exit 0 passed, 1 a check failed, 2 bad input, 3 could not run.")
    parser.add_argument("--role", choices=("host", "join"), required=True,
                        help="host: the known-good node (runs the rendezvous store); "
                             "join: the node under test (writes the report)")
    parser.add_argument("--endpoint", required=True,
                        help="ADDRESS[:PORT] of the known-good node's rendezvous (port 29400)")
    parser.add_argument("--peer-name", required=True,
                        help="the known-good node's name (report entity: peer-<name>); on "
                             "the host side, the other nodes' names, comma-separated")
    parser.add_argument("--nnodes", type=arg_number(int, 2, 4096), default=2,
                        help="nodes in the group, this one included (default %(default)s)")
    parser.add_argument("--group-index", type=arg_number(int, 0, 4095), default=0,
                        help="join side: this node's place among the group's new nodes (its "
                             "turn in the per-rail ib_write_bw with the peer; default "
                             "%(default)s)")
    parser.add_argument("--rdzv-id", help="rendezvous id both sides share (default: derived "
                        "from the endpoint)")
    parser.add_argument("--local-addr", help="address this node advertises to the other "
                        "(default: torchrun's lookup of the hostname)")
    parser.add_argument("--ifname", help="interface for gloo/NCCL sockets (default: "
                        "NCCL_SOCKET_IFNAME from /etc/nccl.conf)")
    parser.add_argument("--ranks-per-node", type=arg_number(int, 1, 1024),
                        help="ranks on each node (default: the profile's GPU count)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="where the collectives run: cuda, cpu, or auto (cuda where "
                             "torch sees GPUs; default %(default)s)")
    parser.add_argument("--join-timeout", type=arg_number(float, 0, 86400, low_open=True),
                        default=120.0,
                        help="seconds to wait for the other node (default %(default)s)")
    add_suite_arguments(parser)  # only the join side writes a report
    parser.set_defaults(func=run)


def _endpoint(value: str) -> str:
    from nodegate.errors import ConfigError
    from nodegate.load.multinode import DEFAULT_PORT

    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = value, str(DEFAULT_PORT)
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"must be ADDRESS[:PORT], not {value!r}", key="--endpoint")
    return f"{host}:{port}"


def run(args: argparse.Namespace) -> int:
    from nodegate import __version__
    from nodegate.commands.session import node_name
    from nodegate.errors import CannotRunError, ConfigError
    from nodegate.judge import load as verdicts
    from nodegate.judge import network_load
    from nodegate.load import devices, multinode, rail_bw
    from nodegate.profiles.installed import select_profile
    from nodegate.report import build

    endpoint = _endpoint(args.endpoint)
    if args.ranks_per_node is not None and args.ranks_per_node < 1:
        raise ConfigError("must be at least 1", key="--ranks-per-node")
    if not args.join_timeout > 0:
        raise ConfigError("must be positive", key="--join-timeout")
    profile = select_profile(args.profile)
    try:
        backend = devices.choose(args.device)
    except ImportError:
        raise CannotRunError("torch is not installed (the torch extra: pip install "
                             "'nodegate[torch]')") from None
    ranks, max_bytes = multinode.sizing(profile.data, backend.kind, backend.device_count,
                                        args.ranks_per_node)
    load = dict(profile.data.get("load") or {})
    rails_s = rail_bw.peer_phase_s(profile.data, args.nnodes - 1)
    spec = multinode.PairSpec(
        role=args.role, endpoint=endpoint,
        rdzv_id=args.rdzv_id or "nodegate-" + endpoint.replace(":", "-").replace(".", "-"),
        local_addr=args.local_addr, ranks_per_node=ranks, backend=backend.kind,
        max_bytes=max_bytes, join_timeout_s=args.join_timeout + rails_s,
        collective_timeout_s=float(load.get("collective_timeout_s") or 120.0),
        env=multinode.network_env(args.ifname), nnodes=args.nnodes)
    print(f"[{time.strftime('%H:%M:%S')}] multinode: {args.role} {endpoint} with "
          f"{args.peer_name}, {args.nnodes} nodes, {ranks} rank(s) per node, {backend.name}, "
          f"up to {max_bytes} B, {','.join(spec.collectives)}",
          file=sys.stderr, flush=True)
    started = time.time()
    th = verdicts.thresholds_of(profile.data)
    rail_results = []
    if rail_bw.wanted_with_peer(profile.data):
        outcomes = rail_bw.with_peer(args.role, profile.data, peer_host=endpoint.rpartition(":")[0],
                                     members=args.nnodes - 1, index=args.group_index,
                                     wait_s=args.join_timeout)
        rail_results = network_load.rail_bw(
            "multinode_ib_write_bw",
            {f"{k}@{args.peer_name}" if args.role == "join" else k: v
             for k, v in outcomes.items()}, th)
    outcome = multinode.run_pair(spec)
    entity = f"peer-{args.peer_name}"
    results = [*verdicts.multinode(outcome.ok, outcome.value, outcome.evidence(), th, entity,
                                   collectives=spec.collectives), *rail_results]
    report = build(results, node=node_name(args), profile=profile.name, level="standard",
                   started_at=started, duration_s=outcome.duration_s, backend=backend.name,
                   nodegate_version=__version__,
                   labels={"suite": SUITE, "peer": args.peer_name, "role": args.role,
                           "endpoint": endpoint, "nnodes": str(args.nnodes)})
    if args.role == "join":
        return emit_suite(report, args, SUITE)
    from nodegate.report import exit_code_for, render_summary, to_json

    if args.json:
        print(to_json(report))
    elif not args.quiet:
        print(render_summary(report, color=args.color == "always", show_passed=True))
    print(f"nodegate multinode (host side): {report.verdict.value}", file=sys.stderr)
    return int(exit_code_for(report))
