"""The persisted per-node remediation state machine.

    in_service -> drained -> waiting_for_jobs -> remediating -> requalifying -> in_service
                                                                            \\-> rma

Why on disk, beside the reports: a remediation spans a reboot (the action itself may be the
reboot) and the timer that drives it may be killed at any point. So every step is written
before it is taken: the action's *intent* (outcome None) is saved before the runner is
called and its outcome after. A run that finds an intent without an outcome never performs
the action again: it re-checks (a reboot shows as a new boot id; anything else is proved or
disproved by the re-qualification). One node never runs two remediations: every step holds
an exclusive ``flock`` (``nodegate.flock``), which the kernel drops when its holder dies.

A state file that cannot be read (missing permissions, a FIFO, garbage, a shape we do not
know) is an error naming the file: silently starting again from ``in_service`` would forget
an action in flight or an RMA.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import enum
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodegate.errors import CannotRunError, ConfigError
from nodegate.fileio import atomic_write_text, read_text
from nodegate.flock import exclusive
from nodegate.report.model import format_timestamp, parse_timestamp

SCHEMA = "nodegate.remediation/1"
STATE_FILE = "remediation.json"
LOCK_FILE = "remediation.lock"
DEFAULT_STATE_DIR = Path("/var/lib/nodegate/remediation")


class Phase(str, enum.Enum):
    """Where a node is in its remediation (docs/remediation.md, the state machine); the
    value is what the state file and the metrics carry."""

    IN_SERVICE = "in_service"
    DRAINED = "drained"
    WAITING_FOR_JOBS = "waiting_for_jobs"
    REMEDIATING = "remediating"
    REQUALIFYING = "requalifying"
    RMA = "rma"


#: The allowed moves. An administrator may resume a node by hand at any point and a fresh
#: nodegate drain may come at any point: both are ``in_service``/``drained``, never an action.
TRANSITIONS: dict[Phase, frozenset[Phase]] = {
    Phase.IN_SERVICE: frozenset({Phase.DRAINED}),
    Phase.DRAINED: frozenset({Phase.WAITING_FOR_JOBS, Phase.REMEDIATING, Phase.RMA,
                              Phase.IN_SERVICE}),
    Phase.WAITING_FOR_JOBS: frozenset({Phase.DRAINED, Phase.REMEDIATING, Phase.RMA,
                                       Phase.IN_SERVICE}),
    Phase.REMEDIATING: frozenset({Phase.REQUALIFYING, Phase.RMA, Phase.DRAINED}),
    Phase.REQUALIFYING: frozenset({Phase.IN_SERVICE, Phase.DRAINED, Phase.RMA}),
    Phase.RMA: frozenset({Phase.IN_SERVICE}),  # only once the card was replaced and resumed
}

#: An action's outcome: None while only the intent is recorded.
OUTCOMES = ("done", "failed", "unknown")
#: The actions a state file may record (``nodegate.remediation.actions.Remedy`` values).
ACTIONS = ("reset_gpu", "reboot_node", "power_cycle")


class InvalidTransition(CannotRunError):
    """A move the state machine does not allow: a defect or a state edited by hand (exit 3)."""


def default_state_dir() -> Path:
    """``$NODEGATE_REMEDIATION_DIR`` or /var/lib/nodegate/remediation (survives reboots)."""
    from nodegate.paths import env_path

    return env_path("NODEGATE_REMEDIATION_DIR") or DEFAULT_STATE_DIR


@dataclass
class ActionRecord:
    """One action: recorded as intent before it runs, completed with its outcome after."""

    action: str
    targets: list[str]
    serials: dict[str, str]  # entity -> serial at the time of the action
    started_at: dt.datetime
    boot_id: str | None  # the boot it was started in: a reboot shows as a new one
    outcome: str | None = None
    finished_at: dt.datetime | None = None
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"action": self.action, "targets": list(self.targets),
                "serials": dict(self.serials), "started_at": format_timestamp(self.started_at),
                "boot_id": self.boot_id, "outcome": self.outcome,
                "finished_at": (format_timestamp(self.finished_at)
                                if self.finished_at else None),
                "detail": self.detail}

    @classmethod
    def from_dict(cls, data: Any) -> ActionRecord:
        if not isinstance(data, dict):
            raise ValueError("an action must be a mapping")
        outcome = data.get("outcome")
        if data.get("action") not in ACTIONS:
            raise ValueError(f"unknown action {data.get('action')!r}")
        if outcome is not None and outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}")
        targets, serials = data.get("targets"), data.get("serials")
        if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
            raise ValueError("targets must be a list of names")
        if not isinstance(serials, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in serials.items()):
            raise ValueError("serials must map names to serials")
        finished = data.get("finished_at")
        return cls(action=str(data["action"]), targets=list(targets), serials=dict(serials),
                   started_at=parse_timestamp(data["started_at"]),
                   boot_id=data.get("boot_id"), outcome=outcome,
                   finished_at=parse_timestamp(finished) if finished else None,
                   detail=str(data.get("detail") or ""))


@dataclass
class NodeRemediation:
    """The whole persisted state of one node."""

    node: str
    phase: Phase = Phase.IN_SERVICE
    since: dt.datetime | None = None
    reason: str | None = None  # the nodegate drain reason that started this remediation
    action: ActionRecord | None = None  # the action of the current remediation
    history: list[ActionRecord] = field(default_factory=list)  # every finished action
    escalate_from: str | None = None  # the action a failed re-qualification escalates from
    rma_reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "node": self.node, "phase": self.phase.value,
                "since": format_timestamp(self.since) if self.since else None,
                "reason": self.reason,
                "action": self.action.to_dict() if self.action else None,
                "history": [a.to_dict() for a in self.history],
                "escalate_from": self.escalate_from, "rma_reason": self.rma_reason}

    @classmethod
    def from_dict(cls, data: Any) -> NodeRemediation:
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ValueError(f"not a {SCHEMA} document")
        history = data.get("history") or []
        if not isinstance(history, list):
            raise ValueError("history must be a list")
        since = data.get("since")
        action = data.get("action")
        if data.get("escalate_from") not in (None, *ACTIONS):
            raise ValueError(f"unknown escalate_from {data.get('escalate_from')!r}")
        return cls(node=str(data["node"]), phase=Phase(data["phase"]),
                   since=parse_timestamp(since) if since else None,
                   reason=data.get("reason"),
                   action=ActionRecord.from_dict(action) if action is not None else None,
                   history=[ActionRecord.from_dict(a) for a in history],
                   escalate_from=data.get("escalate_from"), rma_reason=data.get("rma_reason"))

    def move(self, to: Phase, now: dt.datetime) -> None:
        """Change phase, refusing a move ``TRANSITIONS`` does not allow."""
        if to is self.phase:
            return
        if to not in TRANSITIONS[self.phase]:
            raise InvalidTransition(f"remediation of {self.node}: {self.phase.value} -> "
                                    f"{to.value} is not an allowed move")
        self.phase, self.since = to, now

    @property
    def in_flight(self) -> bool:
        """An action whose intent is recorded and whose outcome is not: never act again."""
        return self.action is not None and self.action.outcome is None


class StateStore:
    """The state file and its lock in one folder (``default_state_dir``)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / STATE_FILE
        self.lock_path = directory / LOCK_FILE

    def load(self, node: str) -> NodeRemediation:
        """The node's state; a fresh ``in_service`` one only when no file exists yet."""
        if not os.path.lexists(self.path):
            return NodeRemediation(node=node)
        text = read_text(self.path, kind="config")  # a FIFO, a device, a link: ConfigError
        try:
            state = NodeRemediation.from_dict(json.loads(text))
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"not a valid remediation state ({exc}); fix or remove it by "
                              "hand after reading it: it may record an action in flight or "
                              "an RMA", file=str(self.path)) from None
        if state.node != node:
            raise ConfigError(f"records node {state.node!r}, not {node!r}",
                              file=str(self.path))
        return state

    def save(self, state: NodeRemediation) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, json.dumps(state.to_dict(), indent=2) + "\n")

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the node's remediation lock (exit 3 naming the holder when it is taken)."""
        with exclusive(self.lock_path, what="remediation lock",
                       busy=lambda pid: f"another remediation (pid {pid}) holds "
                       f"{self.lock_path}: one node runs one remediation at a time"):
            yield

    def record_intent(self, state: NodeRemediation, action: ActionRecord,
                      now: dt.datetime) -> None:
        """Phase ``remediating`` with the action's intent, on disk before the action runs."""
        if state.in_flight:
            raise InvalidTransition(f"remediation of {state.node}: an action "
                                    f"({state.action.action if state.action else '?'}) is "
                                    "already in flight; re-check, never act twice")
        state.move(Phase.REMEDIATING, now)
        state.action = action
        self.save(state)

    def record_outcome(self, state: NodeRemediation, outcome: str, now: dt.datetime,
                       detail: str = "") -> None:
        """The action's outcome, then ``requalifying`` (done/unknown) or ``drained`` (failed)."""
        if state.action is None or outcome not in OUTCOMES:
            raise InvalidTransition(f"remediation of {state.node}: no action to complete "
                                    f"with {outcome!r}")
        state.action.outcome, state.action.finished_at = outcome, now
        state.action.detail = detail or state.action.detail
        state.history.append(state.action)
        state.move(Phase.DRAINED if outcome == "failed" else Phase.REQUALIFYING, now)
        self.save(state)
