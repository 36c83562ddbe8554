"""Operations of a driver upgrade: take the node out with the version it leaves recorded, wait
for its jobs, and put the outcome where the rollout's summary reads it.

Used by deploy/upgrade_driver.py (one node or a ``--limit``) and deploy/rolling_upgrade.py
(batches). Facts only read; the drain and the record are the commands yielded here.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Generator
from io import StringIO
from typing import Any

from pyinfra import logger
from pyinfra.api.command import FunctionCommand, QuoteString, StringCommand
from pyinfra.api.host import Host
from pyinfra.api.operation import operation
from pyinfra.context import host
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.rpm import RpmPackages
from pyinfra.operations import files

from nodegate.cluster.reasons import is_nodegate_reason, is_upgrade_hold, upgrade_reason
from nodegate.cluster.slurm import is_drained, parse_state
from nodegate.facts.gpu import SlurmNode
from nodegate.versions import Version, upstream_of_package
from roles.ops.common import TargetOS, fail_here

#: Where the node keeps its last upgrade: the version it left (the pin to go back to), the
#: target, when it started. Written before any package moves, so a failed upgrade keeps it.
RECORD = "/var/lib/nodegate/upgrade.json"


def installed_driver(os_: TargetOS, packages: list[str], branch: str) -> str | None:
    """The upstream version of the driver installed now (None: no driver yet): the target's
    own packages first, else another branch's or flavour's of the same name. Ubuntu names the
    branch and flavour in the package (``nvidia-driver-570-open`` before a 580 upgrade), so the
    target's names alone found nothing there and the record lost the version to go back to."""
    installed = host.get_fact(DebPackages) if os_.is_debian else host.get_fact(RpmPackages)
    for package in packages:
        versions = installed.get(package) or []
        if versions:
            return upstream_of_package(sorted(versions)[-1])
    found: list[str] = []
    for package in packages:
        sibling = _sibling_names(package, branch)
        for name, versions in installed.items():
            if versions and sibling.fullmatch(name):
                found += [upstream_of_package(v) for v in versions]
    return max(found, key=Version, default=None)


def _sibling_names(package: str, branch: str) -> re.Pattern[str]:
    """``nvidia-driver-580-open`` -> the names of the same package on any branch and flavour:
    ``nvidia-driver-<digits>[-open]``."""
    base = re.escape(package.removesuffix("-open"))
    return re.compile(base.replace(re.escape(f"-{branch}"), r"-\d+") + r"(-open)?")


def open_upgrade_from(node: str | None) -> str | None:
    """The version an unfinished upgrade left: a node still drained ``nodegate: upgrade X ->
    Y`` never passed its join (a pass resumes it, a failing check rewrites the reason), so a
    retry records X again, not the half-installed build it failed with."""
    if not node:
        return None
    slurm = host.get_fact(SlurmNode, node=node) or {}
    reason = slurm.get("reason")
    if not is_upgrade_hold(reason):
        return None
    words = str(reason).split()
    return words[2] if len(words) >= 5 and words[3] == "->" and words[2] != "none" else None


def scontrol_update(node: str, *fields: str) -> StringCommand:
    return StringCommand("scontrol", "update", QuoteString(f"NodeName={node}"),
                         *[QuoteString(f) for f in fields])


@operation()
def begin_upgrade(node: str | None, previous: str | None,
                  target: str) -> Generator[Any, None, None]:
    """Record the version this node leaves (``RECORD``) and take it out of Slurm with
    ``nodegate: upgrade <previous> -> <target>``, before any package moves.

    An administrator's drain (any other reason) is kept as it is: it already keeps jobs off,
    and it is theirs to lift. A node Slurm does not know is only recorded.
    """
    record = {"schema": "nodegate.upgrade/1", "from": previous, "to": target,
              "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    yield from files.put._inner(src=StringIO(json.dumps(record, indent=1) + "\n"), dest=RECORD,
                                mode="644")
    if not node:
        return
    slurm = host.get_fact(SlurmNode, node=node)
    if slurm is None:
        host.noop(f"{node} is not in Slurm: recorded only")
        return
    if slurm.get("error"):
        # not "not in Slurm": the node may be running jobs that a driver change would kill
        yield from fail_here(f"Slurm cannot say whether {node} runs jobs ({slurm['error']}); "
                             "not upgrading")
        return
    reason = slurm.get("reason")
    drained = "DRAIN" in parse_state(str(slurm.get("state") or ""))[1]
    if drained and reason and not is_nodegate_reason(reason):
        host.noop(f"{node} is drained by an administrator ({reason}); kept")
        return
    yield scontrol_update(node, "State=DRAIN", f"Reason={upgrade_reason(previous, target)}")


#: What became of each host in this run's upgrade, by host name, for the summary.
OUTCOME: dict[str, str] = {}
#: Hosts the rollout skipped (their jobs outlived the wait): the rest of their batch's
#: operations do not run on them.
SKIPPED: set[str] = set()
#: deploy/rolling_upgrade.py: the run's state, batches and target, for its summary.
ROLLOUT: dict[str, Any] = {}


def note(name: str, text: str) -> None:
    OUTCOME[name] = text
    logger.info(f"{name}: upgrade: {text}")


@operation(is_idempotent=False)
def wait_for_jobs(node: str | None, timeout_s: float,
                  interval_s: float = 5.0) -> Generator[Any, None, None]:
    """Wait, at most ``timeout_s``, until the drained node runs no job (Slurm: drained, not
    draining). At the timeout the node is skipped: its drain is lifted when it is ours, its
    jobs are never touched, and the rest of the upgrade does not run on it."""
    if not node:
        host.noop("not in Slurm: no jobs to wait for")
        return

    def wait(state: Any, host: Host) -> bool:
        deadline = time.monotonic() + timeout_s
        while True:
            slurm = host.get_fact(SlurmNode, node=node)
            token = str((slurm or {}).get("state") or "")
            if slurm is None or is_drained(token):
                note(host.name, f"drained ({token or 'not in Slurm'}), no jobs")
                return True
            if time.monotonic() >= deadline:
                break
            time.sleep(interval_s)
        SKIPPED.add(host.name)
        error = (slurm or {}).get("error")
        why = "Slurm could not say whether jobs run" if error else "jobs still running"
        note(host.name, f"skipped: {why} after {timeout_s:.0f}s ({error or token}); "
                        "not upgraded, jobs untouched")
        if is_upgrade_hold((slurm or {}).get("reason")):
            status, _output = host.run_shell_command(scontrol_update(node, "State=RESUME"))
            if not status:
                logger.warning(f"{host.name}: could not lift the upgrade drain of {node}")
        return True

    yield FunctionCommand(wait, (), {})


@operation(is_idempotent=False)
def done(target: str) -> Generator[Any, None, None]:
    """The host went through its whole upgrade (it would have failed otherwise)."""

    def mark(state: Any, host: Host) -> bool:
        note(host.name, f"at {target}, validated and joined")
        return True

    yield FunctionCommand(mark, (), {})


__all__ = ["OUTCOME", "RECORD", "ROLLOUT", "SKIPPED", "begin_upgrade", "done", "installed_driver",
           "note", "open_upgrade_from", "scontrol_update", "wait_for_jobs"]
