"""The cluster check's pair jobs on a real Slurm (the session's slurmctld and slurmds on
localhost): the real ``srun --label`` runs the real pair script, whose ``nodegate`` is a
stand-in printing a prepared report; a user's job holding a node makes its pairs pend.

A pair that pends past its timeout never started: no node is named or drained for it, the
pairs that ran are judged from their framed reports, and the pending srun leaves no job."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from nodegate.cluster import cluster_check as cc
from tests.cluster.conftest import SlurmCluster
from tests.cluster.test_cluster_check import side

pytestmark = pytest.mark.slow

NODEGATE = r'''
import os, sys
fake = os.environ["FAKE_NODEGATE"]
node = os.environ["SLURMD_NODENAME"]
sys.stdout.write("UserWarning: {'torch': 'a brace before the report'}\n")
sys.stdout.write(open(os.path.join(fake, f"report.{node}")).read() + "\n")
'''


@pytest.fixture
def stand_in(tmp_path: Path, slurm: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A node-side ``nodegate`` printing each node's prepared report; srun's environment
    (SLURM_CONF, FAKE_NODEGATE) reaches the tasks as Slurm passes it on."""
    script = tmp_path / "nodegate"
    script.write_text(f"#!{sys.executable}\n{NODEGATE}")
    script.chmod(0o755)
    for node in slurm.nodes:
        (tmp_path / f"report.{node}").write_text(side(node, "peer", 40.0))
    monkeypatch.setenv("FAKE_NODEGATE", str(tmp_path))
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    monkeypatch.setenv("PATH", slurm.env["PATH"])
    for node in ("ng1", "ng2", "ng4"):
        slurm.reset(node)
    return script


def _jobs(slurm: SlurmCluster) -> str:
    return slurm.run("squeue", "-h", "-o", "%i|%j|%T").stdout


def test_real_srun_pairs_are_read_from_their_frames(slurm: SlurmCluster, stand_in: Path,
                                                    tmp_path: Path) -> None:
    policy = cc.CheckPolicy("quad", nodegate=str(stand_in), timeout_s=30.0,
                            report_dir=str(tmp_path / "node-reports"))
    outcome = cc.run_check(slurm.scheduler(), policy, cc.srun_runner(),
                           nodes=["ng1", "ng2", "ng4"])
    assert outcome.passed, [(r.key(), r.verdict, r.detail) for r in outcome.results]
    assert len(outcome.results) == 3 and all(r.busbw_gbps == 40.0 for r in outcome.results)


def test_a_pair_held_by_a_users_job_never_started_and_drains_nothing(
        slurm: SlurmCluster, stand_in: Path, tmp_path: Path) -> None:
    held = slurm.run("sbatch", "--parsable", "--job-name=users-training-run",
                     "--nodelist=ng4", "--exclusive", "--partition=quad",
                     f"--output={tmp_path}/held-%j.out", "--wrap=sleep 300").stdout.strip().split(";")[0]
    try:
        deadline = time.monotonic() + 30
        while "RUNNING" not in _jobs(slurm) and time.monotonic() < deadline:
            time.sleep(0.3)
        policy = cc.CheckPolicy("quad", nodegate=str(stand_in), timeout_s=8.0,
                                report_dir=str(tmp_path / "node-reports"), start_retries=0)
        scheduler = slurm.scheduler()
        outcome = cc.run_check(scheduler, policy, cc.srun_runner(grace_s=3.0),
                               nodes=["ng1", "ng2", "ng4"])
        assert sorted(outcome.not_started) == [("ng1", "ng4"), ("ng2", "ng4")]
        for why in outcome.not_started.values():
            assert why.why.startswith("not started within 8 s") and "fail" not in why.why
        assert [r.key() for r in outcome.results] == [("ng1", "ng2")]
        assert outcome.named == {} and outcome.verdict == "NOT_STARTED"
        cc.act(scheduler, policy, cc.srun_runner(), outcome, tmp_path / "out")
        assert slurm.sinfo("ng4")[0] in ("allocated", "mixed")  # the user's job, undrained
        assert outcome.drained == {}
        assert "not written" in outcome.delivered["ng4"]
        report = json.loads(json.dumps(cc.report_dict(policy, outcome)))
        assert report["verdict"] == "NOT_STARTED" and len(report["not_started"]) == 2
        assert "nodegate-pair." not in _jobs(slurm)  # the pending pairs were cancelled
    finally:
        slurm.run("scancel", held, check=False)
        slurm.wait_state("ng4", "idle", timeout=60)
