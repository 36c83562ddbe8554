"""The slurm_node role's prolog/epilog, rendered by the role and run on the simulated board.

Slurm drains a node whose prolog or epilog exits non-zero ("Prolog error", a reason nodegate's
gate never lifts). Another nodegate run holding the battery lock (the scheduled health check,
the HealthCheckProgram's gate) says nothing about the node: the script waits, then skips with
exit 0 and a line in syslog. A FAIL, and a check that could not run, still fail it.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nodegate.battery_lock import BatteryLock
from roles.slurm_node import EPILOG, PROLOG, slurm_node
from tests.conftest import run_cli
from tests.roles.harness import run
from tests.roles.scenarios import host_data

MUNGE_KEY = Path(__file__).parent / "data" / "munge-test.key"  # test data, not a cluster's


def _render(dest: str, **extra: Any) -> str:
    data = host_data(slurm_node_controller="slurmctl", slurm_node_munge_key_file=str(MUNGE_KEY),
                     slurm_node_nodegate=f"{sys.executable} -m nodegate.cli", **extra)
    result = run(slurm_node, data=data)
    assert result.error is None, result.error
    return result.uploads[dest]


def _install(tmp_path: Path, dest: str, **extra: Any) -> Path:
    """The rendered script, and a ``logger`` on PATH that appends what it gets to a file."""
    script = tmp_path / Path(dest).name
    script.write_text(_render(dest, **extra))
    script.chmod(0o755)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    logger = bin_dir / "logger"
    logger.write_text(f'#!/bin/sh\n{{ echo "ARGS $*"; cat; }} >> {tmp_path / "syslog"}\n')
    logger.chmod(logger.stat().st_mode | stat.S_IXUSR)
    return script


def _run(tmp_path: Path, script: Path, scenario: str,
         profile: str = "xe9680-h100") -> subprocess.CompletedProcess[str]:
    """The script as slurmd runs it (no arguments; nodegate's defaults from the node's
    environment), under ``nodegate sim run`` so its nodegate reads the simulated board."""
    env = {"NODEGATE_LOCK_FILE": str(tmp_path / "lock"), "NODEGATE_PROFILE": profile,
           "NODEGATE_REPORT_DIR": str(tmp_path / "r"),
           "NODEGATE_TEXTFILE_DIR": str(tmp_path / "t"),
           "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    (tmp_path / "t").mkdir(exist_ok=True)
    return run_cli("sim", "run", scenario, "--", "sh", str(script), env=env)


def _syslog(tmp_path: Path) -> str:
    path = tmp_path / "syslog"
    return path.read_text() if path.exists() else ""


def test_the_rendered_command_waits_then_skips_a_held_lock() -> None:
    prolog = _render(PROLOG)
    assert ("-m nodegate.cli health --checks gpu,log --quiet --lock-wait 60 --skip-if-locked"
            in prolog)
    assert "logger -t nodegate-slurm-prolog" in prolog
    assert "logger -t nodegate-slurm-epilog" in _render(EPILOG)
    assert "--lock-wait 2.5 " in _render(PROLOG, slurm_node_prolog_lock_wait=2.5)


@pytest.mark.parametrize("value", [-1, 3601, "soon", float("nan"), True, None])
def test_a_bad_lock_wait_refuses_the_host_naming_the_knob(value: object) -> None:
    data = host_data(slurm_node_controller="slurmctl", slurm_node_munge_key_file=str(MUNGE_KEY),
                     slurm_node_prolog_lock_wait=value)
    result = run(slurm_node, data=data)
    assert result.error is not None and "slurm_node_prolog_lock_wait must be seconds from 0 " \
        "to 3600" in result.error, result.error
    assert not result.uploads


@pytest.mark.parametrize("dest", [PROLOG, EPILOG])
def test_a_held_lock_is_skipped_not_a_drain(tmp_path: Path, dest: str) -> None:
    """The cron health check holds the lock as a job starts: before the fix the prolog
    passed nodegate's exit 3 through, and Slurm drained a healthy node."""
    script = _install(tmp_path, dest, slurm_node_prolog_lock_wait=1)
    with BatteryLock(tmp_path / "lock"):
        result = _run(tmp_path, script, "h100-hgx+nvlink-down@gpu3.link5")
    assert result.returncode == 0, result.stderr
    line = (f"nodegate health: skipped: another nodegate battery run holds {tmp_path / 'lock'} "
            f"(pid {os.getpid()}) after waiting 1 s")
    assert line in result.stderr
    kind = Path(dest).name.removeprefix("nodegate-slurm-")
    assert f"ARGS -t nodegate-slurm-{kind}\n{line}" in _syslog(tmp_path)
    assert not (tmp_path / "r").exists()  # nothing was judged: no report for the gate


def test_a_fail_still_fails_the_prolog(tmp_path: Path) -> None:
    script = _install(tmp_path, PROLOG, slurm_node_prolog_lock_wait=1)
    result = _run(tmp_path, script, "h100-hgx+nvlink-down@gpu3.link5")
    assert result.returncode == 1, result.stderr
    assert "nodegate health: FAIL" in _syslog(tmp_path)
    healthy = _run(tmp_path, script, "h100-hgx")
    assert healthy.returncode == 0, healthy.stderr
    assert "nodegate health: PASS" in healthy.stderr


def test_a_check_that_cannot_run_still_fails_the_prolog(tmp_path: Path) -> None:
    """Exit 2 (no usable profile: nothing could be measured) is never a pass, lock or not."""
    script = _install(tmp_path, PROLOG, slurm_node_prolog_lock_wait=1)
    with BatteryLock(tmp_path / "lock"):
        result = _run(tmp_path, script, "h100-hgx", profile="xe9999-h900")
    assert result.returncode == 2, result.stderr
    assert "unknown profile 'xe9999-h900'" in _syslog(tmp_path)


def test_the_hooks_load_the_environment_file_slurmd_does_not_give_them(tmp_path: Path) -> None:
    """slurmd runs its hooks with an environment of its own (SLURM_* only): in the lab the
    simulated driver's variables never reached them. ``slurm_node_hook_env_file`` is loaded
    first, literally; here it names another profile, which the check then uses."""
    env_file = tmp_path / "hook.env"
    env_file.write_text("# site settings for nodegate's hooks\nNODEGATE_PROFILE=xe9999-h900\n"
                        "NOT A VARIABLE\n")
    script = _install(tmp_path, PROLOG, slurm_node_prolog_lock_wait=1,
                      slurm_node_hook_env_file=str(env_file))
    result = _run(tmp_path, script, "h100-hgx")  # its environment says xe9680-h100
    assert result.returncode == 2, result.stderr
    assert "unknown profile 'xe9999-h900'" in _syslog(tmp_path)
    assert "power-poller.env" not in script.read_text()  # the quick check reads no power


def test_the_health_check_loads_the_power_pollers_credentials_as_the_cron_does() -> None:
    """HealthCheckProgram's battery reads the BMC and PDUs: without the poller's ``env:``
    credentials it exited 2 ("environment variable ... is not set") and the gate never judged
    the node (seen on the lab's real slurmd)."""
    wrapper = "/usr/local/sbin/nodegate-slurm-healthcheck"
    health = _render(wrapper, slurm_node_hook_env_file="/etc/environment")
    poller = "done < /etc/nodegate/power-poller.env\nfi\n"
    assert poller in health and "done < /etc/environment\nfi\nexec " in health, health
    assert health.index(poller) < health.index("/etc/environment'")
    assert poller in _render(wrapper)
    without_power = _render(wrapper, pdu_monitor_enabled=False)
    assert not re.search(r"^\s*export\b", without_power, re.M) and "\nexec " in without_power, \
        without_power


@pytest.mark.parametrize("value", ["relative/env", "/etc/env file", "/etc/$HOME", 7])
def test_a_hook_env_file_that_is_no_plain_path_refuses_the_host(value: object) -> None:
    data = host_data(slurm_node_controller="slurmctl", slurm_node_munge_key_file=str(MUNGE_KEY),
                     slurm_node_hook_env_file=value)
    result = run(slurm_node, data=data)
    assert result.error is not None and "slurm_node_hook_env_file must be a plain absolute " \
        "path" in result.error, result.error
