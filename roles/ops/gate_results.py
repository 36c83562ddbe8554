"""The gate's commands and verdicts, for the gate operations in ``roles/ops/gate.py``.

A gate command (the battery, the all-reduce, the join) changes the node, so an operation runs
it, never a fact. It runs *recorded*: its JSON goes to ``<stem>.json`` and its exit code to
``<stem>.exit`` on the node, and the command itself succeeds whatever that exit code, so the
operation goes on to read the result: fetched to the control machine (the battery's and the
all-reduce's reports) or read by ``nodegate.facts.gate.RecordedRun`` (the join's decision).
The verdicts here run at execution time, on what was fetched or read.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyinfra import logger
from pyinfra.api.command import QuoteString, StringCommand
from pyinfra.operations import files

from nodegate.facts.gate import GateResult, parse_recorded
from nodegate.fileio import read_bytes
from nodegate.report.fleet_summary import write_copy
from roles.ops.common import cmd, q

#: Where a gate command's output is recorded on the node (tmpfs: it lives until read, and a
#: reboot leaves nothing behind; the node's own reports stay in its report directory).
RUN_DIR = "/run/nodegate/gate"

#: What an exit code means, in the messages (docs/exit-codes.md).
EXITS = "(1 = a check failed, 2 = bad input, 3 = could not run)"


def stem(name: str) -> str:
    """``/run/nodegate/gate/<name>``: the recorded output's path without its suffix."""
    return f"{RUN_DIR}/{name}"


def recorded(at: str, *argv: str | QuoteString) -> StringCommand:
    """``argv`` with stdout (its JSON) to ``<at>.json``, stderr (its own words on a failure:
    the failure message quotes them) to ``<at>.err`` and its exit code to ``<at>.exit``; the
    previous run's files go first, so a stale result is never read."""
    return cmd("mkdir", "-p", q(RUN_DIR), "&&", "rm", "-f", q(f"{at}.json"), q(f"{at}.exit"),
               q(f"{at}.err"), "&&", "{", *argv, ">", q(f"{at}.json"), "2>", q(f"{at}.err"),
               ";", "echo", "$?", ">", q(f"{at}.exit"), ";", "}")


def said(result: GateResult) -> str:
    """``; the node said: <its last stderr lines>`` for a failure message, or nothing."""
    return f"; the node said: {result['stderr']}" if result.get("stderr") else ""


def battery_argv(nodegate: str, subcommand: str, profile: str,
                 extra_args: list[str]) -> list[str | QuoteString]:
    """``nodegate health|validate --profile P --json --color never ARGS``."""
    return [q(nodegate), q(subcommand), "--profile", q(profile), "--json", "--color", "never",
            *[q(a) for a in extra_args]]


def multinode_argv(nodegate: str, *, profile: str, role: str, endpoint: str, peer_name: str,
                   rdzv_id: str, local_addr: str, join_timeout_s: float,
                   report_dir: str, nnodes: int = 2,
                   group_index: int = 0) -> list[str | QuoteString]:
    """``nodegate multinode --json``: one node's side of the multi-node collectives."""
    return [q(nodegate), "multinode", "--role", q(role), "--endpoint", q(endpoint),
            "--peer-name", q(peer_name), "--rdzv-id", q(rdzv_id), "--local-addr", q(local_addr),
            "--join-timeout", q(str(join_timeout_s)), "--profile", q(profile),
            "--report-dir", q(report_dir), "--json", "--color", "never",
            "--nnodes", q(str(nnodes)), "--group-index", q(str(group_index))]


# --- fetched results --------------------------------------------------------------------------


def fetch(at: str, staging: Path, *, report: bool = True) -> Iterator[Any]:
    """Bring the recorded exit code (and the JSON report) to ``<staging>.exit`` (``.report``)
    with stock ``files.get``: a remote file that does not exist while the operation is
    prepared is downloaded blind, and ``force`` skips the checksum comparison, so the run's
    fresh output is always the one fetched."""
    pairs = ([(".json", ".report")] if report else []) + [(".exit", ".exit"), (".err", ".err")]
    for remote, local in pairs:
        yield from files.get._inner(src=f"{at}{remote}", dest=f"{staging}{local}",
                                    add_deploy_dir=False, create_local_dir=True, force=True)


def take(staging: Path) -> GateResult:
    """The fetched result (exit 3, no report, when a file is missing), the staged files gone."""
    texts = []
    for suffix in (".report", ".exit", ".err"):
        path = Path(f"{staging}{suffix}")
        texts.append(read_bytes(path, kind="report").decode("utf-8", errors="replace")
                     if path.is_file() else "")
        path.unlink(missing_ok=True)
    return parse_recorded(texts[0], texts[1], texts[2])


def keep(result: GateResult, latest: Path) -> None:
    """Write the report where the operator reads it; a run that printed none leaves the last
    one in place. The report goes through a staging file first for that reason."""
    if result["report"] is not None:
        write_copy(latest, result["report"])  # with its fleet summary beside it


def battery_verdict(me: Any, result: GateResult, out: Path, *, subcommand: str,
                    fail_host: bool) -> str | None:
    """None when the host carries on: exit 0, or a failed check (exit 1) the join gate drains
    (``fail_host`` false); otherwise the message the host fails with."""
    if result["exit"] == 0:
        me.noop(f"validation gate passed (report in {out})")
        return None
    if not fail_host and result["exit"] == 1:
        me.noop(f"validation gate FAILED (report in {out}); the join gate drains the node")
        return None
    return (f"validation gate: nodegate {subcommand} exited {result['exit']} "
            f"{EXITS}; report in {out}{said(result)}")


def multinode_verdict(me: Any, result: GateResult, out: Path | None, *, summary: str,
                      fail_host: bool) -> str | None:
    """The peer (``out`` None) is the reference, never failed by the pair's result; the node
    under test fails as its battery would."""
    if out is None:
        if result["exit"] != 0:
            logger.warning(f"{me.name}: {summary} (the node under test is judged, not this one)")
        me.noop(summary)
        return None
    if result["exit"] == 0 or (not fail_host and result["exit"] == 1):
        me.noop(f"{summary} (report in {out})")
        return None
    return f"{summary} {EXITS}; report in {out}{said(result)}"


# --- the join -----------------------------------------------------------------------------------


def join_summary(node: str, decision: dict[str, Any]) -> str:
    return (f"join gate: {node} {decision.get('action', 'none')}: "
            f"{decision.get('why', '')} [{decision.get('after', '')}]")


def join_exit_message(code: int, stderr: str = "") -> str:
    return (f"join gate: nodegate gate exited {code} (2 = bad input, "
            "3 = scheduler unreachable; nothing was changed)"
            + (f"; the node said: {stderr}" if stderr else ""))


def join_changes(decision: dict[str, Any] | None) -> bool:
    """Does the plan change the node's Slurm state? The policy decides ``drain`` or
    ``resume`` only then (``none`` for a node already drained with that reason)."""
    return (decision or {}).get("action") in ("drain", "resume")


def held_out(decision: dict[str, Any] | None) -> bool:
    """Does the join keep the node out of service on nodegate's evidence? A ``drain``, or
    ``none`` with a drain reason: the policy's "already drained: REASON" (an administrator's
    drain and a node left in service carry no reason). The same state gives the same answer
    whether this run drained the node or an earlier one did."""
    decision = decision or {}
    return decision.get("action") == "drain" or \
        (decision.get("action") == "none" and bool(decision.get("reason")))


def held_message(node: str, decision: dict[str, Any]) -> str:
    """The host's failure for a node the join keeps out: the same words on the run that
    drained it and on every rerun while it stays so (the state, not what this run did)."""
    return (f"join gate: {node} held out of service: {decision.get('reason') or ''} "
            f"[{decision.get('after', '')}]")


def join_verdict(me: Any, node: str, result: GateResult) -> str | None:
    """From ``nodegate gate --mode join``'s recorded decision: a drain (now or before) fails
    the host, after a warning when it drained now; a resume is logged; exit 2/3 fails it."""
    if result["exit"] != 0:
        return join_exit_message(result["exit"], result.get("stderr", ""))
    decision = result["report"] or {}
    summary = join_summary(node, decision)
    if held_out(decision):
        if decision.get("changed"):
            logger.warning(f"{me.name}: {summary}")
        return held_message(node, decision)
    if decision.get("changed"):
        logger.info(f"{me.name}: {summary}")
    else:
        me.noop(summary)
    return None
