"""The sweep and the cluster check on the lab's real slurmctld/slurmd (4 nodes).

The lab-upgrade group's one lab (tests/roles/lab_group.py), every board healthy, deployed once
more with torch in the agent's venv (the extra a standard-level gate brings) and every node
resumed. Slurm's client commands reach slurmctld from every node (configless), so the
controller-side commands run on node4 with the nodegate the agent installed there: this
checkout's code (the lab's wheel).

- The sweep: a user's job holds node2 first. A dry run one job at a time plans one node; a
  sweep of 3 at once within a 50 % drain budget submits node1 and node3 only (node4 waits for
  the budget, node2 for its user); those jobs run on their nodes, one each. Then node3's board
  gets an uncorrectable ECC error (written live into its simulated board, as a GPU fails
  between sweeps) and the next sweep, the period passed, drains node3 with the gate's reason;
  node2's user job runs on untouched and no sweep job ever ran there.
- The pair matrix: every node's floors set for the test (``PAIR_FLOOR_GBPS``: the lab's
  throughput under the suite's load is not what is judged) and node3's all_reduce floor past
  anything a lab link reaches. ``nodegate cluster-check`` runs the 6 pairs in 3 rounds of 2 as
  ``srun`` jobs and names node3 and no other, drains it with a reason naming its pairs, and
  every node keeps its pairs in ``cluster-check-latest.json``. Then ``--plan bisection`` with
  a real fault of the network instead: node3's link slowed to ``SLOW_LINK_MBIT`` both ways
  (a token bucket on each end of its veth, ``nodegate_lab.net.limit_rate``); 2 rounds of 2
  pairs, node3's pairs measure less than the others and fail, node3 is named and no other.

The sweep jobs run the quick level, then the gate (``--command``): the standard level's load
on 8 simulated GPUs per node takes minutes on two cores; what is tested is the sweep's choice
and Slurm's running of it, which is the same for any command.
"""

from __future__ import annotations

import json
import re
import shlex
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nodegate_lab import config as lab_config
from nodegate_lab import net as lab_net
from tests.conftest import run_cli
from tests.roles.lab_group import SCENARIO, group_lab, lab_command
from tests.roles.test_lab_e2e import pyinfra
from tests.roles.test_lab_upgrade import pytestmark, sh  # noqa: F401  (same skips)

NODES = ("node1", "node2", "node3", "node4")
#: Where the controller-side commands run (any node's Slurm clients reach slurmctld).
CONTROL = "node4"
NG = "/opt/nodegate/venv/bin/nodegate"
FAULT = "ecc-dbe@gpu5"
#: Written where screenshots are taken from (docs/sweeps.md); any run leaves its own copy.
#: node3's link in the bisection test: 25 MB/s each way, a tenth of what a lab pair's
#: all_reduce reaches at 4 MiB on a quiet machine (0.25-0.39 GB/s)
SLOW_LINK_MBIT = 200
#: Every node's all_reduce floor while the pair tests run: 1.5 x the slowed link's most
#: (0.025 GB/s and its bucket's burst), and under the 0.067 GB/s a good pair measured with
#: the whole suite on the 2 cores (clean-clone run 16, where the lab profile's floor, then
#: 0.075, failed node1-node2; it is 0.02 since, under the slowed link's figure). The tests
#: judge which node the pairs name, not the machine's throughput; the other collectives'
#: floors go to a tenth for the same reason.
PAIR_FLOOR_GBPS = 0.04
PROFILE = "/etc/nodegate/profile.json"
HTML_COPY = Path("/tmp/nodegate-sweeplab-cluster-check.html")
#: The fleet page of the nodes' reports after the cluster check (docs/img/fleet-page-lab.png).
FLEET_COPY = Path("/tmp/nodegate-sweeplab-fleet.html")


def long_sh(node: str, command: str, timeout: int = 900) -> tuple[int, str]:
    """(exit status, stdout) of a command that may take minutes (``sh`` stops at 120 s)."""
    result = lab_command("shell", node, "--", f"{command}; echo rc=$?", timeout=timeout)
    assert result.returncode == 0, (node, command, result.stdout, result.stderr)
    out, _, rc = result.stdout.strip().rpartition("rc=")
    return int(rc), out


def states() -> dict[str, tuple[str, str]]:
    """node -> (state, reason) of partition gpu."""
    out = sh("slurmctl", "sinfo -N -h -p gpu -O NodeList:'|',StateLong:'|',Reason:0")
    rows = (line.split("|", 2) for line in out.splitlines() if line.strip())
    return {n.strip(): (s.strip(), r.strip()) for n, s, r in rows}


def wait_for(what: str, check: Callable[[], bool], timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(2)
    raise AssertionError(f"timed out waiting for {what}: {states()}")


def sweep_jobs() -> list[str]:
    return [line for line in sh(CONTROL, "squeue -h -o '%i|%j|%T|%N'").splitlines()
            if "|nodegate-sweep." in line]


def job_node(job: str) -> str:
    line = sh("slurmctl", f"scontrol show job -o {job}")
    match = re.search(r"\sNodeList=(\S+)", line)
    assert match, line
    return match.group(1)


def job_output(node: str, job: str) -> str:
    """What a sweep job printed (its ``--output`` file on its node)."""
    return sh(node, f"cat /var/lib/nodegate/nodegate-sweep.{node}-{job}.out")


def set_board(node: str, spec: str) -> None:
    """Rewrite ``node``'s simulated board in place (the NVML library reads it at each
    process's start), as a GPU that fails while the node runs."""
    from nodegate.sim.runtime import prepare

    prepare(spec, lab_config.lab_dir() / "hosts" / node / "board")


@pytest.fixture(scope="module")
def lab(request: pytest.FixtureRequest) -> Iterator[None]:
    with group_lab(request, {}):
        deploy = pyinfra("deploy.py", "--data", "gate_enabled=false",
                         "--data", 'agent_extras=["power","torch"]', timeout=1800)
        assert deploy.returncode == 0, deploy.stdout[-4000:]
        assert "cluster-check" in sh(CONTROL, f"{NG} --help")  # this checkout's nodegate
        sh("slurmctl", "scontrol update NodeName=node[1-4] State=RESUME Reason= ; true")
        wait_for("every node idle", lambda: all(s == "idle" for s, _ in states().values()))
        try:
            yield
        finally:
            set_board("node3", SCENARIO)
            sh("slurmctl", "scancel -u root; scontrol update NodeName=node[1-4] State=RESUME"
                           " Reason= ; true")


def sweep(*options: str) -> dict[str, object]:
    from nodegate.cluster.sweep import LOAD_POWER_ENV

    # the default command's, at the quick level (the power group's credentials loaded first)
    command = f"{LOAD_POWER_ENV}{NG} validate --level quick --quiet; {NG} gate --mode health"
    rc, out = long_sh(CONTROL, f"{NG} sweep --partition gpu --period 20s --json "
                               f"--output-dir /var/lib/nodegate --command "
                               f"{shlex.quote(command)} {' '.join(options)}", timeout=180)
    assert rc == 0, out
    data: dict[str, object] = json.loads(out[out.index("{"):])
    return data


def test_sweep_takes_idle_due_nodes_within_its_limits_and_drains_a_new_fault(
        lab: None) -> None:
    user = sh(CONTROL, "sbatch --parsable -J user-job -w node2 --exclusive -p gpu "
                       "--wrap 'sleep 3000'").split(";")[0]
    wait_for("the user's job on node2", lambda: states()["node2"][0] == "allocated")

    dry = sweep("--max-concurrent 1", "--dry-run")
    assert dry["planned"] == ["node1"] and dry["submitted"] == {}, dry
    skipped = dry["skipped"]
    assert isinstance(skipped, dict)
    assert skipped["node2"].startswith("busy: ALLOCATED"), skipped
    assert skipped["node3"].startswith("concurrency: 1 sweep job(s) at once"), skipped

    first = sweep("--max-concurrent 3", "--drain-budget 0.5")
    submitted = first["submitted"]
    assert isinstance(submitted, dict) and sorted(submitted) == ["node1", "node3"], first
    skipped = first["skipped"]
    assert isinstance(skipped, dict) and skipped["node4"].startswith("drain budget: 2 of 4"), \
        first
    assert skipped["node2"].startswith("busy"), first
    submitted_at = time.monotonic()
    wait_for("the first sweep's jobs", lambda: not sweep_jobs())
    assert {node: job_node(job) for node, job in submitted.items()} == \
        {node: node for node in submitted}
    assert states() == {"node1": ("idle", "none"), "node2": ("allocated", "none"),
                        "node3": ("idle", "none"), "node4": ("idle", "none")}
    for node, job in submitted.items():  # each job judged its node and passed
        out = job_output(node, job)
        assert re.search(r"nodegate validate: PASS +report /var/lib/nodegate/reports/", out), out

    set_board("node3", f"{SCENARIO}+{FAULT}")  # between two sweeps: a GPU fails
    time.sleep(max(0.0, 21 - (time.monotonic() - submitted_at)))  # the period passes
    second = sweep("--max-concurrent 3", "--drain-budget 0.75")
    again = second["submitted"]
    assert isinstance(again, dict) and sorted(again) == ["node1", "node3", "node4"], second
    wait_for("the second sweep's jobs", lambda: not sweep_jobs())
    assert {node: job_node(job) for node, job in again.items()} == {n: n for n in again}
    rows = states()
    out = job_output("node3", again["node3"])
    assert "drain" in rows["node3"][0] and rows["node3"][1].startswith("nodegate: "), (rows, out)
    assert rows["node3"][1].startswith("nodegate: ecc_dbe_volatile[gpu5]"), rows
    assert rows["node1"] == ("idle", "none") and rows["node4"] == ("idle", "none"), rows
    assert rows["node2"] == ("allocated", "none"), rows
    assert "nodegate validate: FAIL" in out and "drain" in out, out
    # the user's job ran on, and no sweep job ever ran beside it
    assert f"{user}|user-job|RUNNING|node2" in sh(CONTROL, "squeue -h -o '%i|%j|%T|%N'")
    assert sh("node2", "ls /var/lib/nodegate | grep -c nodegate-sweep || true") == "0"
    sh("slurmctl", f"scancel {user}")
    set_board("node3", SCENARIO)
    sh("slurmctl", "scontrol update NodeName=node3 State=RESUME")


def cluster_check_with_node3_at_fault(*options: str, slow_link: bool) -> tuple[int, str]:
    """``nodegate cluster-check OPTIONS`` on the controller side, every node's floors as
    ``PAIR_FLOOR_GBPS`` says and node3 at fault for the run's duration: ``slow_link``, its
    link at ``SLOW_LINK_MBIT`` both ways (``nodegate_lab.net.limit_rate``: what a NIC
    trained down or a bad cable does); else its all_reduce floor past anything a lab link
    reaches (a slow link costs the run time on the 2 cores: each of node3's pairs takes
    longer). The caller resumes the node the run drains, after its checks."""
    wait_for("every node idle", lambda: all(s == "idle" for s, _ in states().values()))
    for name in NODES:
        floor = 1000.0 if name == "node3" and not slow_link else PAIR_FLOOR_GBPS
        edit = ("import json; p = '/etc/nodegate/profile.json'; d = json.load(open(p)); "
                "t = d.setdefault('thresholds', {}); "
                "[t[k].update(min=t[k]['min'] / 10) for k in t if k.startswith('multinode_') "
                "and k.endswith('_busbw_gbps_min')]; "
                f"t['multinode_allreduce_busbw_gbps_min'] = {{'min': {floor}, "
                "'unit': 'GB/s', 'source': 'policy: lab pair-matrix test'}; "
                "json.dump(d, open(p, 'w'), indent=1)")
        sh(name, f"cp {PROFILE} {PROFILE}.orig && /opt/nodegate/venv/bin/python -c "
           + shlex.quote(edit))
    node3 = lab_config.node(3)
    if slow_link:
        lab_net.limit_rate(node3, SLOW_LINK_MBIT)
    try:
        return long_sh(CONTROL, f"{NG} cluster-check --partition gpu --ranks-per-node 1 "
                                "--timeout 420 --join-timeout 180 --json "
                                f"{' '.join(options)}", timeout=1800)
    finally:
        if slow_link:
            lab_net.limit_rate(node3, None)
        for name in NODES:
            sh(name, f"mv -f {PROFILE}.orig {PROFILE}")


def test_the_pair_matrix_names_the_one_slow_node_and_no_other(lab: None,
                                                             tmp_path: Path) -> None:
    rc, out = cluster_check_with_node3_at_fault("--out /var/lib/nodegate/cluster-check",
                                                slow_link=False)
    try:
        assert rc == 1, out
        report = json.loads(out[out.index("{"):])
        assert report["nodes"] == list(NODES) and len(report["rounds"]) == 3
        pairs = {(p["a"], p["b"]): p for p in report["pairs"] if p["rail"] is None}
        assert len(pairs) == 6, report["pairs"]
        for (a, b), pair in pairs.items():
            assert pair["verdict"] == ("FAIL" if "node3" in (a, b) else "PASS"), pair
            assert pair["busbw_gbps"] > 0, pair
        loc = report["localisation"]["collectives"]
        assert loc["nodes"] == ["node3"] and loc["pairs"] == [] and loc["undetermined"] is None
        reason = "nodegate: cluster-check: failed with node1, node2, node4; passed with none"
        assert report["named"] == {"node3": reason}
        rows = states()
        assert "drain" in rows["node3"][0] and rows["node3"][1] == reason, rows
        assert all(rows[n] == ("idle", "none") for n in NODES if n != "node3"), rows
        for name in NODES:
            kept = json.loads(sh(name, "cat /var/lib/nodegate/reports/cluster-check-latest.json"))
            assert kept["node"] == name and kept["labels"]["suite"] == "cluster-check"
            verdicts = {(r["check"], r["entity"]): r["verdict"] for r in kept["results"]}
            assert verdicts[("cluster_check_localisation", "node")] == \
                ("FAIL" if name == "node3" else "PASS"), verdicts
            assert len([k for k in verdicts if k[0] == "cluster_pair_busbw"]) == 3, verdicts
        page = sh(CONTROL, "cat /var/lib/nodegate/cluster-check/cluster-check.html")
        assert "Named by the localisation: node3" in page and page.count("<svg") == 1
        HTML_COPY.write_text(page)
        # the fleet page reads the pairs back from the nodes' own reports, as an operator's
        # fetch_reports copy holds them, and names the same node
        for name in NODES:
            folder = tmp_path / "reports" / name
            folder.mkdir(parents=True)
            for file in sh(name, "cd /var/lib/nodegate/reports && ls *-latest.json").split():
                (folder / file).write_text(sh(name, f"cat /var/lib/nodegate/reports/{file}"))
        fleet = run_cli("report", str(tmp_path / "reports"), "--html", str(FLEET_COPY))
        assert fleet.returncode in (0, 1), fleet.stderr  # 1: a node's report failed
        html = FLEET_COPY.read_text()
        assert 'id="pairs"' in html, fleet.stdout[-2000:]
        pairs_part = html[html.index('id="pairs"'):]
        assert "Named by the localisation: node3" in pairs_part, pairs_part[:2000]
    finally:
        sh("slurmctl", "scontrol update NodeName=node3 State=RESUME")


def test_bisection_names_the_slow_node_in_two_rounds_of_two_pairs(lab: None) -> None:
    """``--plan bisection`` on Slurm: node i meets node i XOR 2^k, log2(4) = 2 rounds, 4 of
    the 6 pairs; node3, its link slowed, failed with both its partners, each of which passed
    with another."""
    rc, out = cluster_check_with_node3_at_fault(
        "--plan bisection --out /var/lib/nodegate/cluster-check-bisection", slow_link=True)
    try:
        assert rc == 1, out
        report = json.loads(out[out.index("{"):])
        assert [sorted(tuple(p) for p in round_) for round_ in report["rounds"]] == \
            [[("node1", "node2"), ("node3", "node4")],
             [("node1", "node3"), ("node2", "node4")]], report["rounds"]
        pairs = {(p["a"], p["b"]): p for p in report["pairs"] if p["rail"] is None}
        verdicts = {key: pair["verdict"] for key, pair in pairs.items()}
        assert verdicts == {("node1", "node2"): "PASS", ("node3", "node4"): "FAIL",
                            ("node1", "node3"): "FAIL", ("node2", "node4"): "PASS"}, verdicts
        # the slow link in the figures, not only in the verdicts: node3's pairs are the low
        # ones, at most the shaped rate in GB/s (and the burst its bucket lets through)
        slow = [p["busbw_gbps"] for key, p in pairs.items() if "node3" in key]
        fast = [p["busbw_gbps"] for key, p in pairs.items() if "node3" not in key]
        assert max(slow) < min(fast) and max(slow) <= 1.1 * SLOW_LINK_MBIT / 8000, (slow, fast)
        loc = report["localisation"]["collectives"]
        assert loc["nodes"] == ["node3"] and loc["undetermined"] is None, loc
        reason = "nodegate: cluster-check: failed with node1, node4; passed with none"
        assert report["named"] == {"node3": reason}
        rows = states()
        assert "drain" in rows["node3"][0] and rows["node3"][1] == reason, rows
        assert all(rows[n] == ("idle", "none") for n in NODES if n != "node3"), rows
    finally:
        sh("slurmctl", "scontrol update NodeName=node3 State=RESUME")
