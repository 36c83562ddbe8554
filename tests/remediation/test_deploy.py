"""deploy/remediate.py: one ``nodegate remediate`` step on the nodes that opted in and that
nodegate drained; never on an administrator's drain, never on a node in service."""

from __future__ import annotations

from typing import Any

import pytest

from deploy.remediate import remediate
from tests.roles.harness import run
from tests.roles.scenarios import host_data

NODEGATE_DRAIN = {"state": "IDLE+DRAIN", "reason": "nodegate: gpu_reachable[gpu3]"}


def _run(node: dict[str, Any] | None, **data: Any) -> Any:
    return run(remediate, data=host_data(**data), facts={"gpu.SlurmNode": node})


def _commands(result: Any) -> list[str]:
    return [c for c in result.commands if "nodegate remediate" in c]


def test_a_node_nodegate_drained_gets_one_step_with_the_poller_credentials() -> None:
    result = _run(NODEGATE_DRAIN, remediate_enabled=True)
    assert result.error is None, result.error
    [command] = _commands(result)
    assert "/opt/nodegate/venv/bin/nodegate remediate --node gpu-b01 " in command
    assert "--profile /etc/nodegate/profile.json" in command
    assert "--report-dir /var/lib/nodegate/reports" in command
    assert command.rstrip().endswith("--enable"), command  # the site's opt-in
    assert "--dry-run" not in command
    # the BMC's password by the poller's EnvironmentFile, never its value
    assert "done < /etc/nodegate/power-poller.env" in command
    assert "IDRAC_PASSWORD" not in command


def test_dry_run_passes_through() -> None:
    [command] = _commands(_run(NODEGATE_DRAIN, remediate_enabled=True,
                               remediate_dry_run=True))
    assert "--dry-run" in command


def test_left_to_the_profile_it_follows_remediation_enabled() -> None:
    off = _run(NODEGATE_DRAIN)  # xe9680-h100: remediation.enabled false
    assert _commands(off) == [] and "not enabled" in off.noops[0]
    data = host_data()
    profile = dict(data["nodegate_profile_data"])
    profile["remediation"] = {**profile["remediation"], "enabled": True}
    on = run(remediate, data={**data, "nodegate_profile_data": profile},
             facts={"gpu.SlurmNode": NODEGATE_DRAIN})
    [command] = _commands(on)
    assert "--enable" not in command  # the profile already says so
    explicit_off = _run(NODEGATE_DRAIN, remediate_enabled=False,
                        nodegate_profile_data=profile)
    assert _commands(explicit_off) == []


@pytest.mark.parametrize("state", ["DRAINED", "MIXED+DRAIN", "DOWN+DRAIN", "IDLE+DRAIN"])
def test_an_administrators_drain_is_never_touched(state: str) -> None:
    result = _run({"state": state, "reason": "bad fan, RMA 4711"}, remediate_enabled=True)
    assert result.error is None and _commands(result) == []
    assert "drained by someone else; never touched" in result.noops[0]


@pytest.mark.parametrize("state", ["IDLE", "MIXED", "ALLOCATED"])
def test_a_node_in_service_is_never_taken_out(state: str) -> None:
    """The drain budget stays the gate's: a node it left in service (marked in its Comment)
    is not drained here, nor is any other node in service."""
    result = _run({"state": state, "reason": None}, remediate_enabled=True)
    assert _commands(result) == [] and "not drained" in result.noops[0]


def test_slurm_that_cannot_answer_refuses_the_host() -> None:
    result = _run({"state": None, "reason": None, "error": "Unable to contact slurm "
                   "controller"}, remediate_enabled=True)
    assert _commands(result) == []
    assert result.error is not None and "Unable to contact" in result.error


def test_not_a_slurm_node_is_nothing() -> None:
    data = host_data(remediate_enabled=True)
    data.pop("nodegate_slurm")
    result = run(remediate, data=data, facts={"gpu.SlurmNode": NODEGATE_DRAIN})
    assert _commands(result) == [] and "not a Slurm node" in result.noops[0]


def test_where_remediation_is_on_the_agent_carries_torch() -> None:
    """The re-qualification is the standard level: its load needs torch on the node even
    where the gate itself only runs the quick check."""
    from roles.agent import agent
    from tests.roles.scenarios import converged_facts, converged_files

    facts = converged_facts("ubuntu22")
    facts["packages.VenvDistributions"] = {"nodegate": ["0.1.0"], "pysnmp": ["7.1.22"]}

    def pip(**data: Any) -> list[str]:
        result = run(agent, data=host_data(gate_level="quick", **data), facts=facts,
                     files=converged_files("ubuntu22"), converged=True)
        return [c for c in result.commands if "/bin/pip install" in c]

    assert pip() == []
    [install] = pip(remediate_enabled=True)
    assert install.endswith(" torch"), install
    assert pip(remediate_enabled=False) == []
