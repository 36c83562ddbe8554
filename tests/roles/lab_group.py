"""One lab for the ``lab-upgrade`` group (tests/parallel.py): brought up once, reset between files.

test_lab_upgrade.py, test_lab_slurm_hooks.py and test_lab_drain_budget.py each used to bring
up a lab of their own and take it down (set-ups of 135-188 s on two loaded cores). They share
one shape: 4 nodes on the h100-hgx board, Slurm, the agent deployed. What differs is the
faults on the boards, the site file's settings and each file's own deploy, all of which a
file sets up again on top of the baseline.

The first file of the group (on this lab instance) brings the lab up with its faults, deploys
it once (``deploy.py``, its gate off, torch in the agent's venv: the files' own deploys turn on
what they test) and makes that state the lab's baseline (``nodegate-lab snapshot``). Every later file asks the lab for
``nodegate-lab reset`` with its own faults: every host goes back to the baseline (packages,
files, Slurm's node states and reasons) and boots on a fresh board. A file needing only 2
nodes leaves node3 and node4 idle.

Each file still runs alone: it brings the lab up when none with a baseline is there. The lab
is taken down after the last file of the group in this run (or at the end of the session,
when a run stops early), and only when this run brought it up: a lab already up with a
baseline is reset, used and left up.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from nodegate_lab import config as lab_config
from tests.parallel import LAB_GROUPS

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
GROUP = "lab-upgrade"
NODE_COUNT = 4
SCENARIO = "h100-hgx"
#: The agent's extras in the baseline: ``power`` (the lab has PDUs and BMCs) and ``torch``.
BASELINE_EXTRAS = ("power", "torch")
#: Lab instances whose group lab this process brought up (and so takes down).
_OURS: set[int] = set()


def lab_command(*args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    """``nodegate-lab ARGS`` (the lab harness's own command)."""
    return subprocess.run([str(VENV_BIN / "nodegate-lab"), *args], cwd=ROOT, text=True,
                          capture_output=True, timeout=timeout, check=False)


def _has_baseline() -> bool:
    """A lab with a baseline in the group's shape is up on this instance."""
    from nodegate_lab import lab

    shape = lab.baseline_shape()
    return shape is not None and shape.get("nodes") == NODE_COUNT \
        and shape.get("scenario") == SCENARIO and shape.get("with_mirror") is True


def _take_down() -> None:
    if lab_config.INSTANCE in _OURS:
        _OURS.discard(lab_config.INSTANCE)
        down = lab_command("down", timeout=600)
        assert down.returncode == 0, down.stdout + down.stderr
        print(f"\n{down.stdout.strip()}")


def _group_follows(request: pytest.FixtureRequest) -> bool:
    """True when the test right after this file's last one is in another file of the group:
    it resets the lab instead of bringing it up. Under xdist the group runs whole and in order
    on one worker; a serial run of all tests keeps the written order, where other labs' files
    come between the group's, so the lab goes down after each of them there."""
    files = LAB_GROUPS[GROUP]
    here = os.path.relpath(str(request.path), ROOT)
    items = request.session.items
    last = max((i for i, item in enumerate(items)
                if os.path.relpath(str(item.path), ROOT) == here), default=len(items))
    return last + 1 < len(items) and os.path.relpath(str(items[last + 1].path), ROOT) in files


def stays_up(request: pytest.FixtureRequest) -> bool:
    """True when the lab outlives this file: not brought up by this run, and no file of the
    group follows. A file puts back what it changed beyond the baseline only then."""
    return lab_config.INSTANCE not in _OURS and not _group_follows(request)


@contextlib.contextmanager
def group_lab(request: pytest.FixtureRequest, faults: Mapping[str, str]) -> Iterator[None]:
    """The group's lab at its baseline with ``faults`` (node -> fault) for the ``with`` body."""
    from tests.roles.test_lab_e2e import pyinfra

    fault_args = [arg for node, fault in faults.items() for arg in ("--fault", f"{node}:{fault}")]
    if _has_baseline():
        reset = lab_command("reset", *fault_args, timeout=900)
        assert reset.returncode == 0, reset.stdout + reset.stderr
        print(f"\n{reset.stdout.strip()}")
    else:
        from nodegate_lab import lab

        if lab.existing_members():  # another shape (or no baseline): not one to reset
            down = lab_command("down", timeout=600)
            assert down.returncode == 0, down.stdout + down.stderr
        _OURS.add(lab_config.INSTANCE)
        request.config.add_cleanup(_take_down)  # a run that stops early still takes it down
        up = lab_command("up", "--nodes", str(NODE_COUNT), "--scenario", SCENARIO, *fault_args,
                         timeout=1800)
        assert up.returncode == 0, up.stdout + up.stderr
        # the agent, the driver at the lab's A, Slurm; the files' own deploys add the rest.
        # torch in the agent's venv from the start: the sweep's and remediation's files need
        # it (a standard-level gate, a re-qualification), and each installed it again on top
        # of the baseline (the reset drops what a file installed)
        first = pyinfra("deploy.py", "--data", "gate_enabled=false",
                        "--data", f"agent_extras={json.dumps(list(BASELINE_EXTRAS))}",
                        timeout=1200)
        assert first.returncode == 0, first.stdout[-4000:]
        snap = lab_command("snapshot", timeout=900)
        assert snap.returncode == 0, snap.stdout + snap.stderr
        print(f"\n{snap.stdout.strip()}")
    try:
        yield
    finally:
        if not _group_follows(request):
            _take_down()


#: The agent's scheduled unit on a lab node (a systemd timer's service: the lab boots systemd).
HEALTH_UNIT = "/etc/systemd/system/nodegate-health.service"


def scheduled_command(unit: str) -> str:
    """The shell line that does what the agent's scheduled service ``unit`` (its text) does:
    its EnvironmentFile loaded, then its ExecStart steps in order (health, then the gate)."""
    import re

    from roles.ops.schedule import env_loader

    steps = re.findall(r"^ExecStart=(.*)$", unit, re.M)
    env = re.search(r"^EnvironmentFile=-(\S+)$", unit, re.M)
    return env_loader(env.group(1) if env else None) + "; ".join(steps)
