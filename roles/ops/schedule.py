"""The agent's schedule (the health check and gate every few minutes): which runner, and the
check that it is in effect before the deploy reports success.

Why: a cron entry written on a node without a cron daemon (a minimal image: ``dpkg -l cron``
says ``un``) never runs, and the deploy used to exit 0. So the runner is installed
and enabled by the role, and ``schedule_in_effect`` verifies on the node, at execution time,
that the runner's unit is enabled and active (a timer's service loads) and runs the scheduled
health check once, as the schedule runs it, failing the host with the reason otherwise; its
report in the report directory is the first run, visible.
"""

from __future__ import annotations

import shlex
from collections.abc import Generator, Sequence
from typing import Any

from pyinfra.api.command import StringCommand
from pyinfra.api.exceptions import DeployError
from pyinfra.api.operation import operation
from pyinfra.context import host

from nodegate.facts.schedule import ScheduleState, SystemdBooted
from roles.ops.common import TargetOS, knob

TIMER = "nodegate-health.timer"
SERVICE = "nodegate-health.service"
#: Written after the schedule's first run was seen: its runner's name (cron | systemd-timer).
STAMP = "/var/lib/nodegate/schedule-first-run"
KINDS = ("cron", "systemd-timer")
JOURNAL_LINES = 20


def schedule_kind() -> str:
    """``agent_schedule``, or when None: a systemd timer where systemd is the node's init
    (``SystemdBooted``), else cron."""
    kind = knob("agent_schedule")
    if kind is None:
        return "systemd-timer" if host.get_fact(SystemdBooted) else "cron"
    if kind not in KINDS:
        raise DeployError(f"{host.name}: agent_schedule {kind!r} must be cron or "
                          "systemd-timer (or unset: a timer where systemd runs)")
    return str(kind)


def cron_daemon(os_: TargetOS) -> tuple[str, str]:
    """(package, service) of the cron daemon: Debian/Ubuntu ``cron``, EL ``cronie``/``crond``."""
    return ("cron", "cron") if os_.is_debian else ("cronie", "crond")


def env_loader(env_file: str | None) -> str:
    """The shell that exports the poller's NAME=value lines when the file is there (taken
    literally, nothing expanded or echoed): what the cron entry runs first."""
    if not env_file:
        return ""
    return (f'if [ -r {env_file} ]; then while IFS= read -r l; do case "$l" in '
            f'[A-Za-z_]*=*) export "$l";; esac; done < {env_file}; fi; ')


def cron_body(command: str, gate: str | None, remediate: str | None,
              env_file: str | None) -> str:
    """What the cron entry runs (templates/agent/nodegate-health.cron.j2 writes it after the
    time fields): the health check, then the gate and remediation where they are scheduled."""
    steps = [command, *(s for s in (gate, remediate) if s)]
    if not env_file and len(steps) == 1:
        return command
    return "{ " + env_loader(env_file) + "".join(f"{s}; " for s in steps) + "}"


def first_run_steps(steps: Sequence[tuple[str, str]], env_file: str | None,
                    timeout_s: int) -> str:
    """Run the scheduled ``(label, command line)`` steps once, as the schedule would (its
    environment file loaded), each bounded by ``timeout_s``: exit 0 or 1 (a verdict) is a
    run; anything else fails with the step's own last output lines on stderr (they reach the
    deploy output and the host's failure). The agent runs the health check alone: the gate
    needs the node in Slurm, which the roles after it and the deploy's own join take care of;
    the schedule runs the gate from its next tick."""
    out = ['out=$(mktemp) || exit 1', env_loader(env_file).rstrip().rstrip(";")]
    for label, line in steps:
        why = f"nodegate: the scheduled {label} failed its first run"
        out.append(f"timeout {int(timeout_s)} sh -c {shlex.quote(line)} >\"$out\" 2>&1; s=$?; "
                   f"if [ $s -gt 1 ]; then echo {shlex.quote(why)}\" (exit $s); its last "
                   f"{JOURNAL_LINES} lines:\" >&2; tail -n {JOURNAL_LINES} \"$out\" >&2; "
                   'rm -f "$out"; exit 1; fi')
    out.append('rm -f "$out"')
    return "; ".join(part for part in out if part)


def verify_script(kind: str, unit: str, first_run: str) -> str:
    """The check run on the node: ``unit`` (the timer, or the cron daemon's service) enabled
    and active (a node without systemd: a cron process; a timer: its service loads too),
    then the first run, then the stamp."""
    fail = 'nodegate_fail() { echo "nodegate: $*" >&2; exit 1; }'
    what = "the timer" if kind == "systemd-timer" else "the cron daemon"
    systemd = (f"systemctl is-enabled --quiet {unit} || nodegate_fail '{unit} ({what} of the "
               f"health schedule) is not enabled: the schedule would not survive a reboot'; "
               f"systemctl is-active --quiet {unit} || nodegate_fail '{unit} ({what} of the "
               f"health schedule) is not active: the health check never runs'")
    no_systemd = ("pgrep -x cron >/dev/null || pgrep -x crond >/dev/null || nodegate_fail "
                  "'no cron daemon runs: the health schedule never runs'")
    loads = (f"[ \"$(systemctl show -p LoadState --value {SERVICE})\" = loaded ] || "
             f"nodegate_fail '{SERVICE} does not load: '\"$(systemctl show -p LoadError --value "
             f"{SERVICE})\"")
    check = (f"if [ -d /run/systemd/system ]; then {systemd}; else {no_systemd}; fi"
             if kind == "cron" else f"{systemd}; {loads}")
    stamp = f"mkdir -p {STAMP.rsplit('/', 1)[0]} && echo {kind} > {STAMP}"
    return f"{fail}; {check}; {first_run}; {stamp}"


@operation()
def schedule_in_effect(kind: str, unit: str, first_run: str) -> Generator[Any, None, None]:
    """Fail the host unless the schedule's ``unit`` is enabled and active and its first run
    was seen (run here once when it was not). A node where all three already hold (a
    rerun) changes nothing."""
    state = host.get_fact(ScheduleState, units=[unit], stamp=STAMP)
    if state.get(unit) == "enabled active" and state.get("stamp") == kind:
        host.noop(f"{unit} enabled and active; the schedule's first run was seen")
        return
    yield StringCommand(verify_script(kind, unit, first_run))


__all__ = ["KINDS", "SERVICE", "STAMP", "TIMER", "cron_body", "cron_daemon", "first_run_steps",
           "schedule_in_effect", "schedule_kind", "verify_script"]
