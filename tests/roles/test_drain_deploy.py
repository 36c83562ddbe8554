"""deploy/drain.py: the maintenance hold is put on by the node's own ``nodegate hold``
(recorded there), never by a bare ``scontrol update`` nodegate could not tell from a person's."""

from __future__ import annotations

from deploy.drain import drain
from tests.roles.harness import run
from tests.roles.scenarios import host_data


def _drain(state: str | None) -> list[str]:
    data = host_data(drain_reason="driver upgrade", slurm_node_name="gpu-b01")
    result = run(drain, data=data, facts={"gpu.SlurmNodeState": state})
    assert result.error is None, result.error
    return result.commands


def test_the_drain_goes_through_the_recorded_maintenance_hold() -> None:
    commands = "\n".join(_drain("IDLE"))
    assert "/bin/nodegate hold --node gpu-b01 --maintenance 'driver upgrade'" in commands
    assert "scontrol" not in commands


def test_a_node_already_drained_is_left_alone() -> None:
    assert not any("hold" in c for c in _drain("IDLE+DRAIN"))
