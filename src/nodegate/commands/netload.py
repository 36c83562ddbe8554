"""``nodegate netload``: ``ib_write_bw`` per rail port, loopback on this node.

Each ACTIVE rail port of the profile (``network.rails``) runs perftest's ``ib_write_bw``
server and client on this node over the same HCA port, one port at a time, bounded in time:
from host memory (``ib_write_bw``, floor ``ib_write_bw_gbps_min``) and, when the node has GPUs
(``--gpudirect auto``), from the memory of the GPU behind the rail's switch with
``--use_cuda`` (``ib_write_bw_gdr``, floor ``ib_write_bw_gdr_gbps_min``), as Azure's
azurehpc-health-checks ``check_ib_bw_gdr`` does. Writes ``netload-latest.json``. Exit 0
passed, 1 a check failed or errored, 2 bad input, 3 could not run (perftest missing: the
package is named).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from nodegate.bounds import arg_number
from nodegate.commands.suites import add_suite_arguments, emit_suite

SUITE = "netload"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "netload", help="ib_write_bw per rail port, loopback on this node (perftest)",
        description="ib_write_bw per rail port (the profile's network.rails), loopback on "
                    "this node, host memory and with --use_cuda on GPU nodes; judged "
                    "against ib_write_bw_gbps_min / ib_write_bw_gdr_gbps_min. Exit 0 passed, "
                    "1 a check failed, 2 bad input, 3 could not run (perftest missing).")
    parser.add_argument("--gpudirect", choices=("auto", "on", "off"), default="auto",
                        help="also run with --use_cuda: on, off, or auto (when NVML shows "
                             "GPUs; default %(default)s)")
    parser.add_argument("--timeout", type=arg_number(float, 0, 3600, low_open=True),
                        default=None, help="seconds per run (default: run time + 20)")
    add_suite_arguments(parser)
    parser.set_defaults(func=run)


def _gpu_of_rail() -> dict[str, int]:
    """Rail HCA -> the NVML index of the GPU behind its switch (the rail map); {} without
    NVML or GPUs."""
    from nodegate.probes import rail_map
    from nodegate.probes.nvml import NvmlUnavailable, normalize_bus_id, read_board_within
    from nodegate.probes.rdma import default_sysfs_root, read_rdma

    try:
        board = read_board_within(20.0, with_nvlink_counters=False)
    except NvmlUnavailable:
        return {}
    root = default_sysfs_root()
    ids = [(g.entity, f"{normalize_bus_id(g.bus_id)}.0") for g in board.gpus if g.bus_id]
    found = rail_map.build(root, ids, read_rdma(root).devices)
    return {nic: index for index, gpu in enumerate(found.gpus) for nic in gpu.nics}


def run(args: argparse.Namespace) -> int:
    from nodegate import __version__
    from nodegate.commands.session import node_name
    from nodegate.errors import CannotRunError
    from nodegate.judge import network_load
    from nodegate.judge.common import make
    from nodegate.judge.load import thresholds_of
    from nodegate.load import rail_bw
    from nodegate.probes import perftest
    from nodegate.profiles.installed import select_profile
    from nodegate.report import build
    from nodegate.results import Severity, Verdict

    profile = select_profile(args.profile)
    started = time.time()
    ports, why = rail_bw.rail_ports(profile.data)
    results = []
    if not ports:
        declared = (profile.data.get("network") or {}).get("rails")
        verdict = Verdict.SKIP if not declared else Verdict.ERROR
        results.append(make("ib_write_bw", "node", verdict, reason=why,
                            severity=Severity.CRITICAL))
    else:
        perftest.require_tool()  # exit 3 naming the package, before anything runs
        size, seconds = rail_bw.sizing(profile.data)
        timeout = args.timeout or seconds + rail_bw.SLACK_S
        gpus = {} if args.gpudirect == "off" else _gpu_of_rail()
        if args.gpudirect == "on" and not gpus:
            raise CannotRunError("--gpudirect on: NVML shows no GPU behind any rail")
        th = thresholds_of(profile.data)
        modes = [("ib_write_bw", False)] + ([("ib_write_bw_gdr", True)] if gpus else [])
        for check, cuda in modes:
            outcomes = {}
            for index, rail in enumerate(ports):
                if rail.state != "ACTIVE":
                    outcomes[rail.entity] = perftest.BwOutcome(
                        False, None, f"port state {rail.state or 'unread'}, not ACTIVE "
                        "(see ib_port_state)", "", 0.0)
                    continue
                spec = rail_bw.spec_for(rail, index, size=size, seconds=seconds,
                                        cuda_index=gpus.get(rail.device) if cuda else None)
                if cuda and spec.cuda_index is None:
                    outcomes[rail.entity] = perftest.BwOutcome(
                        False, None, "no GPU behind this rail's switch (see ib_topology)",
                        "", 0.0)
                    continue
                print(f"[{time.strftime('%H:%M:%S')}] netload: {check} {rail.entity}",
                      file=sys.stderr, flush=True)
                outcomes[rail.entity] = perftest.run_loopback(spec, timeout)
            results += network_load.rail_bw(check, outcomes, th)
    report = build(results, node=node_name(args), profile=profile.name, level="standard",
                   started_at=started, duration_s=time.time() - started, backend="perftest",
                   nodegate_version=__version__, labels={"suite": SUITE})
    return emit_suite(report, args, SUITE)
