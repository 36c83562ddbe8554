"""The rolling upgrade's batches and summary (nodegate.cluster.rollout)."""

from __future__ import annotations

import pytest

from nodegate.cluster.rollout import Member, plan_batches, standings, summary_text
from nodegate.errors import ConfigError

GPU = [Member(f"node{i}", "gpu") for i in range(1, 5)]


def test_batches_of_the_size_asked_in_inventory_order() -> None:
    assert plan_batches(GPU, 2) == [["node1", "node2"], ["node3", "node4"]]
    assert plan_batches(GPU, 3) == [["node1", "node2", "node3"], ["node4"]]
    assert plan_batches(GPU, 1) == [["node1"], ["node2"], ["node3"], ["node4"]]


def test_no_batch_takes_more_of_a_partition_than_its_max_unavailable() -> None:
    mixed = [Member("a1", "a"), Member("a2", "a"), Member("b1", "b"), Member("a3", "a"),
             Member("b2", "b")]
    assert plan_batches(mixed, 3, {"a": 1, "default": 2}) == [["a1", "b1", "b2"], ["a2"],
                                                              ["a3"]]
    assert plan_batches(mixed, 4, 1) == [["a1", "b1"], ["a2", "b2"], ["a3"]]
    with pytest.raises(ConfigError, match="rolling_batch"):
        plan_batches(mixed, 0)
    with pytest.raises(ConfigError, match="partition 'a'"):
        plan_batches(mixed, 2, {"a": 0})


def test_the_first_failure_stops_every_later_batch() -> None:
    batches = [["node1", "node2"], ["node3", "node4"]]
    rows = standings(batches, {"node1": "at 580.65.06, validated and joined",
                               "node2": "drained (IDLE+DRAIN), no jobs"},
                     {"node2": "failed: left drained"}, set())
    assert [(r.name, r.batch, r.status) for r in rows] == [
        ("node1", 1, "upgraded"), ("node2", 1, "failed"), ("node3", 2, "untouched"),
        ("node4", 2, "untouched")]
    assert rows[2].detail == "rollout stopped after node2 failed"
    text = summary_text("580.65.06", rows)
    assert text.splitlines()[0] == "rolling upgrade to 580.65.06:"
    assert text.splitlines()[-1].strip() == "1 failed, 2 untouched, 1 upgraded"


def test_a_skipped_node_does_not_stop_the_rollout() -> None:
    rows = standings([["node1"], ["node2"]],
                     {"node1": "skipped: jobs still running after 60s (MIXED+DRAIN)",
                      "node2": "at 580.65.06, validated and joined"}, {}, {"node1"})
    assert [(r.name, r.status) for r in rows] == [("node1", "skipped"), ("node2", "upgraded")]
