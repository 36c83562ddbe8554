"""nvidia-persistenced: started after the driver, and a failed start names the unit and its
journal. Facts in, commands out; the failure path runs the real shell command
against stub ``systemctl``/``journalctl``."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from roles.nvidia_driver import nvidia_driver
from roles.ops.systemd import start_or_explain
from tests.roles.harness import Result, run
from tests.roles.scenarios import DRIVER, converged_facts, converged_files, host_data

UNIT = "nvidia-persistenced.service"
OP = "nvidia-persistenced enabled and running"


def _persistenced(result: Result) -> list[str]:
    ops = [op for op in result.ops if OP in op.name]
    assert len(ops) == 1, [op.name for op in result.ops]
    return ops[0].commands


def _stopped(**extra: Any) -> dict[str, Any]:
    """A converged node whose persistenced is stopped and disabled."""
    return {**converged_facts("ubuntu22"), "systemd.SystemdStatus": {},
            "systemd.SystemdEnabled": {}, **extra}


def test_fresh_node_loads_the_driver_before_starting_persistenced() -> None:
    result = run(nvidia_driver, data=host_data())
    names = [op.name for op in result.ops]
    install = next(i for i, n in enumerate(names) if "nvidia-driver-570" in n and "=" in n)
    start = next(i for i, n in enumerate(names) if OP in n)
    assert install < start
    commands = _persistenced(result)
    assert commands[0] == "modprobe nvidia"
    assert commands[1].startswith(f"systemctl start {UNIT} || ")
    assert commands[2] == f"systemctl enable {UNIT}"


def test_loaded_driver_is_not_probed_again() -> None:
    result = run(nvidia_driver, data=host_data(), facts=_stopped(),
                 files=converged_files("ubuntu22"), converged=True)
    commands = _persistenced(result)
    assert not any(c.startswith("modprobe") for c in commands)
    assert commands[0].startswith(f"systemctl start {UNIT}")


def test_stale_module_waits_for_the_reboot_but_is_enabled() -> None:
    facts = _stopped(**{"kernel.LoadedModuleVersions": {"nvidia": "550.90.07"}})
    result = run(nvidia_driver, data=host_data(), facts=facts,
                 files=converged_files("ubuntu22"), converged=True)
    assert _persistenced(result) == [f"systemctl enable {UNIT}"]
    assert any("starts at the next boot" in n and "550.90.07" in n and DRIVER in n
               for n in result.noops)


def test_container_never_loads_a_module() -> None:
    result = run(nvidia_driver, data=host_data(), facts=_stopped(**{
        "virt.Container": "systemd-nspawn", "kernel.LoadedModuleVersions": {}}),
        files=converged_files("ubuntu22"), converged=True)
    commands = _persistenced(result)
    assert not any("modprobe" in c for c in commands)
    assert commands[0].startswith(f"systemctl start {UNIT}")


def test_running_and_enabled_is_a_noop() -> None:
    result = run(nvidia_driver, data=host_data(), facts=converged_facts("ubuntu22"),
                 files=converged_files("ubuntu22"), converged=True)
    assert _persistenced(result) == []


def _stub(tmp_path: Path, systemctl_rc: int) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(
        f"#!/bin/sh\n[ {systemctl_rc} -eq 0 ] || echo \"Job for $2 failed because the control "
        f"process exited with error code.\" >&2\nexit {systemctl_rc}\n")
    (bin_dir / "journalctl").write_text(
        "#!/bin/sh\necho \"journalctl $*\"\necho 'node1 nvidia-persistenced: Failed to query "
        "NVIDIA devices'\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_failed_start_names_the_unit_and_its_journal(tmp_path: Path) -> None:
    command = str(start_or_explain(UNIT).get_raw_value())
    proc = subprocess.run(["sh", "-c", command], env=_stub(tmp_path, 1), capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 1
    assert f"nodegate: {UNIT} failed to start; its last 20 journal lines:" in proc.stderr
    assert f"-n 20 -u {UNIT}" in proc.stderr
    assert "Failed to query NVIDIA devices" in proc.stderr


def test_successful_start_prints_nothing(tmp_path: Path) -> None:
    command = str(start_or_explain(UNIT).get_raw_value())
    proc = subprocess.run(["sh", "-c", command], env=_stub(tmp_path, 0), capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0
    assert "journal" not in proc.stderr
