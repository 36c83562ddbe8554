"""The fabricmanager role's NVLink 5 bring-up: nvlsm and the InfiniBand modules Fabric
Manager's precheck needs, on NVLink 5 boards only, before Fabric Manager starts."""

from __future__ import annotations

from typing import Any

import pytest

from nodegate.profiles import resolve_profile
from roles.fabricmanager import NVLINK5_MODULES_CONF, fabricmanager
from tests.roles.harness import run
from tests.roles.scenarios import OSES, converged_facts, converged_files, host_data

NVL5 = {"nvlink": {"generation": 5}, "driver": {"nvlsm": True}}


def nvl5_data(**extra: Any) -> dict[str, Any]:
    """An XE9680 node with an NVLink 5 fabric (the B200 profiles land separately)."""
    data = host_data("xe9680-h100", **extra)
    data["nodegate_profile_data"] = resolve_profile("xe9680-h100", host_overrides=NVL5).data
    return data


def _index(commands: list[str], needle: str) -> int:
    return next(i for i, c in enumerate(commands) if needle in c)


@pytest.mark.parametrize("os_name", OSES)
def test_nvlink5_gets_nvlsm_and_the_modules_before_fabric_manager_starts(os_name: str) -> None:
    result = run(fabricmanager, os=os_name, data=nvl5_data())
    assert result.error is None
    cmds = result.commands
    start = _index(cmds, "systemctl start nvidia-fabricmanager.service")
    assert _index(cmds, " nvlsm") < start
    assert _index(cmds, "modprobe -a ib_umad") < start
    assert _index(cmds, "modprobe -a mlx5_ib") < start
    assert result.uploads[NVLINK5_MODULES_CONF].splitlines()[-2:] == ["ib_umad", "mlx5_ib"]
    assert not any("nvlsm.service" in c for c in cmds), "FM's start script runs NVLSM"


@pytest.mark.parametrize("os_name", OSES)
def test_h100_and_a100_get_none_of_it(os_name: str) -> None:
    for profile in ("xe9680-h100", "hgx-a100-80gb"):
        result = run(fabricmanager, os=os_name, data=host_data(profile))
        assert result.error is None
        text = "\n".join(result.commands)
        assert "nvidia-fabricmanager.service" in text
        for needle in ("nvlsm", "ib_umad", "mlx5_ib", "modules-load.d"):
            assert needle not in text, (profile, needle)
        assert NVLINK5_MODULES_CONF not in result.uploads


def test_eighteen_links_alone_are_not_nvlink5() -> None:
    """H100 has 18 links too; nvlsm asked for on a generation 4 board changes nothing."""
    data = host_data("xe9680-h100", fabricmanager_nvlsm=True)
    assert "nvlsm" not in "\n".join(run(fabricmanager, data=data).commands)


@pytest.mark.parametrize("os_name", OSES)
def test_converged_nvlink5_node_is_a_noop(os_name: str) -> None:
    facts = {**converged_facts(os_name),
             "server.KernelModules": {m: {} for m in ("ib_umad", "mlx5_ib")}}
    result = run(fabricmanager, os=os_name, data=nvl5_data(), converged=True, facts=facts,
                 files=converged_files(os_name))
    assert result.error is None
    assert [op.name for op in result.unconditional_changes()] == []


def test_in_a_container_the_modules_are_the_hosts() -> None:
    result = run(fabricmanager, data=nvl5_data(), facts={"virt.Container": "docker"})
    assert not any("modprobe" in c for c in result.commands)
    assert any("ib_umad" in n and "container" in n for n in result.noops)
