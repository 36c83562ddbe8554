"""``nodegate hold``: show a node's hold (whose, its rank, what lifts it), or put a
maintenance hold on it (deploy/drain.py), recorded and compare-and-set like every drain
nodegate makes (``cluster.holds``). Module-level imports: argparse only.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from nodegate.arguments import add_holds_dir, add_slurm_client


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "hold", help="show this node's hold, or drain it for maintenance (recorded)",
        description="Without --maintenance: whose the node's drain is (nodegate's record or a "
                    "person's), its rank and what lifts it. With --maintenance TEXT: drain it "
                    "'nodegate: maintenance TEXT', recorded; only a passing standard or "
                    "acceptance report newer than the hold (or a person) lifts it. A person's "
                    "drain or a higher hold is kept as it is. Exit 0 done (or kept), 2 bad "
                    "input, 3 Slurm could not be asked or the node changed under the update.")
    parser.add_argument("--node", help="Slurm node name (default $SLURMD_NODENAME)")
    parser.add_argument("--maintenance", metavar="TEXT",
                        help="drain for maintenance with this text (deploy/drain.py)")
    add_holds_dir(parser)
    add_slurm_client(parser)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from nodegate.cluster import holds
    from nodegate.cluster.slurm import RetryPolicy, SlurmScheduler
    from nodegate.errors import ConfigError

    node = args.node or os.environ.get("SLURMD_NODENAME")
    if not node:
        raise ConfigError("no node: pass --node or set SLURMD_NODENAME", key="--node")
    if args.retries < 1:
        raise ConfigError("--retries must be at least 1", key="--retries")
    store = holds.HoldStore(args.holds_dir)
    store.check()
    scheduler = SlurmScheduler(conf=args.slurm_conf, retry=RetryPolicy(attempts=args.retries))
    state = scheduler.state(node)
    changed = False
    if args.maintenance is not None:
        text = " ".join(args.maintenance.split())
        if not text:
            raise ConfigError("--maintenance needs a text (why the node is out)",
                              key="--maintenance")
        change = holds.drain(scheduler, store, state, f"nodegate: maintenance {text}",
                             kind=holds.Kind.MAINTENANCE, evidence="deploy/drain.py")
        changed, state = change.changed, change.after
    hold = holds.classify(state, store.get(node) or holds.deploy_record(state, join=False))
    lifted = holds.LIFTED_BY.get(hold.kind, "nothing: not held")
    result = {"node": node, "state": state.describe(), "kind": hold.kind.value,
              "suite": hold.suite, "rank": hold.rank, "ours": hold.ours,
              "reason": hold.reason, "lifted_by": lifted, "changed": changed}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        verb = "drained for maintenance" if changed else (
            "kept as it is" if args.maintenance is not None else "holds")
        print(f"nodegate hold: {node} {verb}: {hold.describe()}, rank {hold.rank}; lifted by "
              f"{lifted}  [{state.describe()}]")
    return 0
