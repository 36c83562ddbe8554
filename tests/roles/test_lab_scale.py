"""Eight fresh lab nodes in one deploy: exit 0, then a rerun that changes nothing
but the gate's battery run on each node (an action on every deploy, roles/ops/gate.py).

Opt-in with ``NODEGATE_LAB_SCALE=1``: eight booted nodes and two full deploys take about
4 minutes of a 2-core machine, too much for the default suite. Run it alone on a free
instance: ``NODEGATE_LAB_SCALE=1 NODEGATE_LAB_INSTANCE=5 pytest tests/roles/test_lab_scale.py``.
The always-run regression tests for its root cause (guests sharing one cgroup tree, so a
oneshot started on every host at once failed with 219/CGROUP) are in tests/lab/
(``test_hosts_keep_their_unit_cgroups_apart``, ``test_the_same_oneshot_started_on_every_host_
at_once_never_fails``, test_lab_cgroups.py) and tests/roles/test_driver_service.py.
"""

from __future__ import annotations

import os
import shutil

import pytest

from nodegate_lab import deploys, lab, sitefile
from tests.lab.conftest import lab_busy_reason

NODES = 8
pytestmark = [
    pytest.mark.lab, pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("NODEGATE_LAB_SCALE") != "1",
                       reason="opt-in: NODEGATE_LAB_SCALE=1 (8 nodes, ~4 min on 2 cores)"),
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("systemd-nspawn") is None,
                       reason="the lab needs root and systemd-nspawn"),
]


def test_eight_fresh_nodes_deploy_in_one_run_and_the_rerun_only_runs_the_gate() -> None:
    busy = lab_busy_reason()
    if busy:
        pytest.skip(f"{busy} (this test needs {NODES} fresh nodes)")
    try:
        lab.up(NODES)
        env = deploys.lab_env(sitefile.site_path())
        first = deploys.run_deploy(env)
        assert first.failure is None, first.tail(80)
        assert first.totals is not None and first.totals.changed > 0
        rerun = deploys.run_deploy(env)
        assert rerun.failure is None, rerun.tail(80)
        assert deploys.role_changes(rerun.output) == {}, rerun.tail(80)
        # the only change: the battery, run once on each node
        assert rerun.totals is not None and rerun.totals.changed == NODES, rerun.tail(80)
        print(f"{NODES} nodes: first {first.wall_s:.1f} s ({first.totals}); "
              f"rerun {rerun.wall_s:.1f} s ({rerun.totals})")
    finally:
        left = lab.down()
    assert left == []
