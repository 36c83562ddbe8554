"""The persisted state machine: transitions, an invalid file, the lock."""

from __future__ import annotations

import datetime as dt
import os
import threading
from pathlib import Path

import pytest

from nodegate.errors import ConfigError
from nodegate.flock import LockHeldError
from nodegate.remediation.state import (
    ActionRecord,
    InvalidTransition,
    NodeRemediation,
    Phase,
    StateStore,
)
from tests.remediation.helpers import NODE, NOW


def test_a_missing_file_is_in_service_and_a_round_trip_keeps_everything(store: StateStore
                                                                         ) -> None:
    state = store.load(NODE)
    assert state.phase is Phase.IN_SERVICE and state.action is None
    state.move(Phase.DRAINED, NOW)
    state.reason = "nodegate: xid_events[gpu3]"
    action = ActionRecord("reset_gpu", ["gpu3"], {"gpu3": "S3"}, NOW, "boot-a")
    store.record_intent(state, action, NOW)
    again = store.load(NODE)
    assert again.phase is Phase.REMEDIATING and again.in_flight
    assert again.action is not None and again.action.serials == {"gpu3": "S3"}
    assert again.reason == "nodegate: xid_events[gpu3]"
    store.record_outcome(again, "done", NOW + dt.timedelta(seconds=5))
    final = store.load(NODE)
    assert final.phase is Phase.REQUALIFYING and not final.in_flight
    assert [a.outcome for a in final.history] == ["done"]


@pytest.mark.parametrize(("start", "to"), [
    (Phase.IN_SERVICE, Phase.REMEDIATING), (Phase.IN_SERVICE, Phase.RMA),
    (Phase.DRAINED, Phase.REQUALIFYING), (Phase.RMA, Phase.REMEDIATING),
    (Phase.REMEDIATING, Phase.IN_SERVICE), (Phase.WAITING_FOR_JOBS, Phase.REQUALIFYING),
])
def test_a_move_the_machine_does_not_allow_is_refused(start: Phase, to: Phase) -> None:
    state = NodeRemediation(NODE, phase=start)
    with pytest.raises(InvalidTransition, match=f"{start.value} -> {to.value}"):
        state.move(to, NOW)
    assert state.phase is start


def test_an_intent_is_never_recorded_twice(store: StateStore) -> None:
    state = NodeRemediation(NODE, phase=Phase.DRAINED)
    store.record_intent(state, ActionRecord("reboot_node", [], {}, NOW, "b"), NOW)
    with pytest.raises(InvalidTransition, match="already in flight"):
        store.record_intent(state, ActionRecord("reboot_node", [], {}, NOW, "b"), NOW)


@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe", b'{"schema": "other/1"}',
                                     b'{"schema": "nodegate.remediation/1", "node": "x",'
                                     b' "phase": "sideways"}'])
def test_garbage_is_an_error_naming_the_file_never_a_reset(store: StateStore,
                                                           content: bytes) -> None:
    store.directory.mkdir(parents=True)
    store.path.write_bytes(content)
    with pytest.raises(ConfigError) as caught:
        store.load(NODE)
    assert str(store.path) in str(caught.value)
    assert store.path.read_bytes() == content  # left as it was


def test_a_fifo_is_refused_without_blocking(store: StateStore) -> None:
    store.directory.mkdir(parents=True)
    os.mkfifo(store.path)
    with pytest.raises(ConfigError, match="FIFO") as caught:
        store.load(NODE)
    assert str(store.path) in str(caught.value)


def test_another_nodes_state_is_refused(store: StateStore) -> None:
    store.save(NodeRemediation("other-node", phase=Phase.DRAINED))
    with pytest.raises(ConfigError, match="other-node"):
        store.load(NODE)


def test_one_node_runs_one_remediation_at_a_time(store: StateStore, tmp_path: Path) -> None:
    inside, release = threading.Event(), threading.Event()

    def hold() -> None:
        with store.locked():
            inside.set()
            release.wait(5)

    # flock locks belong to the open file: a second open in this process is refused too
    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert inside.wait(5)
        with pytest.raises(LockHeldError, match="one remediation at a time"), store.locked():
            pass
    finally:
        release.set()
        holder.join()
    with store.locked():  # free again once the holder is gone
        pass


def test_an_unknown_action_in_the_file_is_refused_naming_it(store: StateStore) -> None:
    state = NodeRemediation(NODE, phase=Phase.DRAINED)
    store.record_intent(state, ActionRecord("reset_gpu", ["gpu1"], {}, NOW, "b"), NOW)
    store.path.write_text(store.path.read_text().replace('"reset_gpu"', '"format_disks"'))
    with pytest.raises(ConfigError, match="format_disks"):
        store.load(NODE)


def test_the_recorded_actions_are_the_remedies_that_act() -> None:
    from nodegate.remediation.actions import Remedy
    from nodegate.remediation.state import ACTIONS

    assert set(ACTIONS) == {r.value for r in Remedy} - {"none", "rma"}
