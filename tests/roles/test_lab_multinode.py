"""The multi-node check on the embedded lab: deploy.py with a known-good peer runs an
all-reduce between node2 and node1 over real SSH, fetches node2's report, and the join gate
requires it: a pass joins, a failure drains node2 with a hold that a health pass never lifts,
and the next passing run resumes it. Runs after test_lab_e2e on the same 2-node lab."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.roles.test_lab_e2e import (
    ROOT,
    SITE,
    VENV_BIN,
    lab,  # noqa: F401  (the fixture: the same 2-node lab, brought up when it is down)
    pyinfra_env,
    pytestmark,  # noqa: F401  (lab, slow, root + nspawn)
    shell,
)

PEER = "node1"
NEW = "node2"
REASON = "nodegate: multinode failed multinode_allreduce_busbw[peer-node1]"


def deploy(fetch: Path, site: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = pyinfra_env()
    if site is not None:
        env["NODEGATE_SITE"] = str(site)
    return subprocess.run(
        [str(VENV_BIN / "pyinfra"), "-y", "inventory.py", "deploy.py",
         "--data", f"gate_multinode_peer={PEER}", "--data", f"gate_fetch_dir={fetch}"],
        cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        timeout=1200, check=False)


def sinfo(node: str) -> tuple[str, str]:
    """(state, reason) from the lab's slurmctld, once the state has settled."""
    out = ""
    for _ in range(20):
        out = shell("slurmctl", f"sinfo -h -N -n {node} -o '%T|%E'").strip().splitlines()[0]
        if "*" not in out.split("|")[0]:
            break
        time.sleep(1)
    state, _, reason = out.partition("|")
    return state, reason


def results(path: Path) -> dict[str, dict[str, Any]]:
    return {r["check"]: r for r in json.loads(path.read_text())["results"]}


@pytest.mark.usefixtures("lab")
def test_pass_joins_failure_drains_with_a_hold_next_pass_resumes(tmp_path: Path) -> None:
    # 1. a healthy pair: node2's report has the figure, node2 and node1 are in service
    first = deploy(tmp_path / "pass")
    assert first.returncode == 0, first.stdout[-4000:]
    got = results(tmp_path / "pass" / NEW / "multinode-latest.json")
    busbw = got["multinode_allreduce_busbw"]
    assert got["multinode_completed"]["verdict"] == "PASS"
    assert busbw["verdict"] == "PASS" and busbw["entity"] == "peer-node1"
    assert busbw["unit"] == "GB/s" and busbw["measured"] > 0
    assert sorted(busbw["evidence"]["hosts"]) == ["node1", "node2"]
    assert not (tmp_path / "pass" / PEER / "multinode-latest.json").exists()  # the reference
    assert sinfo(NEW)[0] == "idle" and sinfo(PEER)[0] == "idle"

    # 2. node2's fabric below its floor (a site override no lab link can reach): drained
    site = yaml.safe_load(SITE.read_text())
    site["hosts"][NEW]["profile_overrides"] = {"thresholds": {
        "multinode_allreduce_busbw_gbps_min": {"min": 1000.0, "unit": "GB/s",
                                               "source": "policy: lab test, unreachable"}}}
    strict = tmp_path / "strict-site.yaml"
    strict.write_text(yaml.safe_dump(site))
    second = deploy(tmp_path / "fail", strict)
    assert second.returncode != 0, second.stdout[-4000:]  # node2 fails its host
    assert re.search(rf"{NEW}: join gate: {NEW} drain", second.stdout), second.stdout[-4000:]
    assert results(tmp_path / "fail" / NEW / "multinode-latest.json")[
        "multinode_allreduce_busbw"]["verdict"] == "FAIL"
    state, reason = sinfo(NEW)
    assert "drain" in state and reason == REASON, (state, reason)
    assert sinfo(PEER)[0] == "idle"

    # 3. the scheduled health check passes on node2 but never lifts the multinode hold
    shell(NEW, "/opt/nodegate/venv/bin/nodegate health --quiet --checks gpu,log,host "
               "--profile /etc/nodegate/profile.json; /opt/nodegate/venv/bin/nodegate gate")
    assert sinfo(NEW)[1] == REASON

    # 4. the next passing run (original site) resumes it
    third = deploy(tmp_path / "again")
    assert third.returncode == 0, third.stdout[-4000:]
    assert sinfo(NEW)[0] == "idle"
