"""The multi-node check on three lab nodes: deploy.py with a known-good peer
runs one group of node1 (the peer, rendezvous host), node2 and node3 over real SSH and
torchrun; each new node's report judges all_reduce, all_gather, reduce_scatter and alltoall
bus bandwidth with every host in the world, and the join gate requires it.

Brings its own 3-node lab up on ``$NODEGATE_LAB_INSTANCE`` when none is running there, and
takes down only what it brought up."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.roles.test_lab_e2e import (
    ROOT,
    VENV_BIN,
    _lab,
    pyinfra_env,
    pytestmark,  # noqa: F401  (lab, slow, root + nspawn)
    shell,
)

NODES = ("node1", "node2", "node3")
PEER = "node1"
CHECKS = {"multinode_completed", "multinode_allreduce_busbw", "multinode_allgather_busbw",
          "multinode_reducescatter_busbw", "multinode_alltoall_busbw"}


@pytest.fixture(scope="module")
def lab3() -> Iterator[None]:
    status = _lab("status", timeout=60).stdout
    running = all(re.search(rf"^{n}\s+node\s+\S+\s+running", status, re.M) for n in NODES)
    if not running:
        up = _lab("up", "--nodes", "3")
        assert up.returncode == 0, up.stdout + up.stderr
    yield
    if not running:
        _lab("down")


@pytest.mark.usefixtures("lab3")
def test_three_nodes_judge_the_four_collectives(tmp_path: Path) -> None:
    run = subprocess.run(
        [str(VENV_BIN / "pyinfra"), "-y", "inventory.py", "deploy.py",
         "--data", f"gate_multinode_peer={PEER}", "--data", f"gate_fetch_dir={tmp_path}"],
        cwd=ROOT, env=pyinfra_env(), text=True, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, timeout=1500, check=False)
    assert run.returncode == 0, run.stdout[-4000:]
    assert "gate: multinode collectives node2 + node3 + node1" in run.stdout
    for new in ("node2", "node3"):
        report = json.loads((tmp_path / new / "multinode-latest.json").read_text())
        assert report["labels"]["nnodes"] == "3" and report["labels"]["peer"] == PEER
        got = {r["check"]: r for r in report["results"]}
        assert set(got) == CHECKS
        assert all(r["verdict"] == "PASS" and r["entity"] == f"peer-{PEER}"
                   for r in got.values()), got
        for check in CHECKS - {"multinode_completed"}:
            ev = got[check]["evidence"]
            assert got[check]["measured"] > 0 and got[check]["unit"] == "GB/s"
            assert sorted(ev["hosts"]) == list(NODES) and ev["world"] == 3
            factor = 4 / 3 if check == "multinode_allreduce_busbw" else 2 / 3
            assert ev["factor"] == pytest.approx(factor)  # nccl-tests at n = 3
    assert not (tmp_path / PEER / "multinode-latest.json").exists()  # the reference
    # the quick gate required the network group too: the simulated rails passed in the lab
    quick = json.loads((tmp_path / "node2" / "quick-latest.json").read_text())
    rails = [r for r in quick["results"] if r["check"] == "ib_port_state"]
    assert len(rails) == 8 and all(r["verdict"] == "PASS" for r in rails)
    for name in NODES:
        state = shell("slurmctl", f"sinfo -h -N -n {name} -o '%T'").strip()
        assert state.startswith("idle"), (name, state)
