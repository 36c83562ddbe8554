"""Holds have owners against the real Slurm 22.05 (tests/cluster/conftest.py): compare-and-set
when a person acts between the gate's read and its update, and a person's re-drain in
nodegate's words told from nodegate's own by the reason time slurmctld stamps."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from nodegate.cluster import holds
from nodegate.cluster.holds import Evidence, HoldStore, Kind, Raced
from tests.cluster.conftest import SlurmCluster

OURS = "nodegate: xid_events[node]"
CAROL = "bad fan (carol)"


def test_a_person_draining_after_the_read_keeps_the_drain(slurm: SlurmCluster,
                                                          tmp_path: Path) -> None:
    node = "ng5"
    slurm.reset(node)
    scheduler, store = slurm.scheduler(), HoldStore(tmp_path)
    holds.drain(scheduler, store, scheduler.state(node), OURS)
    assert slurm.sinfo(node) == ("drained", OURS)
    decided = scheduler.state(node)  # the resume decision's read
    slurm.run("scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={CAROL}")
    with pytest.raises(Raced, match="changed since the decision's read"):
        holds.resume(scheduler, store, decided, Evidence(level="quick"))
    assert slurm.sinfo(node) == ("drained", CAROL)
    # and a drain decided on an idle node finds the person's drain first: kept
    slurm.reset(node)
    idle = scheduler.state(node)
    slurm.run("scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={CAROL}")
    with pytest.raises(Raced):
        holds.drain(scheduler, store, idle, OURS)
    assert slurm.sinfo(node) == ("drained", CAROL)
    slurm.reset(node)


def test_a_redrain_in_nodegates_words_by_a_person_is_theirs(slurm: SlurmCluster,
                                                           tmp_path: Path) -> None:
    node = "ng6"
    slurm.reset(node)
    scheduler, store = slurm.scheduler(), HoldStore(tmp_path)
    holds.drain(scheduler, store, scheduler.state(node), OURS)
    record = store.get(node)
    assert record is not None and record.slurm_time is not None
    assert holds.classify(scheduler.state(node), record).kind is Kind.HEALTH
    slurm.reset(node)
    time.sleep(1.1)  # slurmctld stamps reasons to the second
    slurm.run("scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={OURS}")
    now = scheduler.state(node)
    assert holds.classify(now, store.get(node)).kind is Kind.PERSON
    change = holds.resume(scheduler, store, now, Evidence(level="acceptance"))
    assert not change.changed and slurm.sinfo(node) == ("drained", OURS)
    slurm.reset(node)
