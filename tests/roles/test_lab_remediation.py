"""Remediation end to end on the lab: real Slurm, a real job, the BMC emulator's power cycle
really restarting the lab host, and a fault that no reset cures.

One lab of 4 nodes (the lab-upgrade group's, tests/roles/lab_group.py), reset to its baseline
with two faults: node1's GPU 3 fell off the bus (``xid79``: lives only while the board is
powered, so the power cycle clears it), node2's GPU 5 ran out of spare rows
(``remap-failure``: kept by the card through every reset). The tests drive the node's own
steps as its timer would (health, gate, ``nodegate remediate``; the lab's nodes run no cron
daemon, so no scheduled run lands between the steps); nobody else touches a node:

1. node1, running a job when its fault is found: drained by the gate (DRAINING), the
   remediation waits while the job runs, power-cycles the node through its BMC (Redfish
   ``ComputerSystem.Reset`` to the lab's emulator, which restarts the host cold), then
   re-qualifies at the standard level and resumes it;
2. node2: the remediation ends in RMA with the vendor's bundle written (its manifest read
   back) and the node stays drained ``nodegate: RMA gpu5 serial ...``.

Runs on NODEGATE_LAB_INSTANCE (set it: the default lab is someone else's).
"""

from __future__ import annotations

import json
import re
import shlex
import time
from collections.abc import Iterator

import pytest
import yaml

from nodegate.cluster.slurm import parse_show_node
from nodegate_lab import config as lab_config
from tests.roles.lab_group import group_lab, lab_command
from tests.roles.test_lab_e2e import SITE, pyinfra
from tests.roles.test_lab_upgrade import pytestmark, sh  # noqa: F401  (same skips)

FAULTS = {"node1": "xid79@gpu3", "node2": "remap-failure@gpu5"}
NODEGATE = "/opt/nodegate/venv/bin/nodegate"
ENV_FILE = "/etc/nodegate/power-poller.env"  # the power poller's credentials (0600)
STATE = "/var/lib/nodegate/remediation/remediation.json"
#: the standard level's load phases shrunk: 8 simulated GPUs on 2 loaded cores
SCALE = "0.05"
PROFILE_NAME = "sim-h100-hgx"  # the lab nodes' profile (tests/roles/lab_group.py)
JOB_S = 25  # long enough to be seen running through the gate's drain and one remediate step


def throughput_floors_lowered(factor: float = 0.02) -> dict[str, dict[str, object]]:
    """Every TFLOPS and GB/s floor of the lab's profile at ``factor`` of itself; the other
    thresholds (counts, states, errors) stay as they are."""
    from nodegate.profiles import resolve_profile

    thresholds = resolve_profile(PROFILE_NAME).data["thresholds"]
    return {key: {"min": value["min"] * factor, "unit": value["unit"],
                  "source": "policy: lab test, 8 CPU ranks on a loaded 2-core machine "
                            f"({factor:g} x the profile's floor)"}
            for key, value in thresholds.items()
            if isinstance(value, dict) and value.get("unit") in ("TFLOPS", "GB/s")
            and isinstance(value.get("min"), (int, float))}


@pytest.fixture(scope="module")
def lab(request: pytest.FixtureRequest) -> Iterator[None]:
    with group_lab(request, FAULTS):
        original = SITE.read_text()
        try:
            site = yaml.safe_load(original)
            node1 = site["hosts"]["node1"]
            # the site's opt-in for this node (deploy/remediate.py reads it)
            node1.setdefault("data", {})["remediate_enabled"] = True
            # sim-h100-hgx's throughput floors were measured on a quieter CI machine; 8 CPU
            # ranks on 2 cores shared with two other labs and three VMs measured below them
            # (p2p 0.1-1.0 GB/s, bf16 GEMM 0.0026 TFLOPS in clean-clone runs 10 and 11): this
            # run judges the remediation, not the lab machine's load
            node1["profile_overrides"] = {"thresholds": throughput_floors_lowered()}
            SITE.write_text(yaml.safe_dump(site, sort_keys=False))
            # where remediation is on, the agent carries torch (the re-qualification is the
            # standard level, whose load the baseline's quick-only gate never needed) and
            # the profile above
            agent = pyinfra("roles/agent.py", "--limit", "node1", timeout=900)
            assert agent.returncode == 0, agent.stdout[-4000:]
            assert "nodegate[power,torch]" in agent.stdout, agent.stdout[-4000:]
            yield
        finally:
            if SITE.exists():
                SITE.write_text(original)


def with_env(command: str) -> str:
    """``command`` with the poller's credentials loaded as the node's cron entry loads them
    (NAME=value lines, taken literally: nothing expanded or echoed)."""
    return (f"{{ if [ -r {ENV_FILE} ]; then while IFS= read -r l; do case \"$l\" in "
            f"[A-Za-z_]*=*) export \"$l\";; esac; done < {ENV_FILE}; fi; {command}; }}")


def remediate(node: str, *extra: str) -> tuple[int | None, str]:
    """One ``nodegate remediate`` step on ``node``: (exit status, output). None: the
    connection went with the node (its own power cycle)."""
    command = with_env(f"{NODEGATE} remediate --node {node} --enable "
                       f"--duration-scale {SCALE} {' '.join(extra)}")
    done = lab_command("shell", node, "--", f"sh -c {shlex.quote(command)} 2>&1; "
                       "echo rc=$?", timeout=900)
    match = re.search(r"rc=(\d+)\s*$", done.stdout)
    return (int(match.group(1)) if match else None), done.stdout + done.stderr


def health_and_gate(node: str) -> str:
    """The quick health check, then ``nodegate gate`` (the scheduled pair)."""
    command = with_env(f"{NODEGATE} health --quiet --color never --profile "
                       f"/etc/nodegate/profile.json; {NODEGATE} gate --node {node}")
    return sh(node, f"sh -c {shlex.quote(command)} 2>&1; echo rc=$?")


def slurm(node: str) -> tuple[str, str]:
    """(state token, reason) of ``node`` as the controller sees it."""
    line = sh("slurmctl", f"scontrol show node -o {node}")
    state = re.search(r"\sState=(\S+)", line)
    return (state.group(1) if state else "?", parse_show_node(line).reason or "")


def wait_for(what: str, predicate: object, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s:.0f}s"
        time.sleep(1)


def resume(node: str) -> None:
    sh("slurmctl", f"scontrol update NodeName={node} State=RESUME Reason= || true")
    wait_for(f"{node} idle", lambda: slurm(node)[0] == "IDLE", 90)


def boots(node: str) -> int:
    return int((lab_config.lab_dir() / "hosts" / node / "boots").read_text())


def phase(node: str) -> str:
    return str(json.loads(sh(node, f"cat {STATE}"))["phase"])


def test_a_transient_fault_under_a_job_is_power_cycled_and_back_in_service(lab: None) -> None:
    node = "node1"
    resume(node)
    job = sh("slurmctl", f"sbatch --parsable --no-requeue -w {node} -p gpu -o /dev/null "
                         f"--wrap 'sleep {JOB_S}'")
    wait_for("the job runs", lambda: "JobState=RUNNING" in sh(
        "slurmctl", f"scontrol show job -o {job}"), 60)

    gate = health_and_gate(node)
    token, reason = slurm(node)
    assert "DRAIN" in token and reason.startswith("nodegate: "), (token, reason, gate)
    assert "gpu_reachable" in reason or "xid" in reason, reason

    # the job still runs: nothing is done, whatever the evidence calls for
    before = boots(node)
    code, out = remediate(node)
    assert code == 0 and "waiting_for_jobs" in out and "jobs still run" in out, out
    assert boots(node) == before and phase(node) == "waiting_for_jobs"

    wait_for("the job ends", lambda: sh("slurmctl", f"squeue -h -j {job} -o %T 2>/dev/null "
                                        "|| true") == "", JOB_S + 60)
    wait_for(f"{node} drained and idle", lambda: slurm(node)[0] in ("IDLE+DRAIN",
                                                                     "DRAINED"), 60)
    dry_code, dry = remediate(node, "--dry-run")
    assert dry_code == 0 and "would power_cycle" in dry, dry
    assert boots(node) == before

    # the power cycle: its intent on disk, then the node's BMC restarts the host cold
    code, out = remediate(node)
    assert code in (0, None), out
    wait_for(f"{node} booted again", lambda: boots(node) > before, 120)
    wait_for(f"{node} answers", lambda: lab_command("shell", node, "--", "true",
                                                    timeout=30).returncode == 0, 120)
    bmc_log = (lab_config.lab_dir() / "services" / f"bmc-{node}.log").read_text()
    assert "ComputerSystem.Reset PowerCycle" in bmc_log, bmc_log[-2000:]
    assert (lab_config.lab_dir() / "hosts" / node / "spec").read_text().strip() == "h100-hgx"
    state = json.loads(sh(node, f"cat {STATE}"))
    assert state["phase"] == "remediating" and state["action"]["action"] == "power_cycle"
    assert state["action"]["outcome"] is None  # recorded before, settled by the next run
    assert boots(node) == before + 1  # one power cycle, never two

    wait_for("slurmd back", lambda: lab_command("shell", node, "--", "systemctl is-active "
                                                "--quiet slurmd", timeout=30).returncode == 0,
             90)
    wait_for(f"{node} registered", lambda: "NOT_RESPONDING" not in slurm(node)[0]
             and "*" not in sh("slurmctl", f"sinfo -h -N -n {node} -o %T"), 120)
    # the power cycle cleared the symptom: the scheduled quick check passes, and the standard
    # hold put before the action keeps the node out until the standard run
    held = slurm(node)
    assert held[1].startswith("nodegate: standard re-qualification after power_cycle "), held
    gate = health_and_gate(node)
    assert slurm(node) == held, (slurm(node), gate)
    # the control side's entry point takes the step after the boot: settle, re-qualify, resume
    run = pyinfra("deploy/remediate.py", "--limit", node, "--data",
                  f"remediate_duration_scale={SCALE}", timeout=900)
    failing = [line for line in run.stdout.splitlines() if " FAIL " in line
               or " ERROR " in line]  # the re-qualification's own failures first
    assert run.returncode == 0, "\n".join(failing[:20]) + "\n" + run.stdout[-3000:]
    state = json.loads(sh(node, f"cat {STATE}"))
    assert state["phase"] == "in_service"
    assert [(a["action"], a["outcome"]) for a in state["history"]] == [("power_cycle", "done")]
    assert "new boot" in state["history"][0]["detail"]
    assert slurm(node)[0] == "IDLE", slurm(node)
    assert boots(node) == before + 1
    standard = json.loads(sh(node, "cat /var/lib/nodegate/reports/standard-latest.json"))
    # a passing verdict (PASS, or WARN: the load's outlier notes on a loaded machine)
    assert standard["level"] == "standard" and standard["verdict"] in ("PASS", "WARN"), \
        standard["counts"]
    assert standard["counts"]["FAIL"] == 0 and standard["counts"]["ERROR"] == 0
    assert standard["boot_id"] == state["history"][0]["detail"].removeprefix("new boot ")


def test_a_persistent_fault_ends_in_rma_with_its_bundle(lab: None) -> None:
    node = "node2"
    resume(node)
    gate = health_and_gate(node)
    token, reason = slurm(node)
    assert "DRAIN" in token and reason.startswith("nodegate: "), (token, reason, gate)
    before = boots(node)

    code, out = remediate(node)
    assert code == 1, out
    token, reason = slurm(node)
    assert "DRAIN" in token and re.match(r"nodegate: RMA gpu5 serial \S+", reason), \
        (token, reason, out)
    bundle = re.search(r"bundle (\S+\.tar\.gz)", out)
    assert bundle, out
    listing = sh(node, f"tar -tzf {bundle.group(1)}").split()
    assert any(n.endswith("manifest.json") for n in listing), listing
    name = next(n for n in listing if n.endswith("manifest.json"))
    manifest = json.loads(sh(node, f"tar -xzOf {bundle.group(1)} {name}"))
    assert manifest["node"] == node and manifest["reason"] == reason
    gpus = {g["entity"]: g for g in manifest["gpus"]}
    assert len(gpus) == 8 and gpus["gpu5"]["serial"] in reason
    assert any(r["check"] == "remap_failure" and r["entity"] == "gpu5"
               for r in manifest["failing_results"]), manifest["failing_results"]
    assert manifest["driver_version"] and gpus["gpu5"]["uuid"]
    assert manifest["bmc"] is None or "password" not in json.dumps(manifest["bmc"]).lower()
    assert manifest["bmc"] is not None  # its identity, or why it could not be read
    secret = sh(node, f"sed -n 's/^NODEGATE_LAB_BMC_PASSWORD=//p' {ENV_FILE}")
    assert secret and secret not in json.dumps(manifest) and secret not in out

    # never acted on, and it stays drained: the next run says so and changes nothing
    again_code, again = remediate(node)
    assert again_code == 1 and "stays drained until a person resumes it" in again, again
    assert slurm(node) == (token, reason) and boots(node) == before
    assert phase(node) == "rma"
