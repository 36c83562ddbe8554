"""Shared builders for the remediation tests: a scheduler, runners that record what they were asked."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nodegate.cluster.holds import HoldStore, Record, kind_of_reason
from nodegate.cluster.scheduler import Change, NodeState
from nodegate.remediation.engine import BoardView, Context, Runners
from nodegate.remediation.state import StateStore
from nodegate.report.model import NodeReport, build
from nodegate.results import CheckResult, Severity, Verdict

NODE = "gpu-node-01"
NOW = dt.datetime(2026, 12, 6, 12, 0, tzinfo=dt.timezone.utc)
PROFILE: dict[str, Any] = {
    "gpu": {"architecture": "hopper"}, "nvlink": {"nvswitch": True},
    "remediation": {"enabled": True, "window_h": 168, "max_per_gpu": 1,
                    "source": "policy: test"},
}


def serial(index: int) -> str:
    return f"165492200{index:04d}"


def identities(order: Sequence[int] = tuple(range(8))) -> dict[str, dict[str, str]]:
    """entity -> identity; ``order[i]`` is the physical card in slot ``gpu<i>``."""
    return {f"gpu{slot}": {"serial": serial(card), "uuid": f"GPU-{card:08d}",
                           "pci_bus_id": f"00000000:{slot + 0x18:02X}:00.0",
                           "vbios": "96.00.A5.00.01", "board_part_number": "692-2G520-0200-000"}
            for slot, card in enumerate(order)}


class FakeScheduler:
    name = "fake"

    def __init__(self, state: str = "idle", flags: tuple[str, ...] = ("DRAIN",),
                 reason: str | None = "nodegate: xid_events[gpu3]") -> None:
        self.current = NodeState(NODE, state, frozenset(flags), reason)
        self.calls: list[tuple[str, str | None]] = []

    def nodes(self) -> list[NodeState]:
        return [self.current]

    def state(self, node: str) -> NodeState:
        return self.current

    def drain(self, node: str, reason: str, *, expect: NodeState | None = None) -> Change:
        before = self.current
        self.calls.append(("drain", reason))
        self.current = dataclasses.replace(before, flags=before.flags | {"DRAIN"},
                                           reason=reason)
        return Change(node, "drain", True, before, self.current)

    def resume(self, node: str, *, expect: NodeState | None = None) -> Change:
        before = self.current
        self.calls.append(("resume", None))
        self.current = NodeState(node, "idle")
        return Change(node, "resume", True, before, self.current)

    def partition_nodes(self, partition: str) -> list[NodeState]:
        return [self.current]

    def set_comment(self, node: str, comment: str | None, *,
                    expect: NodeState | None = None) -> Change:
        return Change(node, "comment", False, self.current, self.current)


@dataclasses.dataclass
class Recorder:
    """Fake runners: what was done, in order; the board they report."""

    board: BoardView
    requalify_result: bool | None = True
    boot: str = "boot-a"
    done: list[tuple[str, tuple[str, ...]]] = dataclasses.field(default_factory=list)
    fail_with: Exception | None = None

    def runners(self) -> Runners:
        def act(name: str) -> Any:
            def run(*args: Any) -> None:
                if self.fail_with is not None:
                    raise self.fail_with
                self.done.append((name, tuple(args[0]) if args else ()))
            return run

        def requalify() -> bool | None:
            self.done.append(("requalify", ()))
            return self.requalify_result

        return Runners(board=lambda: self.board, reset_gpus=act("reset"),
                       reboot=act("reboot"), power_cycle=act("power_cycle"),
                       requalify=requalify, boot_id=lambda: self.boot,
                       kernel_log=lambda: None, bug_report=None)

    @property
    def actions(self) -> list[str]:
        return [name for name, _ in self.done if name != "requalify"]


def board(order: Sequence[int] = tuple(range(8)), *,
          processes: dict[str, list[int]] | None = None,
          recovery: dict[str, Any] | None = None) -> BoardView:
    return BoardView(gpus=identities(order), processes=processes or {},
                     recovery_actions=recovery or {}, driver_version="570.133.20",
                     fabricmanager_running=True, fabricmanager_version="570.133.20")


def xid_result(entity: str, code: int, action: str, **extra: Any) -> CheckResult:
    event = {"xid": code, "action": action, "class": "hardware", "count": 1,
             "bus_id": "00000000:1b:00.0", **extra}
    return CheckResult("xid_events", entity, str(code), "none", "", Verdict.FAIL,
                       Severity.HARDWARE, {"events": [event]})


def failed(check: str, entity: str, measured: Any = 1) -> CheckResult:
    return CheckResult(check, entity, measured, {"max": 0}, "count", Verdict.FAIL,
                       Severity.HARDWARE, {})


def make_report(*results: CheckResult, order: Sequence[int] = tuple(range(8)),
                level: str = "quick") -> NodeReport:
    passing = CheckResult("gpu_count", "node", 8, {"min": 8}, "", Verdict.PASS,
                          Severity.INFO, {})
    return build([passing, *results], node=NODE, profile="sim-h100-hgx", level=level,
                 started_at=NOW - dt.timedelta(minutes=5), finished_at=NOW - dt.timedelta(
                     minutes=4), backend="sim", boot_id="boot-a", gpus=identities(order))


def context(store: StateStore, scheduler: FakeScheduler, recorder: Recorder,
            reports: list[NodeReport], tmp_path: Path, *, dry_run: bool = False,
            profile: dict[str, Any] | None = None,
            now: dt.datetime = NOW, holds: HoldStore | None = None) -> Context:
    """The step's context; ``holds`` (default: a fresh record under ``tmp_path``) records the
    fake node's current ``nodegate:`` drain as the hold its words name, as the nodegate that
    made it would have: pass a store to decide otherwise."""
    if holds is None:
        holds = HoldStore(tmp_path / "holds")
        current = scheduler.current
        if current.drained and current.reason and current.reason.startswith("nodegate:"):
            kind, suite = kind_of_reason(current.reason)
            holds.put(Record(NODE, current.reason, kind, suite=suite))
    return Context(node=NODE, scheduler=scheduler, store=store, reports=lambda: reports,
                   profile=PROFILE if profile is None else profile,
                   runners=recorder.runners(), bundle_dir=tmp_path / "rma", dry_run=dry_run,
                   now=lambda: now, holds=holds)
