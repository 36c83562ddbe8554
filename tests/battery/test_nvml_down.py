"""NVML down is a result: a node whose NVML cannot initialise or hangs gets a
written report with ``gpu_reachable[node]`` ERROR and exit 1, and the gate drains it."""

from __future__ import annotations

import ctypes.util
import datetime as dt
import fcntl
import json
import os
import time
from pathlib import Path

import pytest

from nodegate.battery_lock import BatteryLock
from nodegate.cluster.gate import Action, decide_health, decide_join, latest
from nodegate.cluster.scheduler import NodeState
from nodegate.probes.deadline import (
    LATE_READS,
    ChildDied,
    DeadlineExceeded,
    call_with_deadline,
    start_with_deadline,
)
from nodegate.report import Level, load
from nodegate.results import Verdict
from tests.cluster.helpers import report as synthetic
from tests.conftest import run_cli

SYSTEM_NVML = ctypes.util.find_library("nvidia-ml")
needs_no_system_nvml = pytest.mark.skipif(
    SYSTEM_NVML is not None,
    reason=f"this machine has a real {SYSTEM_NVML}: the simulator cannot take it away")


# --------------------------------------------------------------------------- the watchdog


def test_deadline_returns_the_childs_value() -> None:
    assert call_with_deadline(lambda progress: {"gpus": [1, 2]}, 10) == {"gpus": [1, 2]}


def test_deadline_reraises_the_childs_exception() -> None:
    def boom(progress: object) -> None:
        raise ValueError("bad field")

    with pytest.raises(ValueError, match="bad field"):
        call_with_deadline(boom, 10)


def test_a_child_that_never_answers_is_abandoned_naming_where_it_hung() -> None:
    def wedged(progress: object) -> None:
        progress("gpu5")  # type: ignore[operator]
        time.sleep(3600)

    with pytest.raises(DeadlineExceeded) as caught:
        call_with_deadline(wedged, 0.5)
    assert caught.value.last == "gpu5"
    assert caught.value.reaped  # a sleeping child dies on SIGKILL


def test_a_child_that_dies_is_no_answer() -> None:
    with pytest.raises(ChildDied):
        call_with_deadline(lambda progress: os._exit(9), 10)


def test_the_probe_child_does_not_keep_the_battery_lock(tmp_path: Path) -> None:
    """A child wedged in the kernel may outlive SIGKILL: it must not hold the node's lock, or
    every later cron run would exit 3 for ever."""
    with BatteryLock(tmp_path / "lock") as lock:
        fd = lock._fd
        assert fd is not None

        def lock_fd_open(progress: object) -> bool:
            try:
                fcntl.fcntl(fd, fcntl.F_GETFD)
            except OSError:
                return False
            return True

        assert call_with_deadline(lock_fd_open, 10) is False


def test_an_answer_that_waited_while_the_parent_worked_is_taken() -> None:
    """The cron check works while the child reads the board: an answer already in the
    pipe when the parent comes back after the deadline is an answer in time."""
    pending = start_with_deadline(lambda progress: {"gpus": [1, 2]}, 0.2)
    time.sleep(0.5)
    assert pending.result() == {"gpus": [1, 2]}


def test_a_child_still_working_at_the_deadline_is_abandoned_after_the_parents_work() -> None:
    def slow(progress: object) -> None:
        progress("gpu1")  # type: ignore[operator]
        time.sleep(3600)

    pending = start_with_deadline(slow, 0.2)
    time.sleep(0.5)
    started = time.monotonic()
    with pytest.raises(DeadlineExceeded) as caught:
        pending.result()
    assert caught.value.last == "gpu1" and caught.value.reaped
    assert time.monotonic() - started < 0.5  # no new wait once the deadline has passed


def test_a_child_that_keeps_talking_past_the_deadline_cannot_hold_the_parent() -> None:
    def chatty(progress: object) -> None:
        while True:
            progress("x" * 60000)  # type: ignore[operator]

    pending = start_with_deadline(chatty, 0.2)
    time.sleep(0.4)
    started = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        pending.result()
    assert LATE_READS < 1000 and time.monotonic() - started < 5


def test_a_probe_given_up_is_killed_and_reaped() -> None:
    pending = start_with_deadline(lambda progress: time.sleep(3600), 30)
    pid = pending._pid
    pending.close()
    pending.close()  # idempotent
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


# --------------------------------------------------------------------------- nodegate health


def _health(tmp_path: Path, spec: str, *extra: str) -> tuple[int, dict, str]:  # type: ignore[type-arg]
    result = run_cli("sim", "run", spec, "--", "nodegate", "health", "--profile", "xe9680-h100",
                     "--checks", "gpu,log", "--report-dir", str(tmp_path / "r"),
                     "--no-textfile", "--quiet", *extra,
                     env={"NODEGATE_LOCK_FILE": str(tmp_path / "lock")})
    assert result.returncode in (0, 1), result.stderr
    assert "Traceback" not in result.stderr
    path = tmp_path / "r" / "quick-latest.json"
    return result.returncode, json.loads(path.read_text()), result.stderr


def _errors(report: dict) -> list[tuple[str, str]]:  # type: ignore[type-arg]
    return [(r["check"], r["entity"]) for r in report["results"] if r["verdict"] == "ERROR"]


@needs_no_system_nvml
def test_library_gone_writes_a_report_with_gpu_reachable_error(tmp_path: Path) -> None:
    code, report, _ = _health(tmp_path, "h100-hgx+nvml-missing")
    assert code == 1
    assert _errors(report) == [("gpu_reachable", "node")]
    result = report["results"][0]
    assert result["evidence"]["failure"] == "init"
    assert "NVML Shared Library Not Found" in result["evidence"]["reason"]


def test_a_hung_nvml_call_is_error_within_the_deadline(tmp_path: Path) -> None:
    # without the watchdog this run never ends (the subprocess timeout of run_cli fails it)
    code, report, _ = _health(tmp_path, "h100-hgx+nvml-hang@gpu3", "--nvml-timeout", "2")
    assert code == 1
    assert _errors(report) == [("gpu_reachable", "node")]
    evidence = report["results"][0]["evidence"]
    assert evidence["failure"] == "timeout" and evidence["stage"] == "gpu3"
    assert evidence["deadline_s"] == 2


@pytest.mark.parametrize("value", ["0", "-5", "inf", "soon"])
def test_bad_nvml_timeout_is_bad_input(tmp_path: Path, value: str) -> None:
    result = run_cli("health", "--profile", "xe9680-h100", "--nvml-timeout", value,
                     "--report-dir", str(tmp_path), env={"NODEGATE_LOCK_FILE": str(tmp_path / "l")})
    assert result.returncode == 2
    assert "--nvml-timeout" in result.stderr and "Traceback" not in result.stderr


@needs_no_system_nvml
def test_validate_with_the_library_gone_is_a_result_and_runs_no_load(tmp_path: Path) -> None:
    result = run_cli("sim", "run", "h100-hgx+nvml-missing", "--", "nodegate", "validate",
                     "--level", "standard", "--checks", "gpu,load", "--profile", "xe9680-h100",
                     "--duration-scale", "0.02", "--report-dir", str(tmp_path / "r"),
                     "--no-textfile", "--quiet",
                     env={"NODEGATE_LOCK_FILE": str(tmp_path / "lock")})
    assert result.returncode == 1, result.stderr
    assert "load checks not run: NVML unavailable" in result.stderr
    report = json.loads((tmp_path / "r" / "standard-latest.json").read_text())
    assert _errors(report) == [("gpu_reachable", "node")]


# --------------------------------------------------------------------------- the gate


@needs_no_system_nvml
def test_the_gate_drains_a_node_whose_nvml_is_gone(tmp_path: Path) -> None:
    """The previous health report PASSed; the new one (NVML gone) is the latest and drains:
    no "stale; no change" because a report is written."""
    _health(tmp_path, "h100-hgx+nvml-missing")
    down = load(tmp_path / "r" / "quick-latest.json")
    assert down.verdict is Verdict.ERROR
    before = synthetic(down.node, level="quick", age=dt.timedelta(minutes=5))
    newest = latest([before, down])
    assert newest is down
    in_service = NodeState(down.node, "idle")
    decision = decide_health(in_service, newest)
    assert decision.action is Action.DRAIN
    assert decision.reason == "nodegate: gpu_reachable[node]"
    assert decide_join(in_service, [down], policy=None).action is Action.DRAIN


def test_the_gate_drains_a_node_whose_nvml_hangs(tmp_path: Path) -> None:
    _health(tmp_path, "h100-hgx+nvml-hang@gpu0", "--nvml-timeout", "2")
    down = load(tmp_path / "r" / "quick-latest.json")
    assert down.level is Level.QUICK
    decision = decide_health(NodeState(down.node, "allocated"), down)
    assert (decision.action, decision.reason) == (Action.DRAIN, "nodegate: gpu_reachable[node]")
