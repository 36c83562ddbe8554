"""The agent's schedule is installed, enabled and seen running: a minimal image
without cron got a cron entry nothing ran, and the deploy exited 0.

Facts in, commands out for the choice (a timer where systemd is init, cron with its daemon
installed and enabled elsewhere); the node-side scripts (first run, verification) run for real
under /bin/sh, with a lying ``systemctl`` on PATH where systemd is needed.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from roles.agent import agent
from roles.ops.schedule import (
    STAMP,
    cron_body,
    first_run_steps,
    verify_script,
)
from tests.roles.harness import run
from tests.roles.scenarios import host_data

VERIFY = "agent: the schedule runs"


def _op(result: object, prefix: str) -> list[str]:
    ops = [op for op in result.ops if op.name.split(" | ")[-1].startswith(prefix)]  # type: ignore[attr-defined]
    assert len(ops) == 1, [op.name for op in result.ops]  # type: ignore[attr-defined]
    return ops[0].commands


def test_systemd_init_gets_the_timer_enabled_and_run_once() -> None:
    result = run(agent, data=host_data(), facts={"schedule.SystemdBooted": True})
    assert result.error is None
    assert "/etc/systemd/system/nodegate-health.timer" in result.uploads
    assert "/etc/cron.d/nodegate-health" not in result.uploads
    assert not any("install" in c and " cron " in f"{c} " for c in result.commands)
    verify = _op(result, VERIFY)[0]
    assert "systemctl is-enabled --quiet nodegate-health.timer" in verify
    assert "systemctl is-active --quiet nodegate-health.timer" in verify
    assert "LoadState --value nodegate-health.service" in verify
    assert "timeout 900 sh -c '/opt/nodegate/venv/bin/nodegate health --quiet" in verify
    assert "nodegate gate" not in verify  # the gate needs Slurm: the deploy's join runs it
    assert f"echo systemd-timer > {STAMP}" in verify
    timer = result.uploads["/etc/systemd/system/nodegate-health.timer"]
    assert "OnActiveSec=5min" in timer and "OnBootSec" not in timer  # never fires at once


@pytest.mark.parametrize(("os_name", "package", "service"),
                         [("debian12", "cron", "cron"), ("rocky9", "cronie", "crond")])
def test_without_systemd_cron_is_installed_started_and_run_once(os_name: str, package: str,
                                                                service: str) -> None:
    result = run(agent, os=os_name, data=host_data())  # SystemdBooted: False
    assert result.error is None
    install = _op(result, f"agent: {package} (runs the schedule)")
    assert any(f" {package} " in f"{c} " and "install" in c for c in install), install
    assert _op(result, f"agent: {service} running (no systemd)") == [
        f"pgrep -x {service} >/dev/null || service {service} start"]
    verify = _op(result, VERIFY)[0]
    assert "nodegate health --quiet" in verify and "nodegate gate" not in verify
    assert f"echo cron > {STAMP}" in verify


def test_cron_chosen_where_systemd_runs_is_enabled_through_systemd() -> None:
    result = run(agent, data=host_data(agent_schedule="cron"),
                 facts={"schedule.SystemdBooted": True})
    assert result.error is None
    assert _op(result, "agent: cron enabled and running")  # systemd.service: start + enable
    assert "/etc/systemd/system/nodegate-health.timer" not in result.uploads


def test_a_schedule_seen_running_is_left_alone() -> None:
    facts = {"schedule.SystemdBooted": True,
             "schedule.ScheduleState": {"nodegate-health.timer": "enabled active",
                                        "stamp": "systemd-timer"}}
    result = run(agent, data=host_data(), facts=facts)
    assert _op(result, VERIFY) == []
    assert any("first run was seen" in n for n in result.noops)
    # the stamp of another runner (cron before) is not this schedule's first run
    facts["schedule.ScheduleState"] = {"nodegate-health.timer": "enabled active",
                                       "stamp": "cron"}
    assert _op(run(agent, data=host_data(), facts=facts), VERIFY) != []


def test_an_unknown_schedule_is_refused() -> None:
    result = run(agent, data=host_data(agent_schedule="anacron"))
    assert result.error is not None and "agent_schedule 'anacron'" in result.error


def test_the_cron_line_is_what_it_was() -> None:
    assert cron_body("H", None, None, None) == "H"
    assert cron_body("H", "G", None, None) == "{ H; G; }"
    assert cron_body("H", "G", "R", "/e").startswith("{ if [ -r /e ]; then ")
    assert cron_body("H", "G", "R", "/e").endswith("fi; H; G; R; }")


def _sh(script: str, path: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if path is not None:
        env["PATH"] = f"{path}:{env['PATH']}"
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env,
                          timeout=60, check=False)


def test_a_first_run_that_exits_0_or_1_is_a_run_and_2_fails_with_its_own_lines() -> None:
    ok = first_run_steps([("health check", "echo checked; exit 1"), ("gate", "true")], None, 30)
    assert _sh(ok).returncode == 0
    bad = first_run_steps([("health check", "true"),
                           ("gate", "echo 'nodegate gate: no report in /x' >&2; exit 2")],
                          None, 30)
    done = _sh(bad)
    assert done.returncode == 1
    assert "the scheduled gate failed its first run (exit 2)" in done.stderr
    assert "nodegate gate: no report in /x" in done.stderr


def test_the_first_run_loads_the_env_file_literally(tmp_path: Path) -> None:
    env = tmp_path / "poller.env"
    env.write_text("PDU_COMMUNITY=c$0mm\n# comment\n")
    script = first_run_steps([("health check", 'test "$PDU_COMMUNITY" = \'c$0mm\' || exit 3')],
                             str(env), 30)
    assert _sh(script).returncode == 0, _sh(script).stderr


def _fake_systemctl(tmp_path: Path, *, enabled: bool, active: bool,
                    loads: bool = True) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / "systemctl"
    tool.write_text("#!/bin/sh\ncase \"$1\" in\n"
                    f"  is-enabled) exit {0 if enabled else 1};;\n"
                    f"  is-active) exit {0 if active else 3};;\n"
                    "  show) case \"$3\" in LoadState) echo "
                    f"{'loaded' if loads else 'bad-setting'};; *) echo 'Unit has a bad "
                    "setting';; esac;;\n"
                    "esac\nexit 0\n")
    tool.chmod(0o755)
    return bin_dir


def test_a_disabled_or_broken_timer_fails_the_host_with_the_reason(tmp_path: Path) -> None:
    log = tmp_path / "ran"
    first = first_run_steps([("health check", f"echo ran >> {log}")], None, 30)
    script = verify_script("systemd-timer", "nodegate-health.timer", first).replace(
        f"mkdir -p /var/lib/nodegate && echo systemd-timer > {STAMP}", "true")  # not here
    off = _sh(script, _fake_systemctl(tmp_path, enabled=False, active=True))
    assert off.returncode == 1 and "nodegate-health.timer (the timer of the health schedule) " \
        "is not enabled" in off.stderr
    idle = _sh(script, _fake_systemctl(tmp_path, enabled=True, active=False))
    assert idle.returncode == 1 and "is not active: the health check never runs" in idle.stderr
    broken = _sh(script, _fake_systemctl(tmp_path, enabled=True, active=True, loads=False))
    assert broken.returncode == 1
    assert "nodegate-health.service does not load: Unit has a bad setting" in broken.stderr
    assert not log.exists()  # nothing ran before the schedule was found in effect
    good = _sh(script, _fake_systemctl(tmp_path, enabled=True, active=True))
    assert good.returncode == 0, good.stderr
    assert log.read_text() == "ran\n"  # the first run, once


def test_a_slurm_name_that_is_not_the_hosts_name_refuses_the_host() -> None:
    """A typo of slurm.node_name caught on the node itself (a --limit run has no controller):
    nothing of the role runs, so the schedule's gate never names the wrong node."""
    data = host_data(slurm_node_controller="slurmctl")  # nodegate configures slurmd here
    typo = run(agent, data=data, facts={"server.Hostname": "gpu-b1.hall-b"})
    # the harness's one host is the last active one: refuse ends the run with its message
    assert typo.error is not None and typo.error.startswith(
        "testhost: nodegate refused: slurm.node_name 'gpu-b01' is not this host's name "
        "'gpu-b1'")
    assert "/etc/cron.d/nodegate-health" not in typo.uploads
    right = run(agent, data=data, facts={"server.Hostname": "gpu-b01.hall-b"})
    assert any("nodegate gate --node gpu-b01" in t for t in right.uploads.values())
