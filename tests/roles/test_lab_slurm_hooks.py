"""Slurm's own hooks run nodegate on the lab's real slurmd: the slurm_node
role's Prolog/Epilog and HealthCheckProgram, enabled in the controller role's slurm.conf, on a
healthy node and a faulty one.

- A job on the healthy node runs: its prolog ran nodegate's quick check and passed.
- A job on the faulty node: the prolog's check fails, so Slurm drains the node with its own
  reason ("Prolog error") and the job does not run there.
- While another nodegate run holds the node's battery lock past the prolog's wait, a job on the
  healthy node still runs: the check is skipped (and said in syslog), not failed.
- The HealthCheckProgram wrapper, run as slurmd runs it, drains the faulty node with nodegate's
  reason and leaves the healthy one in service (NHC semantics: the program drains by itself).

Runs on NODEGATE_LAB_INSTANCE, on the lab-upgrade group's one lab (tests/roles/lab_group.py:
4 nodes, node3 and node4 healthy and unused here), reset to its baseline with this fault or
brought up when there is none. Its site file is put back as it was; a lab that stays up after
this file gets its slurm.conf without the hooks again.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Iterator

import pytest
import yaml

from tests.roles.lab_group import HEALTH_UNIT, group_lab, scheduled_command, stays_up
from tests.roles.test_lab_e2e import SITE, pyinfra
from tests.roles.test_lab_slurm import _wait_sinfo
from tests.roles.test_lab_upgrade import pytestmark, sh, slurm  # noqa: F401  (same skips)

HEALTHY, FAULTY = "node1", "node2"
FAULT = "ecc-dbe@gpu5"
LOCK_WAIT_S = 5


def _hooks(site: dict[str, object], on: bool) -> None:
    hosts = site["hosts"]
    assert isinstance(hosts, dict)
    data = hosts["slurmctl"].setdefault("data", {})
    data["slurm_controller_health_check"] = on
    data["slurm_controller_prolog_epilog"] = on
    defaults = site["defaults"]
    assert isinstance(defaults, dict)
    defaults.setdefault("data", {})["slurm_node_prolog_lock_wait"] = LOCK_WAIT_S


@pytest.fixture(scope="module")
def lab(request: pytest.FixtureRequest) -> Iterator[None]:
    with group_lab(request, {FAULTY: FAULT}):  # node3 and node4 stay healthy and idle
        original = SITE.read_text()
        try:
            site = yaml.safe_load(original)
            _hooks(site, True)
            SITE.write_text(yaml.safe_dump(site, sort_keys=False))
            # the agent (nodegate on the node) and the hooks; the deploy's own gate off:
            # Slurm's hooks are what is tested
            first = pyinfra("deploy.py", "--data", "gate_enabled=false", timeout=1200)
            assert first.returncode == 0, first.stdout[-4000:]
            yield
        finally:
            if SITE.exists():
                SITE.write_text(original)
                if stays_up(request):  # no reset follows: its slurm.conf without the hooks
                    pyinfra("deploy/slurm.py", timeout=600)


def _resume(*nodes: str) -> None:
    for node in nodes:
        sh("slurmctl", f"scontrol update NodeName={node} State=RESUME Reason= || true")
        assert _wait_sinfo(node, r"idle\|gpu:8\|none") == "idle|gpu:8|none"


def _job(node: str, timeout_s: float = 120.0) -> tuple[str, str]:
    """Submit ``hostname`` to ``node``, not requeued, and wait until it ends, or stays pending
    on a node Slurm drained: (the job's state, ``<node state>|<reason>`` then)."""
    job = sh("slurmctl", f"sbatch --parsable --no-requeue -w {node} -p gpu -o /dev/null "
                         "--wrap hostname")
    deadline = time.monotonic() + timeout_s
    line = ""
    try:
        while time.monotonic() < deadline:
            line = sh("slurmctl", f"scontrol show job -o {job}")
            found = re.search(r"\sJobState=(\S+)", line)
            state = found.group(1) if found else "?"
            token, reason = slurm(node)
            if state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING") or \
                    (state == "PENDING" and "DRAIN" in token):
                return state, f"{token}|{reason}"
            time.sleep(2)
    finally:
        sh("slurmctl", f"scancel {job} 2>/dev/null || true")
    raise AssertionError(f"job {job} on {node} did not end in {timeout_s:.0f}s: {line}")


def test_the_controller_points_slurm_at_the_nodes_hooks(lab: None) -> None:
    conf = sh("slurmctl", "cat /etc/slurm/slurm.conf").splitlines()
    assert "Prolog=/usr/local/sbin/nodegate-slurm-prolog" in conf, conf
    assert "Epilog=/usr/local/sbin/nodegate-slurm-epilog" in conf, conf
    assert "HealthCheckProgram=/usr/local/sbin/nodegate-slurm-healthcheck" in conf, conf
    prolog = sh(HEALTHY, "cat /usr/local/sbin/nodegate-slurm-prolog")
    assert f"--lock-wait {LOCK_WAIT_S} --skip-if-locked" in prolog, prolog


def test_a_job_on_the_healthy_node_runs_and_the_faulty_node_drains_on_its_prolog(
        lab: None) -> None:
    _resume(HEALTHY, FAULTY)
    state, node = _job(HEALTHY)
    assert state == "COMPLETED", (state, node)
    assert node.startswith(("IDLE|", "IDLE+")) and "DRAIN" not in node, node

    state, node = _job(FAULTY)
    assert state != "COMPLETED", (state, node)
    token, _, reason = node.partition("|")
    assert "DRAIN" in token and "Prolog error" in reason, node


def test_a_busy_battery_lock_skips_the_prolog_check_and_the_job_runs(lab: None) -> None:
    _resume(HEALTHY)
    # another nodegate run holds the lock for longer than the prolog waits
    # (-o: flock itself holds it, so killing flock releases it; -x: not the shell running
    # this command line, which names flock too)
    sh(HEALTHY, f"nohup flock -o /run/nodegate.lock sleep {LOCK_WAIT_S * 6} "
                ">/dev/null 2>&1 & sleep 1")
    try:
        state, node = _job(HEALTHY)
    finally:
        sh(HEALTHY, "pkill -x flock || true")
    assert state == "COMPLETED", (state, node)
    assert "DRAIN" not in node, node
    journal = sh(HEALTHY, "journalctl -t nodegate-slurm-prolog --no-pager -n 20 2>/dev/null "
                          "|| true")
    assert "skipped: another nodegate battery run holds" in journal, journal


def test_the_health_check_program_drains_the_faulty_node_with_nodegates_reason(
        lab: None) -> None:
    _resume(HEALTHY, FAULTY)
    wrapper = "/usr/local/sbin/nodegate-slurm-healthcheck"
    for node in (HEALTHY, FAULTY):  # as slurmd runs it: no arguments, its node in the env
        sh(node, f"SLURMD_NODENAME={node} {shlex.quote(wrapper)} >/dev/null 2>&1 || true")
    token, reason = slurm(FAULTY)
    assert "DRAIN" in token and reason.startswith("nodegate: ecc_dbe_volatile[gpu5]"), \
        (token, reason)
    token, reason = slurm(HEALTHY)
    assert "DRAIN" not in token and reason == "", (token, reason)


REPORTS = "/var/lib/nodegate/reports"
NODEGATE = "/opt/nodegate/venv/bin/nodegate"


def test_a_node_whose_host_name_is_not_its_slurm_name_is_drained_by_the_cron_gate(
        lab: None) -> None:
    """The faulty node's host name an FQDN (``node2.lab.example``), its Slurm name ``node2``:
    the agent's scheduled service (health with the Slurm name, then the gate) drains it; and a
    health run that names its report after the host name alone (as main's cron line did)
    is still judged as this node's by its machine id, where main said "no report for node"."""
    _resume(FAULTY)
    before = sh(FAULTY, "hostname").strip()
    sh(FAULTY, f"hostname {FAULTY}.lab.example")
    try:
        scheduled = scheduled_command(sh(FAULTY, f"cat {HEALTH_UNIT}"))
        assert f"--node-name {FAULTY}" in scheduled, scheduled
        sh(FAULTY, f"rm -f {REPORTS}/quick-latest.json; sh -c {shlex.quote(scheduled)} || true")
        token, reason = slurm(FAULTY)
        assert "DRAIN" in token and reason.startswith("nodegate: ") and "gpu5" in reason, \
            (token, reason)
        _resume(FAULTY)
        out = sh(FAULTY, f"{NODEGATE} health --quiet --color never --profile "
                         f"/etc/nodegate/profile.json --checks gpu --no-textfile >/dev/null "
                         f"2>&1; {NODEGATE} gate --node {FAULTY} 2>&1; echo rc=$?")
        assert "rc=0" in out and "by its machine id" in out, out
        token, reason = slurm(FAULTY)
        assert "DRAIN" in token and "gpu5" in reason, (token, reason, out)
    finally:
        sh(FAULTY, f"hostname {shlex.quote(before)}")


def test_a_sick_node_whose_report_disk_is_full_is_drained(lab: None) -> None:
    """A 2 MiB tmpfs mounted over the faulty node's report folder and filled: Slurm's
    HealthCheckProgram (gate --healthcheck) still drains it on the ECC fault; main's health
    exited 3 on the lock's pid write and the node stayed in service."""
    _resume(FAULTY)
    wrapper = "/usr/local/sbin/nodegate-slurm-healthcheck"
    sh(FAULTY, f"mount -t tmpfs -o size=2m tmpfs {REPORTS}")
    try:
        sh(FAULTY, f"dd if=/dev/zero of={REPORTS}/filler bs=64k >/dev/null 2>&1 || true; "
                   f"for i in $(seq 64); do head -c 4096 /dev/zero > {REPORTS}/c$i "
                   "2>/dev/null || break; done")
        out = sh(FAULTY, f"SLURMD_NODENAME={FAULTY} {shlex.quote(wrapper)} 2>&1; echo rc=$?")
        token, reason = slurm(FAULTY)
        assert "DRAIN" in token and "gpu5" in reason, (token, reason, out)
        assert "could not be written" in out, out
    finally:
        sh(FAULTY, f"umount {REPORTS} || umount -l {REPORTS} || true")
