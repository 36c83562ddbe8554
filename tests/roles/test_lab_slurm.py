"""The lab's Slurm is configured by nodegate's roles, on the real daemons.

``nodegate-lab up`` runs deploy/slurm.py: slurm_controller on slurmctl, slurm_node on each
node. Shown here: the files are the roles', slurmd runs configless and serves the gres the
controller's gres.conf names, a node new to slurm.conf starts drained ``nodegate: not
validated`` while the others keep their state, and a rerun of the roles changes nothing.
Shares the e2e session lab (tests/roles/test_lab_e2e.py); NODEGATE_LAB_INSTANCE=N for lab N.
"""

from __future__ import annotations

import re
import time

import pytest

from tests.roles.test_lab_e2e import BUSY, _lab, lab, pyinfra, shell, totals  # noqa: F401

pytestmark = [pytest.mark.lab, pytest.mark.slow]
HEADER = "# Managed by nodegate (slurm_controller role)"


def _sinfo(node: str) -> str:
    return shell("slurmctl", f"sinfo -h -N -n {node} -o '%T|%G|%E'").strip()


def _wait_sinfo(node: str, pattern: str, timeout_s: float = 60.0) -> str:
    deadline = time.monotonic() + timeout_s
    state = _sinfo(node)
    while not re.fullmatch(pattern, state) and time.monotonic() < deadline:
        time.sleep(0.5)
        state = _sinfo(node)
    return state


def test_the_controller_runs_the_roles_files(lab: None) -> None:  # noqa: F811
    conf = shell("slurmctl", "cat /etc/slurm/slurm.conf")
    assert conf.startswith(HEADER)
    assert "SlurmctldParameters=enable_configless" in conf.splitlines()
    assert re.search(r"^NodeName=node1 NodeAddr=\S+ CPUs=1 RealMemory=500 Gres=gpu:8 ", conf,
                     re.M)
    gres = shell("slurmctl", "cat /etc/slurm/gres.conf")
    assert gres.startswith(HEADER)
    assert "NodeName=node1 Name=gpu File=/dev/nvidia[0-7]" in gres.splitlines()
    assert shell("slurmctl", "systemctl is-active slurmctld munge").split() == ["active"] * 2


@pytest.mark.parametrize("name", ["node1", "node2"])
def test_slurmd_runs_configless_with_the_controllers_gres(lab: None, name: str) -> None:  # noqa: F811
    assert "--conf-server slurmctl:6817" in shell(name, "ps -o args= -C slurmd")
    assert shell(name, "test -e /etc/slurm/slurm.conf || echo absent").strip() == "absent"
    served = shell(name, "cat /run/slurm/conf/gres.conf")
    assert served == shell("slurmctl", "cat /etc/slurm/gres.conf")  # fetched from slurmctld
    detail = shell("slurmctl", f"scontrol -d show node {name}")
    assert re.search(r"^\s*Gres=gpu:8\b", detail, re.M), detail
    # the node's own view of its gres: what slurmd builds from the served gres.conf
    gres = shell(name, "slurmd -G --conf-server slurmctl:6817 2>&1 | grep 'Gres Name=gpu'")
    assert "Count=8" in gres and "File=/dev/nvidia[0-7]" in gres, gres
    assert shell(name, f"sinfo -h -N -n {name} -o %N").strip() == name  # clients read it too


def test_a_new_node_joins_drained_and_a_rerun_changes_nothing(lab: None) -> None:  # noqa: F811
    before = {n: _sinfo(n) for n in ("node1", "node2")}
    try:
        up = _lab("up", "--nodes", "3", "--fault", f"{BUSY}:foreign-process@gpu0")
        assert up.returncode == 0, up.stdout + up.stderr
        assert _wait_sinfo("node3", r"drained\|gpu:8\|nodegate: not validated") == \
            "drained|gpu:8|nodegate: not validated"
        after = {n: _sinfo(n) for n in ("node1", "node2")}
        assert after == before  # the nodes slurmctld had keep their state and reason
        rerun = pyinfra("deploy/slurm.py")
        assert rerun.returncode == 0, rerun.stdout[-3000:]
        changed, errors, _ = totals(rerun.stdout)
        assert (changed, errors) == (0, 0), rerun.stdout[-3000:]
        assert _sinfo("node3") == "drained|gpu:8|nodegate: not validated"
    finally:
        down = _lab("up", "--nodes", "2", "--fault", f"{BUSY}:foreign-process@gpu0")
        assert down.returncode == 0, down.stdout + down.stderr
    assert "node3" not in shell("slurmctl", "sinfo -h -N -o %N").split()
    assert "NodeName=node3" not in shell("slurmctl", "cat /etc/slurm/slurm.conf")
