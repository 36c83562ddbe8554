"""Upgrade the driver of a fleet in batches: ``pyinfra inventory.py deploy/rolling_upgrade.py
--data nvidia_driver_version=580.65.06 --data rolling_batch=2``.

GPU nodes are planned into batches of ``rolling_batch`` with at most
``rolling_max_unavailable`` nodes of any Slurm partition in one batch
(``nodegate.cluster.rollout``). Batch after batch, each node of the batch, in parallel:

1. records the version it leaves and drains ``nodegate: upgrade <from> -> <to>``
   (deploy/upgrade_driver.py; an administrator's drain is kept);
2. waits up to ``rolling_job_timeout_s`` for its running jobs to end; a node still busy then
   is skipped and reported (its drain lifted, its jobs never touched);
3. upgrades the driver, fabric manager, NSCQ and the agent's profile, reboots (only with no
   GPU process left), validates at ``rolling_gate_level`` (standard) and rejoins Slurm.

The first failed node stops the rollout: it stays drained (the version it left recorded in
/var/lib/nodegate/upgrade.json), the nodes of its batch finish what they started, and no later
batch is touched. The run ends with each node's standing, also written to
``<gate_fetch_dir>/rollout-summary.json``.

How batches run one after the other in one pyinfra run: every host takes part in a
"batch k" operation between batches; pyinfra orders each host's operations after the ones
before them, so batch k+1's operations come after every operation of batch k.
"""

from __future__ import annotations

import json
from collections.abc import Generator
from pathlib import Path
from typing import Any

from pyinfra import logger
from pyinfra.api.deploy import deploy
from pyinfra.api.exceptions import DeployError
from pyinfra.api.host import Host
from pyinfra.api.operation import operation
from pyinfra.context import host

import nodegate.pyinfra_compat  # noqa: F401  (a lost SSH connection fails that host only)
from deploy.upgrade_driver import begin, upgrade_node
from nodegate.cluster.rollout import (
    Member,
    parse_count,
    parse_max_unavailable,
    parse_seconds,
    plan_batches,
    standings,
    summary_text,
)
from nodegate.errors import ConfigError
from nodegate.fileio import atomic_write_text
from roles.defaults import role_defaults
from roles.ops import upgrade
from roles.ops.common import FAILURES, is_deploy_file, knob
from roles.ops.slurm import slurm_node_name


def partition_of(member: Host) -> str:
    slurm = member.data.get("nodegate_slurm") or {}
    return str(slurm.get("partition") or "default")


def plan() -> list[list[str]]:
    """This run's batches, the same on every host: the GPU hosts of this run (``--limit``
    applies; hosts connected, failed since or not), in inventory order."""
    state = host.state
    members = [Member(h.name, partition_of(h)) for h in state.inventory
               if h.data.get("nodegate_profile_data")
               and (h in state.activated_hosts or not state.activated_hosts)]
    try:  # --data gives strings: rolling_max_unavailable='{"gpu": 1}' or 2
        return plan_batches(members, parse_count(knob("rolling_batch"), "rolling_batch"),
                            parse_max_unavailable(knob("rolling_max_unavailable")))
    except ConfigError as exc:
        raise DeployError(f"{host.name}: {exc}") from exc


def job_timeout_and_level() -> tuple[float, str]:
    """``rolling_job_timeout_s`` and ``rolling_gate_level``, checked before anything runs."""
    from nodegate.vocabulary import LEVEL_RANK

    level = str(knob("rolling_gate_level"))
    if level not in LEVEL_RANK:
        raise DeployError(f"{host.name}: rolling_gate_level must be one of "
                          f"{', '.join(LEVEL_RANK)}, not {level!r}")
    try:
        return parse_seconds(knob("rolling_job_timeout_s"), "rolling_job_timeout_s"), level
    except ConfigError as exc:
        raise DeployError(f"{host.name}: {exc}") from exc


def may_go_on(batches: list[list[str]], mine: int, name: str) -> bool:
    """At execution: no node of an earlier batch failed, and this one was not skipped."""
    failed = {h.name for h in host.state.failed_hosts}
    earlier = {n for group in batches[:mine] for n in group}
    return name not in upgrade.SKIPPED and not (failed & earlier)


@operation(is_idempotent=False)
def batch_start(index: int, batches: list[list[str]]) -> Generator[Any, None, None]:
    """Every host's step between batches (orders batch k+1 after batch k); logs progress."""
    if host.state.is_executing and host.name == _first_active():
        failed = sorted({h.name for h in host.state.failed_hosts}
                        & {n for group in batches[:index] for n in group})
        if index == len(batches):
            logger.info("rollout: all batches done" if not failed else
                        f"rollout: stopped after {', '.join(failed)} failed")
            _print_summary()
        elif failed:
            logger.warning(f"rollout: batch {index + 1}/{len(batches)} "
                           f"({', '.join(batches[index])}) not started: "
                           f"{', '.join(failed)} failed")
        else:
            logger.info(f"rollout: batch {index + 1}/{len(batches)}: "
                        f"{', '.join(batches[index])}")
    host.noop(f"rollout: batch {index + 1} of {len(batches)}" if index < len(batches)
              else "rollout: end")
    return
    yield


def _first_active() -> str | None:
    active = sorted(h.name for h in host.state.inventory if h in host.state.active_hosts)
    return active[0] if active else None


#: The run's plan and target for the summary. In roles.ops.upgrade, not here: pyinfra runs
#: this file once per host, each time in a fresh namespace.
_SUMMARY = upgrade.ROLLOUT


def _print_summary() -> None:
    """Once, at the end of the run: each node's standing, printed and kept as JSON."""
    if _SUMMARY.get("printed") or not _SUMMARY.get("state") or \
            not _SUMMARY["state"].is_executing:
        return
    _SUMMARY["printed"] = True
    state = _SUMMARY["state"]
    failed = {h.name: f"{FAILURES.get(h.name) or 'an operation failed (see above)'}; "
                      f"left drained, the version it left in {upgrade.RECORD}"
              for h in state.failed_hosts}
    rows = standings(_SUMMARY["batches"], upgrade.OUTCOME, failed, upgrade.SKIPPED)
    print(summary_text(_SUMMARY["target"], rows), flush=True)
    out = Path(_SUMMARY["fetch_dir"]) / "rollout-summary.json"
    atomic_write_text(out, json.dumps({"schema": "nodegate.rollout/1", "target": _SUMMARY["target"],
                               "batches": _SUMMARY["batches"],
                               "nodes": [r.__dict__ for r in rows]}, indent=1) + "\n")


@deploy("nodegate rolling upgrade", data_defaults={**role_defaults("rolling"),
                                                   **role_defaults("gate")})
def rolling_upgrade() -> None:
    target = knob("nvidia_driver_version")
    if not target:
        raise DeployError(f"{host.name}: a rolling upgrade needs "
                          "--data nvidia_driver_version=<version>")
    batches = plan()
    job_timeout_s, gate_level = job_timeout_and_level()
    mine = next((i for i, group in enumerate(batches) if host.name in group), None)
    if not _SUMMARY:
        import atexit

        _SUMMARY.update(state=host.state, batches=batches, target=str(target),
                        fetch_dir=str(knob("gate_fetch_dir")))
        atexit.register(_print_summary)
    if mine is not None:
        # the rollout drains the node and waits for its jobs itself; the reboot still waits
        # for a node without GPU processes (roles/ops/server.reboot_refusal)
        host.data.nvidia_driver_drained = True
        host.data.nvidia_driver_allow_reboot = True
        host.data.gate_level = gate_level
    name = host.name
    for index in host.loop(range(len(batches))):  # type: ignore[no-untyped-call]
        batch_start(name=f"rollout: batch {index + 1}/{len(batches)}", index=index,
                    batches=batches)
        if index != mine:
            continue
        go_on: dict[str, Any] = {"_if": lambda i=index: may_go_on(batches, i, name)}
        begin(**go_on)
        # its own bound: beyond the per-command deadline (ssh_command_timeout_s, inventory.py)
        upgrade.wait_for_jobs(name="rollout: wait for running jobs (then skip)",
                              node=slurm_node_name(), timeout_s=job_timeout_s,
                              _timeout=int(job_timeout_s) + 600, **go_on)
        upgrade_node(**go_on)
        upgrade.done(name="rollout: node done", target=str(target), **go_on)
    batch_start(name="rollout: end", index=len(batches), batches=batches)


if is_deploy_file(globals()):
    rolling_upgrade()
