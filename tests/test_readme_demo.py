"""The README's first command, the demo, end to end on the lab (last: it reshapes the lab to
3 nodes). The script checks its own outcome and exits 1 when a node is not where the gate
should have put it or the re-deploy changed something."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.lab, pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("systemd-nspawn") is None,
                       reason="the lab demo needs root and systemd-nspawn"),
    pytest.mark.skipif(Path("/tmp/nodegate-lab-in-use").exists(),
                       reason="someone is deploying to the default lab the demo reshapes"),
]


def test_demo_drains_the_faulty_node_and_joins_the_others(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "demo-lab.sh")], cwd=ROOT,
                          # the demo is the README's: the default lab (instance 0), whichever
                          # instance the rest of the suite uses
                          env=dict(os.environ, NODEGATE_DEMO_DIR=str(out),
                                   NODEGATE_LAB_INSTANCE="0"), text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=1500,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert "demo: OK" in proc.stdout
    sinfo = (out / "sinfo.txt").read_text()
    assert "node3 drained nodegate: nvlink_state[gpu3.link5]" in sinfo
    html = (out / "fleet.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "node3" in html
