"""The rolling upgrade's batches and summary (nodegate.cluster.rollout)."""

from __future__ import annotations

import pytest

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


def test_knobs_as_pyinfra_data_gives_them_are_read_strictly() -> None:
    """``--data`` gives strings; ``int()`` took ``2.5``/``true`` silently and turned
    ``Infinity``/``abc`` into tracebacks or messages without the knob's name."""
    assert parse_count("2", "rolling_batch") == 2 and parse_count(3, "rolling_batch") == 3
    for bad in ("2.5", 2.5, True, "true", "Infinity", "abc", "", None, [1]):
        with pytest.raises(ConfigError, match="key rolling_batch: must be a whole number"):
            parse_count(bad, "rolling_batch")
    assert parse_max_unavailable(None) is None
    assert parse_max_unavailable("2") == 2
    assert parse_max_unavailable('{"gpu": 1, "default": "2"}') == {"gpu": 1, "default": 2}
    assert parse_max_unavailable({"gpu": 1}) == {"gpu": 1}
    with pytest.raises(ConfigError, match=r"key rolling_max_unavailable\.gpu: must be a whole"):
        parse_max_unavailable('{"gpu": null}')
    for bad in ("NaN", "Infinity", "gpu:1", "[1]", [1], 1.5):
        with pytest.raises(ConfigError, match="rolling_max_unavailable"):
            parse_max_unavailable(bad)
    with pytest.raises(ConfigError, match="not a JSON object"):
        parse_max_unavailable('{"gpu": 1')
    assert parse_seconds("3600", "rolling_job_timeout_s") == 3600.0
    assert parse_seconds(0, "rolling_job_timeout_s") == 0.0
    for bad in ("abc", "NaN", "inf", "-5", -1, True, None):
        with pytest.raises(ConfigError, match="key rolling_job_timeout_s: must be a"):
            parse_seconds(bad, "rolling_job_timeout_s")
