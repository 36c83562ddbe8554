"""Ctrl-C during a real pyinfra run exits 3 and names what it left half-done.

pyinfra's CLI answers SIGINT with exit 0 ("Exiting upon user request!"); nodegate's handler
(nodegate.deploy_interrupt, installed by the inventory file as inventory.py does) makes it
exit 3 (docs/exit-codes.md) with each host's operation in flight. A real ``pyinfra`` process
on the ``@local`` connector, a real SIGINT.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nodegate import deploy_interrupt

ROOT = Path(__file__).resolve().parents[2]
PYINFRA = Path(sys.executable).parent / "pyinfra"

INVENTORY = """\
import nodegate.deploy_interrupt
nodegate.deploy_interrupt.install()
hosts = ["@local"]
"""
DEPLOY = """\
from pyinfra.operations import server
server.shell(name="first step", commands=["true"])
server.shell(name="slow step", commands=["sleep 6"])
server.shell(name="never reached", commands=["true"])
"""


def _run(tmp_path: Path, *, interrupt_on: str | None,
         deploy: str = DEPLOY) -> tuple[int, str]:
    (tmp_path / "inv.py").write_text(INVENTORY)
    (tmp_path / "dep.py").write_text(deploy)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([str(PYINFRA), "-y", "inv.py", "dep.py"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    lines = []
    deadline = time.monotonic() + 60
    for line in proc.stdout:
        lines.append(line)
        if interrupt_on and interrupt_on in line:
            time.sleep(0.5)  # the command is running on the host
            os.kill(proc.pid, signal.SIGINT)
            interrupt_on = None
        if time.monotonic() > deadline:
            os.kill(proc.pid, signal.SIGKILL)
            break
    return proc.wait(timeout=30), "".join(lines)


@pytest.mark.skipif(not PYINFRA.exists(), reason="pyinfra's CLI is not installed")
def test_sigint_mid_operation_exits_3_naming_the_operation_in_flight(tmp_path: Path) -> None:
    rc, out = _run(tmp_path, interrupt_on="Starting operation: slow step")
    assert rc == deploy_interrupt.EXIT_INTERRUPTED, out
    assert "Exiting upon user request" not in out
    assert "@local: 'slow step' was running (it may be half-applied), 1 of 3 operations " \
           "not run" in out, out
    assert "never reached" not in out.split("nodegate: error:")[0].split("slow step")[-1]


@pytest.mark.skipif(not PYINFRA.exists(), reason="pyinfra's CLI is not installed")
def test_an_uninterrupted_run_still_exits_0(tmp_path: Path) -> None:
    rc, out = _run(tmp_path, interrupt_on=None, deploy=DEPLOY.replace("sleep 6", "true"))
    assert rc == 0, out


def test_summary_before_execution_says_nothing_changed() -> None:
    class Stage:
        name = "Prepare"

    class State:
        initialised = True
        current_stage = Stage()
        is_executing = False

    assert deploy_interrupt.summary(None).endswith("nothing was changed")
    assert deploy_interrupt.summary(State()) == (
        "interrupted while pyinfra was in its prepare stage, before any operation executed: "
        "nothing was changed")


def test_outside_pyinfras_cli_nothing_is_installed() -> None:
    before = signal.getsignal(signal.SIGINT)
    assert deploy_interrupt.install() is False
    assert signal.getsignal(signal.SIGINT) is before


@pytest.mark.skipif(not PYINFRA.exists(), reason="pyinfra's CLI is not installed")
def test_the_inventory_gives_every_host_its_connection_bounds() -> None:
    """inventory.py through pyinfra's CLI: every host gets the keepalive knobs and pyinfra's
    per-command deadline (``_timeout``), and no helper name of the file becomes a group."""
    env = dict(os.environ, NODEGATE_SITE="example-site", PYTHONPATH=os.pathsep.join(
        [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([str(PYINFRA), "inventory.py", "debug-inventory"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    out = done.stdout + done.stderr  # pyinfra prints the inventory on stderr
    assert done.returncode == 0, out[-3000:]
    assert '"ssh_keepalive_s": 15' in out and '"_timeout": 3600' in out
    assert "CONNECTION_KNOBS" not in out
