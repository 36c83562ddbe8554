"""The deploy runner the bench and the 8-node test share: a failed run is never a timing.

Fast: the broken site file fails while pyinfra loads the inventory, before any SSH.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

import pytest

from nodegate_lab import deploys

ROOT = Path(__file__).resolve().parents[2]
SUMMARY = """
    Operation                                      Hosts   Success   Error   No Change
    nodegate base: kernel | base: sysctl           8       -         -       8
    Grand total                                    328     280       3       45
"""


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("deploy_time", ROOT / "bench/deploy_time.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_grand_total_is_read_with_dashes_as_zero() -> None:
    assert deploys.parse_totals(SUMMARY) == deploys.Totals(328, 280, 3, 45)
    assert deploys.parse_totals("Grand total  96  -  -  96") == deploys.Totals(96, 0, 0, 96)
    assert deploys.parse_totals("--> Loading inventory...") is None


def test_errors_in_the_summary_fail_a_run_that_exited_zero() -> None:
    run = deploys.DeployRun(0, 1.0, 0.5, SUMMARY, deploys.parse_totals(SUMMARY))
    assert run.failure == "3 operation(s) in error"


def test_a_broken_site_file_is_reported_as_a_failure_not_a_time(tmp_path: Path) -> None:
    site = tmp_path / "broken.yaml"
    site.write_text("defaults:\n  ssh_user: root\nhosts:\n  node1:\n    address: 10.77.12.11\n")
    run = deploys.run_deploy({**os.environ, "NODEGATE_SITE": str(site)}, timeout_s=120)
    assert run.returncode == 2, run.output
    assert run.failure == "pyinfra exited 2"
    assert str(site) in run.tail()
    assert run.wall_s > 0 and run.cpu_s > 0  # measured, and still refused below
    bench = _bench()
    with pytest.raises(bench.DeployFailed) as failed:
        bench._checked("1 node(s), first deploy", run)
    text = str(failed.value)
    assert "FAILED (pyinfra exited 2); no timing reported" in text
    assert str(site) in text
    assert f"{run.wall_s:.1f}" not in text.split("Last lines", maxsplit=1)[0]


RERUN = """
--> Results:
    Operation                                               Hosts   Success   Error   No Change
    nodegate nccl | nccl: /etc/nccl.conf                    2       {nccl}         -       {same}
    nodegate validate (the battery on the node) | gate: nodegate health    2       2    -     -
    nodegate join (Slurm resume or drain) | gate: Slurm join/drain    2       -    -     2
    Grand total                                             6       {total}         -       {left}
"""


def test_a_rerun_that_changed_something_is_not_a_noop() -> None:
    """The gate's battery runs on every deploy (an action, counted as one); any other change
    on a rerun is one too many."""
    bench = _bench()
    quiet = RERUN.format(nccl="-", same="2", total="2", left="4")
    run = deploys.DeployRun(0, 5.0, 2.0, quiet, deploys.parse_totals(quiet))
    assert deploys.changed_operations(quiet) == {
        "nodegate validate (the battery on the node) | gate: nodegate health": 2}
    assert deploys.role_changes(quiet) == {}
    assert bench._checked("rerun", run, noop=True) is run
    noisy = RERUN.format(nccl="1", same="1", total="3", left="3")
    run = deploys.DeployRun(0, 5.0, 2.0, noisy, deploys.parse_totals(noisy))
    assert bench._checked("rerun", run) is run
    assert deploys.role_changes(noisy) == {"nodegate nccl | nccl: /etc/nccl.conf": 1}
    with pytest.raises(bench.DeployFailed, match=r"changed 1 operation\(s\) besides the gate's "
                       r"runs \(nodegate nccl \| nccl: /etc/nccl.conf\)"):
        bench._checked("rerun", run, noop=True)
    # the join is not a gate run: a rerun that resumes or drains a node is a change
    joined = quiet.replace("gate: Slurm join/drain    2       -", "gate: Slurm join/drain    2       1")
    assert list(deploys.role_changes(joined)) == [
        "nodegate join (Slurm resume or drain) | gate: Slurm join/drain"]
