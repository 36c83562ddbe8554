"""Driver upgrades: everything that follows from the version moves with it,
and the node is taken out with the version it leaves recorded before any package moves."""

from __future__ import annotations

import json
from typing import Any

from deploy.upgrade_driver import upgrade
from tests.roles.harness import run
from tests.roles.scenarios import (
    DRIVER,
    AllInstalled,
    converged_facts,
    converged_files,
    host_data,
)

TARGET = "580.65.06"


def _upgrade(state: str | None = "IDLE+DRAIN", reason: str | None = "nodegate: maintenance",
             **data: Any) -> Any:
    facts = {**converged_facts("ubuntu22"), "gpu.GpuProcesses": [],
             "gpu.SlurmNodeState": state,
             "gpu.SlurmNode": None if state is None else {"state": state, "reason": reason}}
    return run(upgrade, data=host_data(**{"nvidia_driver_version": TARGET, **data}), facts=facts,
               files=converged_files("ubuntu22"), converged=False)


def test_the_upgrade_moves_driver_fabric_manager_nscq_and_the_agents_pins() -> None:
    result = _upgrade()
    assert result.error is None, result.error
    commands = "\n".join(result.commands)
    assert "nvidia-driver-580-open" in commands  # the branch follows the version
    assert "nvidia-fabricmanager" in commands and "libnvidia-nscq" in commands
    assert "nvidia-fabricmanager-570" not in commands  # 580 dropped the branch suffix
    profile = json.loads(result.uploads["/etc/nodegate/profile.json"])
    assert (profile["driver"]["branch"], profile["driver"]["version"]) == ("580", TARGET)
    record = json.loads(result.uploads["/var/lib/nodegate/upgrade.json"])
    assert (record["from"], record["to"]) == (DRIVER, TARGET)
    drain = next(c for c in result.commands if "scontrol update" in c)
    assert f"Reason=nodegate: upgrade {DRIVER} -> {TARGET}" in drain and "State=DRAIN" in drain
    # the record and the drain come before any package moves
    first_install = next(i for i, c in enumerate(result.commands) if "apt-get install" in c)
    assert result.commands.index(drain) < first_install


def test_an_administrators_drain_is_kept_and_a_node_outside_slurm_only_recorded() -> None:
    admin = _upgrade(reason="bad fan, ticket 42")
    assert not any("scontrol update" in c for c in admin.commands)
    assert any("drained by an administrator (bad fan, ticket 42); kept" in n
               for n in admin.noops)
    outside = _upgrade(state=None)
    assert not any("scontrol update" in c for c in outside.commands)
    assert "/var/lib/nodegate/upgrade.json" in outside.uploads


def test_a_node_already_at_the_target_is_neither_drained_nor_recorded() -> None:
    result = _upgrade(nvidia_driver_version=DRIVER)
    assert not any("scontrol update" in c for c in result.commands)
    assert "/var/lib/nodegate/upgrade.json" not in result.uploads


def test_a_busy_node_is_refused_before_anything_is_recorded() -> None:
    facts = {**converged_facts("ubuntu22"), "gpu.SlurmNodeState": "MIXED",
             "gpu.GpuProcesses": [{"pid": 7, "name": "python", "used_mib": 1}]}
    result = run(upgrade, data=host_data(nvidia_driver_version=TARGET), facts=facts,
                 files=converged_files("ubuntu22"))
    assert result.error is not None and "GPU process(es) running" in result.error
    assert not any("upgrade.json" in c or "scontrol" in c for c in result.commands)


def test_another_branchs_fabric_manager_and_nscq_are_replaced_not_left_held() -> None:
    """570 -> 580 renames them (nvidia-fabricmanager-570 -> nvidia-fabricmanager); the held
    old names conflict, so apt refused the change until they were unheld and removed with it."""
    installed = AllInstalled()
    installed.update({"nvidia-fabricmanager-570": [f"{DRIVER}-1"],
                      "libnvidia-nscq-570": [f"{DRIVER}-1"], "nvidia-driver-570-open": [],
                      "nvidia-fabricmanager-570-dev": [f"{DRIVER}-1"]})
    result = run(
        upgrade, data=host_data(nvidia_driver_version=TARGET),
        facts={**converged_facts("ubuntu22"), "deb.DebPackages": installed,
               "gpu.GpuProcesses": [], "gpu.SlurmNodeState": "IDLE+DRAIN",
               "gpu.SlurmNode": {"state": "IDLE+DRAIN", "reason": None}},
        files=converged_files("ubuntu22"))
    fm = next(c for c in result.commands if "apt-get install" in c and "nvidia-fabricmanager" in c)
    assert "nvidia-fabricmanager-570-" in fm.split() and "libnvidia-nscq-570-" in fm.split()
    assert "nvidia-fabricmanager-570-dev-" not in fm.split()  # not a branch name of ours
    assert "apt-mark unhold libnvidia-nscq-570 nvidia-fabricmanager-570 " \
        "-o DPkg::Lock::Timeout=300" in result.commands
    driver = next(c for c in result.commands if "apt-get install" in c and "driver-580" in c)
    assert "nvidia-driver-570-open-" in driver.split()


def test_a_retry_after_a_failed_upgrade_records_the_version_it_first_left() -> None:
    """A broken build left its packages half-installed; the node is still drained with the
    first attempt's reason, so the retry keeps that attempt's "from", not the broken build."""
    installed = AllInstalled(**{"nvidia-driver-580-open": "580.76.05"})
    result = run(upgrade, data=host_data(nvidia_driver_version=TARGET),
                 facts={**converged_facts("ubuntu22"), "deb.DebPackages": installed,
                        "gpu.GpuProcesses": [], "gpu.SlurmNodeState": "IDLE+DRAIN",
                        "gpu.SlurmNode": {"state": "IDLE+DRAIN",
                                          "reason": f"nodegate: upgrade {DRIVER} -> 580.76.05"}},
                 files=converged_files("ubuntu22"))
    record = json.loads(result.uploads["/var/lib/nodegate/upgrade.json"])
    assert (record["from"], record["to"]) == (DRIVER, TARGET)
    drain = next(c for c in result.commands if "scontrol update" in c)
    assert f"Reason=nodegate: upgrade {DRIVER} -> {TARGET}" in drain


def test_a_node_without_a_site_node_name_is_drained_by_its_inventory_name() -> None:
    """slurm_controller lists such a host under its inventory name; the upgrade read and
    drained only hosts with ``slurm.node_name``, so this one, busy in Slurm, was not drained
    (and the rolling upgrade then rebooted it, vouching for a drain that never happened)."""
    facts = {**converged_facts("ubuntu22"), "gpu.GpuProcesses": [],
             "gpu.SlurmNodeState": "MIXED", "gpu.SlurmNode": {"state": "MIXED", "reason": None}}
    result = run(upgrade, data=host_data(nvidia_driver_version=TARGET, nodegate_slurm={}),
                 facts=facts, files=converged_files("ubuntu22"))
    drain = next(c for c in result.commands if "scontrol update" in c)
    assert "NodeName=testhost" in drain and "State=DRAIN" in drain


def test_a_slurm_that_cannot_answer_stops_the_upgrade_before_any_package_moves() -> None:
    """Unreachable controller: not "not in Slurm". The node may run jobs; nothing moves."""
    from roles.ops.common import FAILURES

    error = "slurm_load_node error: Unable to contact slurm controller (connect failure)"
    facts = {**converged_facts("ubuntu22"), "gpu.GpuProcesses": [],
             "gpu.SlurmNodeState": f"SCONTROL_FAILED: {error}",
             "gpu.SlurmNode": {"state": None, "reason": None, "error": error}}
    result = run(upgrade, data=host_data(nvidia_driver_version=TARGET), facts=facts,
                 files=converged_files("ubuntu22"), executing=True)
    assert result.failed and "record the driver left and drain" in result.failed[0]
    assert FAILURES["testhost"] == (f"Slurm cannot say whether gpu-b01 runs jobs "
                                         f"({error}); not upgrading")
    assert not any("apt-get install" in c or "scontrol update" in c for c in result.commands)


def test_a_branch_change_on_ubuntu_records_the_version_it_leaves() -> None:
    """Ubuntu names the branch in the package: before a 570 -> 580 upgrade the node has
    ``nvidia-driver-570-open``, none of the 580 names. The record's "from" (the pin to go back
    to) came out None: only the target's names were looked up. Installed here: what NVIDIA's
    Ubuntu repository installs for 570-open (a sample), nothing of 580."""
    installed = {name: ["570.133.20-0ubuntu1"] for name in (
        "nvidia-driver-570-open", "libnvidia-compute-570", "nvidia-kernel-source-570-open",
        "nvidia-dkms-570-open", "libnvidia-gl-570")}
    installed.update({"libnccl2": ["2.26.2-1+cuda12.8"], "nvidia-fabricmanager-570":
                      ["570.133.20-1"], "libnvidia-nscq-570": ["570.133.20-1"]})
    facts = {**converged_facts("ubuntu22"), "deb.DebPackages": installed,
             "gpu.GpuProcesses": [], "gpu.SlurmNodeState": "IDLE+DRAIN",
             "gpu.SlurmNode": {"state": "IDLE+DRAIN", "reason": None}}
    result = run(upgrade, data=host_data(nvidia_driver_version=TARGET), facts=facts,
                 files=converged_files("ubuntu22"))
    assert result.error is None, result.error
    record = json.loads(result.uploads["/var/lib/nodegate/upgrade.json"])
    assert (record["from"], record["to"]) == (DRIVER, TARGET)
    drain = next(c for c in result.commands if "scontrol update" in c)
    assert f"Reason=nodegate: upgrade {DRIVER} -> {TARGET}" in drain
