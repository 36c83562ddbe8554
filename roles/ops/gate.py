"""The gate in a deploy: the battery, the multi-node collectives and the Slurm join, each run on
the node as an operation's command, its result fetched or read, and its verdict a command that
runs after it (``common.verdict``); the commands and verdicts are in ``gate_results``.

pyinfra runs an operation's generator twice: while preparing (to report what would change,
``--dry``) and again while executing, with fresh facts. The gate relies on that: the join plan
is read, and the reports fetched, only while executing. Facts only read; what changes the node
(the battery, the all-reduce, a drain) is a command yielded here.
"""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import Any

from pyinfra import logger
from pyinfra.api.host import Host
from pyinfra.api.operation import operation
from pyinfra.context import host

from nodegate.facts.gate import JoinPlan, RecordedRun, join_argv
from roles.ops import gate_results
from roles.ops.common import fail_here, verdict


@operation()
def health_gate(nodegate_bin: str, profile_path: str, fetch_dir: str,
                extra_args: list[str], *, subcommand: str = "health",
                level: str = "quick", fail_host: bool = True) -> Generator[Any, None, None]:
    """Run the battery on the node (``nodegate health|validate --json``, its report and exit
    code recorded there), bring the report to ``<fetch_dir>/<host>/<level>-latest.json``, and
    fail the host if the verdict is not PASS.

    Running the battery is this operation's change, on every run (it writes the node's
    reports), so a converged node counts it too. The fetch and the verdict follow it while
    executing; prepared, the operation shows only the run.
    """
    at = gate_results.stem(level)
    yield gate_results.recorded(at, *gate_results.battery_argv(nodegate_bin, subcommand,
                                                               profile_path, extra_args))
    if not host.state.is_executing:
        return
    out = Path(fetch_dir) / host.name
    staging = out / f".{level}"
    yield from gate_results.fetch(at, staging)

    def decide(me: Host) -> str | None:
        result = gate_results.take(staging)
        gate_results.keep(result, out / f"{level}-latest.json")
        return gate_results.battery_verdict(me, result, out, subcommand=subcommand,
                                            fail_host=fail_host)

    yield verdict(decide)


@operation()
def multinode_group(*, nodegate_bin: str, profile_path: str, report_dir: str, fetch_dir: str,
                    peer: str, members: list[str], addresses: dict[str, str], port: int,
                    join_timeout_s: float,
                    fail_host: bool = True) -> Generator[Any, None, None]:
    """One group of the multi-node check: the new nodes ``members`` and the known-good ``peer``
    run ``nodegate multinode`` at the same time (this operation runs on all hosts in
    parallel); every other host has nothing to do in it. A member that failed earlier in the
    run is left out of the group (every host sees the same failed set, so all agree on it).

    The peer hosts the rendezvous and is never failed by the group's result (it is the
    reference); each new node's report is fetched to ``<fetch_dir>/<new>/multinode-latest.json``
    and, like the battery's, fails the host unless ``fail_host`` is false (deploy.py: the join
    gate drains it instead). Running the collectives is the change, on every host.
    """
    label = " + ".join([*members, peer])
    if host.name != peer and host.name not in members:
        host.noop(f"multinode: not in the group {label}")
        return
    executing = host.state.is_executing
    gone = [m for m in [peer, *members] if m != host.name and executing and _left_the_run(m)]
    active = [m for m in members if m not in gone]
    if peer in gone or not active:
        for partner in gone:
            logger.warning(f"{host.name}: multinode: {partner} is not in the run any more; "
                           f"no group run with it")
        host.noop(f"multinode: {', '.join(gone)} failed or left the run")
        return
    for partner in gone:
        logger.warning(f"{host.name}: multinode: {partner} is not in the run any more; "
                       f"the group runs without it")
    role = "host" if host.name == peer else "join"
    label = " + ".join([*active, peer])
    at = gate_results.stem("multinode")
    yield gate_results.recorded(at, *gate_results.multinode_argv(
        nodegate_bin, profile=profile_path, role=role, endpoint=f"{addresses[peer]}:{port}",
        peer_name=",".join(active) if role == "host" else peer,
        rdzv_id=f"nodegate-{'-'.join(active)}-{peer}", local_addr=addresses[host.name],
        join_timeout_s=join_timeout_s, report_dir=report_dir, nnodes=len(active) + 1,
        group_index=active.index(host.name) if role == "join" else 0))
    if not executing:
        return
    out = Path(fetch_dir) / host.name
    staging = out / ".multinode"
    yield from gate_results.fetch(at, staging, report=role == "join")

    def decide(me: Host) -> str | None:
        result = gate_results.take(staging)
        summary = f"multinode {label}: nodegate multinode exited {result['exit']}"
        if role == "join":
            gate_results.keep(result, out / "multinode-latest.json")
        return gate_results.multinode_verdict(me, result, out if role == "join" else None,
                                              summary=summary, fail_host=fail_host)

    yield verdict(decide)


def _left_the_run(name: str) -> bool:
    """Has inventory host ``name`` failed, or left this run (no longer active)?"""
    state = host.state
    return any(h.name == name for h in state.failed_hosts) or \
        any(h.name == name and h not in state.active_hosts for h in state.inventory)


@operation()
def join_gate(nodegate_bin: str, level: str, node: str,
              report_dir: str, require: tuple[str, ...] = ()) -> Generator[Any, None, None]:
    """Resume the node in Slurm on a fresh passing ``level`` report, drain it otherwise.

    At execution time (the node's reports are there) the ``JoinPlan`` fact reads what the
    join would do; only a plan that changes the Slurm state (resume, drain) runs the real
    ``nodegate gate --mode join``, so a converged node counts no change. A node the join keeps
    out (drained now, or by an earlier run and still failing) fails the host with the same
    message either way (``gate_results.held_message``), so the deploy's exit code follows the
    fleet's state, not whether this run changed it; a gate that could not run (controller
    unreachable: exit 3) fails it too, with nothing changed.
    """
    if not host.state.is_executing:
        host.noop(f"join gate runs after validation (level {level})")
        return
    args: dict[str, Any] = {"nodegate": nodegate_bin, "level": level, "node": node,
                            "report_dir": report_dir, "require": list(require)}
    plan = host.get_fact(JoinPlan, **args)
    if plan["exit"] != 0:
        yield from fail_here(gate_results.join_exit_message(plan["exit"],
                                                            plan.get("stderr", "")))
        return
    if not gate_results.join_changes(plan["decision"]):
        if gate_results.held_out(plan["decision"]):  # drained by an earlier run: still a failure
            yield from fail_here(gate_results.held_message(node, plan["decision"] or {}))
            return
        host.noop(gate_results.join_summary(node, plan["decision"] or {}))
        return
    at = gate_results.stem("join")
    yield gate_results.recorded(at, *join_argv(**args))
    yield verdict(lambda me: gate_results.join_verdict(me, node,
                                                       me.get_fact(RecordedRun, stem=at)))


__all__ = ["health_gate", "join_gate", "multinode_group"]
