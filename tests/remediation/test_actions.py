"""The action table: evidence in, NVIDIA's documented remedy out; the reset gate."""

from __future__ import annotations

import pytest

from nodegate.remediation.actions import (
    Remedy,
    decide,
    findings_from_recovery_actions,
    findings_from_results,
    reset_plan,
)
from tests.remediation.helpers import failed, xid_result

ALL = [f"gpu{i}" for i in range(8)]


@pytest.mark.parametrize(("action", "remedy"), [
    ("reset_gpu", Remedy.RESET_GPU), ("reboot_node", Remedy.REBOOT_NODE),
    ("inspect_hardware", Remedy.RMA), ("application", Remedy.NONE),
    ("unknown", Remedy.NONE),
])
def test_the_catalogue_action_of_an_xid_gives_the_remedy(action: str, remedy: Remedy) -> None:
    plan = decide(findings_from_results([xid_result("gpu3", 48, action)]))
    assert plan.remedy is remedy
    assert "xid-errors/analyzing-xid-catalog" in plan.findings[0].source


def test_a_recurrent_xid_and_a_remap_failure_are_rma() -> None:
    assert decide(findings_from_results([xid_result("gpu2", 48, "reset_gpu", recurrent=True)])
                  ).remedy is Remedy.RMA
    plan = decide(findings_from_results([failed("remap_failure", "gpu5"),
                                         failed("remap_pending", "gpu1")]))
    assert plan.remedy is Remedy.RMA and plan.rma_entities == ("gpu5",)


def test_a_gpu_off_the_bus_is_a_power_cycle_and_the_worst_remedy_wins() -> None:
    plan = decide(findings_from_results([failed("gpu_reachable", "gpu6", "lost"),
                                         xid_result("gpu1", 48, "reset_gpu")]))
    assert plan.remedy is Remedy.POWER_CYCLE and plan.targets == ("gpu6",)


def test_nvml_recovery_action_absent_is_unknown_not_none() -> None:
    assert findings_from_recovery_actions({"gpu0": None, "gpu1": "2"}) == []
    assert decide(findings_from_recovery_actions({"gpu4": 2})).remedy is Remedy.REBOOT_NODE
    assert decide(findings_from_recovery_actions({"gpu4": 1})).targets == ("gpu4",)
    assert decide(findings_from_recovery_actions({"gpu4": 0})).remedy is Remedy.NONE


def test_a_gpu_with_a_process_is_never_reset() -> None:
    plan = reset_plan(["gpu3"], all_gpus=ALL, processes={"gpu5": [4242]}, nvswitch=True,
                      architecture="hopper", fabric_manager_running=True)
    assert plan.gpus == () and plan.blocked is not None and "4242" in plan.blocked


@pytest.mark.parametrize(("arch", "fm", "expected"), [
    ("hopper", False, ("gpu3",)), ("blackwell", None, ("gpu3",)),
    ("ampere", True, ("gpu3",)), ("ampere", False, tuple(ALL)), (None, True, tuple(ALL)),
])
def test_nvswitch_reset_scope_follows_nvidia_smi(arch: str | None, fm: bool | None,
                                                 expected: tuple[str, ...]) -> None:
    plan = reset_plan(["gpu3"], all_gpus=ALL, processes={}, nvswitch=True,
                      architecture=arch, fabric_manager_running=fm)
    assert plan.blocked is None and plan.gpus == expected


def test_a_profile_may_forbid_resets() -> None:
    plan = reset_plan(["gpu3"], all_gpus=ALL, processes={}, nvswitch=False,
                      architecture="hopper", fabric_manager_running=True, allowed=False)
    assert plan.blocked is not None and "gpu_reset" in plan.blocked
