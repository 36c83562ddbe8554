"""The drain budget on the lab's real Slurm (a fault on 3 of 4 lab nodes and a
budget of 50 %).

One lab of 4 nodes: node1..node3 carry a real board fault the quick gate fails on, node4 is
healthy. The site sets ``slurm.drain_budget: 0.5`` and the full deploy (its own gate off: the
test is the schedule) renders it into the agent's timer service. With every node in service,
each sick node runs its scheduled steps, exactly as the service runs them, one after another. slurmctld then shows two
nodes drained by nodegate and the third left in service, marked in its Comment, with the WARN
and the alert metric on that node; node4 untouched. An administrator's drain of node4 then
uses none of nodegate's budget: with node1 repaired and resumed, node3 drains at its next run.
Then holds have owners on the real Slurm: the administrator's drain survives the
node's own passing health run and a remediation step, a person's drain in nodegate's words
survives a failing one, and a person who drains a node while its gate is between its read and
its update (a slow ``scontrol`` on the node) keeps the drain.

Runs on NODEGATE_LAB_INSTANCE (set it: the default lab is someone else's), on the lab-upgrade
group's one lab (tests/roles/lab_group.py), reset to its baseline with these faults or brought
up when there is none (the site file's budget is put back as it was).
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Iterator

import pytest
import yaml

from tests.roles.lab_group import group_lab
from tests.roles.test_lab_e2e import SITE, pyinfra
from tests.roles.test_lab_slurm import _wait_sinfo
from tests.roles.test_lab_upgrade import pytestmark, sh  # noqa: F401  (same skips)

NODES = ("node1", "node2", "node3", "node4")
FAULTS = {"node1": "ecc-dbe@gpu2", "node2": "nvlink-down@gpu3.link5", "node3": "ecc-dbe@gpu5"}
SICK = tuple(FAULTS)
HEALTHY = "node4"
UNIT = "/etc/systemd/system/nodegate-health.service"
TEXTFILE = "/var/lib/node_exporter/textfile_collector/nodegate_gate.prom"
MARK = "nodegate: over drain budget: "
ADMIN = "bad fan, RMA 4711"


@pytest.fixture(scope="module")
def lab(request: pytest.FixtureRequest) -> Iterator[None]:
    with group_lab(request, FAULTS):
        original = SITE.read_text()
        try:
            site = yaml.safe_load(original)
            site["slurm"]["drain_budget"] = 0.5  # the operator's site file: 2 of 4 at most
            SITE.write_text(yaml.safe_dump(site, sort_keys=False))
            first = pyinfra("deploy.py", "--data", "gate_enabled=false", timeout=1200)
            assert first.returncode == 0, first.stdout[-4000:]
            yield
        finally:
            if SITE.exists():
                SITE.write_text(original)


def cron_run(node: str) -> str:
    """The node's scheduled run (the agent's timer service: health, then the gate), run as
    its ExecStart lines run, with the poller's EnvironmentFile, its output kept instead of
    the journal's; returns the output and the exit status line (the gate's, as before)."""
    from roles.ops.schedule import env_loader

    unit = sh(node, f"cat {UNIT}")
    steps = re.findall(r"^ExecStart=(.*)$", unit, re.M)
    gate = next(s for s in steps if "/opt/nodegate/venv/bin/nodegate gate" in s)
    assert f"--node {node} " in gate, gate
    assert "--drain-budget 0.5 --textfile-dir /var/lib/node_exporter/textfile_collector" in gate
    env = re.search(r"^EnvironmentFile=-(\S+)$", unit, re.M)
    command = env_loader(env.group(1) if env else None) + "; ".join(steps)
    return sh(node, f"sh -c {shlex.quote(command)} 2>&1; echo rc=$?")


def partition() -> dict[str, tuple[str, str, str]]:
    """node -> (state, reason, comment) of partition gpu, as an operator reads them."""
    out = sh("slurmctl", "sinfo -N -h -p gpu -O NodeList:'|',StateLong:'|',Comment:'|',Reason:0")
    rows = (line.split("|", 3) for line in out.splitlines() if line.strip())
    return {n.strip(): (s.strip(), r.strip(), c.strip()) for n, s, c, r in rows}


def textfile(node: str) -> str:
    return sh(node, f"cat {TEXTFILE}")


def test_three_faults_in_four_nodes_keep_two_in_service(lab: None) -> None:
    sh("slurmctl", "scontrol update NodeName=node[1-4] State=RESUME Reason= ; "
                   "scontrol update NodeName=node[1-4] Comment=")
    # a resumed node reads idle* (not responding) until slurmctld's ping answers
    assert {n: _wait_sinfo(n, r"idle\|gpu:8\|none") for n in NODES} == \
        dict.fromkeys(NODES, "idle|gpu:8|none")
    assert partition() == dict.fromkeys(NODES, ("idle", "none", "(null)"))

    runs = {node: cron_run(node) for node in SICK}  # one after another, as their crons fire
    for node, out in runs.items():
        assert out.endswith("rc=0"), (node, out)
    rows = partition()
    drained = {n: r for n, r in rows.items() if "drain" in r[0]}
    assert sorted(drained) == ["node1", "node2"], (rows, runs)
    assert all(r[1].startswith("nodegate: ") for r in drained.values()), rows
    state, reason, comment = rows["node3"]
    assert (state, reason) == ("idle", "none"), rows
    assert comment.startswith(MARK), rows
    assert rows[HEALTHY] == ("idle", "none", "(null)"), rows
    assert ("WARN node3: drain budget of partition gpu spent (2 of 4 nodes drained by "
            "nodegate, budget 50 % allows 2); left in service") in runs["node3"], runs["node3"]
    assert 'nodegate_gate_drain_budget_exceeded{node="node3",partition="gpu"} 1' \
        in textfile("node3")
    assert 'nodegate_gate_drain_budget_exceeded{node="node1",partition="gpu"} 0' \
        in textfile("node1")
    assert "WARN" not in runs["node1"] + runs["node2"], runs

    # the healthy node's own cron run leaves it in service, unmarked
    assert cron_run(HEALTHY).endswith("rc=0")
    assert partition()[HEALTHY] == ("idle", "none", "(null)")

    # an administrator's drain of node4 uses none of nodegate's budget: once node1 is
    # repaired and resumed, the still failing node3 drains at its next run, mark lifted
    sh("slurmctl", f"scontrol update NodeName={HEALTHY} State=DRAIN Reason={shlex.quote(ADMIN)}"
                   " && scontrol update NodeName=node1 State=RESUME")
    again = cron_run("node3")
    assert again.endswith("rc=0") and "WARN" not in again, again
    rows = partition()
    # drained with the reason its mark carried, the mark cleared
    assert rows["node3"] == ("drained", "nodegate: " + comment.removeprefix(MARK), "(null)"), rows
    assert "drain" in rows[HEALTHY][0] and rows[HEALTHY][1] == ADMIN, rows
    assert 'nodegate_gate_drain_budget_exceeded{node="node3",partition="gpu"} 0' \
        in textfile("node3")


GATE = "/opt/nodegate/venv/bin/nodegate"
SLOW = "/tmp/nodegate-slow-scontrol"


def test_holds_have_owners_on_the_real_slurm(lab: None) -> None:
    """Runs after the budget test: node2 and node3 drained by nodegate, node1 (still
    failing) resumed by an administrator, node4 drained by one (``ADMIN``)."""
    # the administrator's drain survives the node's own passing health run and gate ...
    healthy = cron_run(HEALTHY)
    assert healthy.endswith("rc=0"), healthy
    assert "drain" in partition()[HEALTHY][0] and partition()[HEALTHY][1] == ADMIN
    # ... and a remediation step (someone else's drain: exit 0, nothing touched)
    step = sh(HEALTHY, f"{GATE} remediate --enable --node {HEALTHY} 2>&1; echo rc=$?")
    assert step.endswith("rc=0") and "someone else" in step, step
    assert partition()[HEALTHY][1] == ADMIN

    # a person's drain in nodegate's own words is theirs: a failing run never rewrites it
    theirs = "nodegate: bad psu (alice)"
    sh("slurmctl", f"scontrol update NodeName=node1 State=DRAIN Reason={shlex.quote(theirs)}")
    failing = cron_run("node1")
    assert failing.endswith("rc=0") and "person" in failing, failing
    assert partition()["node1"][1] == theirs


def test_a_person_draining_between_the_gates_read_and_update_keeps_the_drain(
        lab: None) -> None:
    """Runs after the test above (node1 still failing, drained by a person)."""
    # a person drains node1 while its gate is between its read and its update: with room in
    # the budget (node3 resumed) the gate decides to drain. The "person" is a shim around
    # scontrol on node1: right after the gate's first read it drains node1 as a person would
    # (root may update any node). No waiting in the shim: the gate's reads have a 30 s
    # deadline and are asked again, so a shim that waits for the test can let the gate read
    # afresh and miss the race. The gate must leave the person's drain as it is (exit 3).
    sh("slurmctl", "scontrol update NodeName=node1,node3 State=RESUME")
    _wait_sinfo("node1", r"idle\|gpu:8\|none")
    carol = "bad fan (carol)"
    real = sh("node1", "command -v scontrol")
    shim = (f"#!/bin/sh\necho \"$*\" >> {SLOW}/calls\n{real} \"$@\"; rc=$?\n"
            f"if [ \"$1\" = show ] && [ ! -e {SLOW}/read ]; then touch {SLOW}/read; "
            f"{real} update NodeName=node1 State=DRAIN \"Reason={carol}\" "
            f">> {SLOW}/person 2>&1; fi\nexit $rc\n")
    sh("node1", f"rm -rf {SLOW} && mkdir -p {SLOW} && printf %s {shlex.quote(shim)} > "
                f"{SLOW}/scontrol && chmod 755 {SLOW}/scontrol")
    sh("node1", f"cd / && (PATH={SLOW}:$PATH setsid {GATE} gate --node node1 --drain-budget 0.5 "
                f"--json > {SLOW}/out 2>&1; echo $? > {SLOW}/rc) > /dev/null 2>&1 < /dev/null &")
    deadline = time.monotonic() + 60
    while sh("node1", f"cat {SLOW}/rc 2>/dev/null || true") == "":
        assert time.monotonic() < deadline + 60, "the gate did not finish"
        time.sleep(0.5)
    out = sh("node1", f"cat {SLOW}/out; echo; cat {SLOW}/calls {SLOW}/person")  # and the calls
    assert sh("node1", f"cat {SLOW}/rc") == "3", out
    assert "changed since the decision's read" in out, out
    assert partition()["node1"][1] == carol
    sh("node1", f"rm -rf {SLOW}")
