"""The lab's baseline (``nodegate-lab snapshot``/``reset``) on a host dir: no root, no
containers. The slow lab-upgrade group (tests/roles/lab_group.py) runs it for real."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodegate.errors import CannotRunError
from nodegate_lab import baseline, cli, config, lab


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> config.Member:
    monkeypatch.setenv("NODEGATE_LAB_DIR", str(tmp_path))
    member = config.node(1)
    (member.dir / "upper" / "etc").mkdir(parents=True)
    (member.dir / "upper" / "etc" / "deployed").write_text("A\n")
    (member.dir / "work" / "work").mkdir(parents=True)
    (member.dir / "root").mkdir()
    return member


def test_a_snapshot_keeps_the_upper_layer_as_a_lower_one_under_a_fresh_upper(
        node: config.Member) -> None:
    assert baseline.layers(node) == []
    baseline.take(node)
    assert baseline.layers(node) == [node.dir / "baseline"]
    assert (node.dir / "baseline" / "etc" / "deployed").read_text() == "A\n"
    assert list((node.dir / "upper").iterdir()) == [] == list((node.dir / "work").iterdir())
    with pytest.raises(CannotRunError, match="already has a baseline"):
        baseline.take(node)


def test_a_reset_drops_what_changed_since_the_baseline_and_keeps_the_baseline(
        node: config.Member) -> None:
    with pytest.raises(CannotRunError, match="no baseline"):
        baseline.drop_changes(node)
    assert (node.dir / "upper" / "etc" / "deployed").is_file()  # refused: nothing touched
    baseline.take(node)
    (node.dir / "upper" / "etc").mkdir()
    (node.dir / "upper" / "etc" / "deployed").write_text("B\n")
    baseline.drop_changes(node)
    assert list((node.dir / "upper").iterdir()) == []
    assert (node.dir / "baseline" / "etc" / "deployed").read_text() == "A\n"


def test_layers_change_only_under_a_host_that_is_off(node: config.Member,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("nodegate_lab.hosts.supervisor_pid", lambda member: 4242)
    with pytest.raises(CannotRunError, match="still running or mounted"):
        baseline.take(node)
    assert not baseline.has(node) and (node.dir / "upper" / "etc" / "deployed").is_file()


def test_the_shape_of_the_last_up_is_recorded_and_its_absence_is_loud(
        node: config.Member) -> None:
    with pytest.raises(CannotRunError, match="shape is not recorded"):
        baseline.read_shape()
    shape: dict[str, object] = {"nodes": 4, "faults": {"node2": ["ecc-dbe@gpu5"]},
                                "scenario": "h100-hgx", "with_mirror": True}
    baseline.write_shape(shape)
    assert baseline.read_shape() == shape
    assert lab.baseline_shape() is None  # node1 has no baseline yet
    baseline.write_shape(shape, baseline.BASELINE_SHAPE)
    baseline.take(node)
    baseline.write_shape({**shape, "nodes": 2})  # a later `up` does not move the baseline
    assert lab.baseline_shape() == shape


def test_the_cli_has_snapshot_and_reset_with_faults() -> None:
    args = cli.build_parser().parse_args(["reset", "--fault", "node2:xid79@gpu6"])
    assert args.func is cli.cmd_reset and args.fault == ["node2:xid79@gpu6"]
    assert cli.build_parser().parse_args(["snapshot"]).func is cli.cmd_snapshot
