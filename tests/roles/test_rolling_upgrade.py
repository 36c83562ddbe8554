"""The rolling upgrade's operations run batch after batch in one pyinfra run:
every operation of batch 1's nodes is ordered before any of batch 2's, as pyinfra's CLI
orders them (by call site), and a failed node stops the later batches at execution."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyinfra
import pytest
from pyinfra.api.config import Config
from pyinfra.api.inventory import Inventory
from pyinfra.api.state import State, StateStage
from pyinfra.context import ctx_host, ctx_state

from deploy import rolling_upgrade as rolling
from roles.ops import upgrade
from tests.roles.harness import FakeFacts
from tests.roles.scenarios import converged_facts, converged_files, host_data

NODES = ["node1", "node2", "node3", "node4"]


@pytest.fixture(scope="module")
def prepared() -> Iterator[tuple[State, list[str]]]:
    """The 4 hosts prepared once (about 5 s: every role on every host)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pyinfra, "is_cli", True)  # the CLI orders operations by call site
        yield _prepare()


def _prepare(**data: Any) -> tuple[State, list[str]]:
    hosts = [(n, host_data(**{"nodegate_slurm": {"node_name": n, "partition": "gpu"},
                              "nvidia_driver_version": "580.65.06", "rolling_batch": 2,
                              **data}))
             for n in NODES]
    inventory = Inventory((hosts, {}))  # type: ignore[no-untyped-call]
    state = State(inventory, Config())  # type: ignore[no-untyped-call]
    state.set_stage(StateStage.Prepare)
    facts = {**converged_facts("ubuntu22"), "gpu.GpuProcesses": [],
             "gpu.SlurmNodeState": "IDLE", "gpu.SlurmNode": {"state": "IDLE", "reason": None}}
    for node in inventory:
        node.get_fact = FakeFacts("ubuntu22", facts, converged_files("ubuntu22"))  # type: ignore[method-assign,assignment]
        node.connected = True
        node.noop = lambda _text: None  # type: ignore[method-assign,assignment]
        with ctx_state.use(state), ctx_host.use(node):
            rolling.rolling_upgrade()
    order = state.get_op_order()  # type: ignore[no-untyped-call]
    return state, order


def test_batch_two_starts_after_every_operation_of_batch_one(
        prepared: tuple[State, list[str]]) -> None:
    state, order = prepared
    inventory = list(state.inventory)
    owners = {h: {op for op in order if op in state.ops[h]} for h in inventory}
    batch1 = {op for h in inventory[:2] for op in owners[h]}
    batch2 = {op for h in inventory[2:] for op in owners[h]}
    only1 = [order.index(op) for op in batch1 - batch2]
    only2 = [order.index(op) for op in batch2 - batch1]
    assert only1 and only2
    assert max(only1) < min(only2), "batch 2 interleaves with batch 1"
    names = [min(state.op_meta[op].names) for op in order]
    assert names[0].endswith("rollout: batch 1/2") and names[-1].endswith("rollout: end")
    drain = [n for n in names if "record the driver left, drain" in n]
    assert len(drain) == 2  # one per batch: record+drain of that batch's two nodes


def test_at_execution_a_failure_in_batch_one_stops_batch_two(
        prepared: tuple[State, list[str]]) -> None:
    state, _order = prepared
    batches = rolling.plan_batches(
        [rolling.Member(n, "gpu") for n in NODES], 2, None)
    node2 = state.inventory.get_host("node2")
    state.failed_hosts.add(node2)
    with ctx_state.use(state), ctx_host.use(state.inventory.get_host("node3")):
        assert not rolling.may_go_on(batches, 1, "node3")
        assert rolling.may_go_on(batches, 0, "node1")  # its batch-mate finishes its own
    upgrade.SKIPPED.add("node1")
    try:
        with ctx_state.use(state), ctx_host.use(state.inventory.get_host("node1")):
            assert not rolling.may_go_on(batches, 0, "node1")
    finally:
        upgrade.SKIPPED.discard("node1")
        state.failed_hosts.discard(node2)


class _Busy:
    """A drained node whose job never ends (Slurm: MIXED+DRAIN)."""

    name = "node9"

    def __init__(self, state: str, reason: str) -> None:
        self.state, self.reason, self.ran = state, reason, []

    def get_fact(self, _cls: Any, node: str) -> dict[str, str]:
        return {"state": self.state, "reason": self.reason}

    def run_shell_command(self, command: Any) -> tuple[bool, list[str]]:
        self.ran.append(str(command))
        return True, []


def test_a_node_whose_jobs_outlive_the_wait_is_skipped_never_killed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(upgrade.time, "sleep", lambda _s: None)
    clock = iter(range(0, 10_000, 30))
    monkeypatch.setattr(upgrade.time, "monotonic", lambda: float(next(clock)))
    busy = _Busy("MIXED+DRAIN", "nodegate: upgrade 570.133.20 -> 580.65.06")
    (wait,) = upgrade.wait_for_jobs._inner(node="node9", timeout_s=120)
    try:
        assert wait.function(None, busy) is True  # the rollout goes on without it
        assert "node9" in upgrade.SKIPPED
        assert upgrade.OUTCOME["node9"].startswith("skipped: jobs still running after 120s")
        assert busy.ran == ["scontrol update NodeName=node9 State=RESUME"]  # our drain lifted
        assert not any("scancel" in c or "kill" in c for c in busy.ran)
        admin = _Busy("MIXED+DRAIN", "bad fan")
        assert wait.function(None, admin) is True and admin.ran == []  # theirs: kept
        idle = _Busy("IDLE+DRAIN", "nodegate: upgrade 570.133.20 -> 580.65.06")
        idle.name = "node8"
        assert wait.function(None, idle) is True and "node8" not in upgrade.SKIPPED
    finally:
        upgrade.SKIPPED.discard("node9")
        upgrade.OUTCOME.pop("node9", None)
        upgrade.OUTCOME.pop("node8", None)


def test_hosts_without_a_site_node_name_are_waited_on_by_their_inventory_name() -> None:
    """The rollout vouches for the drain before the reboot (nvidia_driver_drained), so it must
    drain and wait on every node Slurm knows: here by the inventory name slurm_controller
    gives such a host. Before, it waited on none of them ("not in Slurm")."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pyinfra, "is_cli", True)
        state, order = _prepare(nodegate_slurm={"partition": "gpu"})
    for name in ("node1", "node3"):
        node = state.inventory.get_host(name)
        waits = [op for op in order if op in state.ops[node]
                 and any("wait for running jobs" in n for n in state.op_meta[op].names)]
        assert len(waits) == 1
        with ctx_state.use(state), ctx_host.use(node):
            commands = list(state.ops[node][waits[0]].command_generator())
        assert [type(c).__name__ for c in commands] == ["FunctionCommand"], commands


@pytest.mark.parametrize(("knob", "value", "message"), [
    ("rolling_job_timeout_s", "abc", "key rolling_job_timeout_s: must be a number of seconds"),
    ("rolling_job_timeout_s", "NaN", "key rolling_job_timeout_s: must be a finite number"),
    ("rolling_batch", "2.5", "key rolling_batch: must be a whole number, not '2.5'"),
    ("rolling_max_unavailable", "Infinity", "key rolling_max_unavailable: must be a whole"),
    ("rolling_gate_level", "bogus", "rolling_gate_level must be one of quick, standard"),
])
def test_a_bad_knob_stops_the_run_naming_the_host_and_the_knob(knob: str, value: str,
                                                               message: str) -> None:
    from pyinfra.api.exceptions import DeployError

    with pytest.raises(DeployError, match=f"^node1: {message}"):
        _prepare(**{knob: value})
