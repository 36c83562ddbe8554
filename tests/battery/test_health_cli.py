"""``nodegate health`` and the pytest battery end to end on the simulated board."""

from __future__ import annotations

import ctypes.util
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from nodegate.battery_lock import BatteryLock
from tests.conftest import ROOT, run_cli


def _health_args(tmp_path: Path, *extra: str) -> list[str]:
    return ["health", "--profile", "xe9680-h100", "--report-dir", str(tmp_path / "r"),
            "--textfile-dir", str(tmp_path / "t"), *extra]


def _env(tmp_path: Path) -> dict[str, str]:
    return {"NODEGATE_LOCK_FILE": str(tmp_path / "lock")}


def test_must_show_failures_name_the_entity(tmp_path: Path) -> None:
    result = run_cli("sim", "run", "h100-hgx+nvlink-down@gpu3.link5", "--", "nodegate",
                     *_health_args(tmp_path, "--checks", "gpu,log"), env=_env(tmp_path))
    assert result.returncode == 1, result.stderr
    report = json.loads((tmp_path / "r" / "quick-latest.json").read_text())
    failing = [r for r in report["results"] if r["verdict"] == "FAIL"]
    assert [(r["check"], r["entity"]) for r in failing] == [("nvlink_state", "gpu3.link5")]
    assert "nvlink_state" in result.stdout and "gpu3.link5" in result.stdout  # the summary
    suite = ET.parse(tmp_path / "r" / "quick-latest.xml").getroot()
    assert any(case.get("name") == "nvlink_state[gpu3.link5]" and case.find("failure") is not None
               for case in suite.iter("testcase"))
    prom = (tmp_path / "t" / "nodegate_quick.prom").read_text()
    assert 'check="nvlink_state",entity="gpu3.link5"' in prom


#: What the cron health path must never load: the load checks' torch, pytest, and the
#: control side's fleet engine (pyinfra, ansible-core, gevent, paramiko).
HEAVY = ("torch", "_pytest", "pyinfra", "ansible", "gevent", "paramiko", "jinja2")


def test_health_path_never_imports_torch_or_the_control_side(tmp_path: Path) -> None:
    code = ("import sys; from nodegate.cli import main; rc = main(sys.argv[1:]); "
            f"print('LOADED', sorted(m for m in {HEAVY!r} if m in sys.modules))")
    result = run_cli("sim", "run", "h100-hgx", "--", sys.executable, "-c", code,
                     *_health_args(tmp_path, "--quiet"), env=_env(tmp_path))
    assert "LOADED []" in result.stdout, result.stdout


def test_the_report_modules_load_while_the_board_is_read_not_before(tmp_path: Path) -> None:
    """The board's child process reads NVML while the parent imports what it will need:
    the renderers are not imported before the read starts, and no report module is left
    to import once it is done (``commands.health.REPORT_MODULES``)."""
    code = (
        "import sys\n"
        "import nodegate.battery.engine as engine\n"
        "import nodegate.probes.nvml as nvml\n"
        "seen = {}\n"
        "def report_modules():\n"
        "    return sorted(m for m in sys.modules if m.startswith('nodegate.report'))\n"
        "start, quick = nvml.start_board_read, engine.run_quick\n"
        "def started(*a, **k):\n"
        "    seen['fork'] = report_modules()\n"
        "    return start(*a, **k)\n"
        "def ran(*a, **k):\n"
        "    out = quick(*a, **k)\n"
        "    seen['read'] = report_modules()\n"
        "    return out\n"
        "nvml.start_board_read, engine.run_quick = started, ran\n"
        "from nodegate.cli import main\n"
        "rc = main(sys.argv[1:])\n"
        "print('FORK', seen['fork'])\n"
        "print('LATE', sorted(set(report_modules()) - set(seen['read'])))\n"
    )
    result = run_cli("sim", "run", "h100-hgx", "--", sys.executable, "-c", code,
                     *_health_args(tmp_path, "--quiet", "--checks", "gpu,log"),
                     env=_env(tmp_path))
    assert "LATE []" in result.stdout, result.stdout + result.stderr
    fork = next(line for line in result.stdout.splitlines() if line.startswith("FORK"))
    for renderer in ("model", "junit", "prometheus", "summary"):
        assert f"nodegate.report.{renderer}'" not in fork, fork


def test_concurrent_run_exits_at_once(tmp_path: Path) -> None:
    with BatteryLock(tmp_path / "lock"):
        result = run_cli("sim", "run", "h100-hgx", "--", "nodegate", *_health_args(tmp_path),
                         env=_env(tmp_path))
    assert result.returncode == 3
    assert "another nodegate battery run holds" in result.stderr
    assert str(os.getpid()) in result.stderr


def test_lock_wait_waits_then_skips_only_when_asked(tmp_path: Path) -> None:
    """``--lock-wait`` waits a bounded time; a lock still held is exit 3, or with
    ``--skip-if-locked`` (Slurm's prolog/epilog) exit 0 with one line and no report."""
    args = _health_args(tmp_path, "--checks", "gpu,log", "--lock-wait", "0.5")
    with BatteryLock(tmp_path / "lock"):
        refused = run_cli("sim", "run", "h100-hgx", "--", "nodegate", *args,
                          env=_env(tmp_path))
        skipped = run_cli("sim", "run", "h100-hgx", "--", "nodegate", *args, "--quiet",
                          "--skip-if-locked", env=_env(tmp_path))
        bad = run_cli("health", "--profile", "xe9999-h900", "--lock-wait", "0.5",
                      "--skip-if-locked", env=_env(tmp_path))
    assert refused.returncode == 3, refused.stderr
    assert "waiting up to 0.5 s" in refused.stderr  # not --quiet: the wait is announced
    assert f"(pid {os.getpid()}) after waiting 0.5 s; not starting" in refused.stderr
    assert skipped.returncode == 0, skipped.stderr
    assert skipped.stderr.strip().splitlines() == [
        f"nodegate health: skipped: another nodegate battery run holds {tmp_path / 'lock'} "
        f"(pid {os.getpid()}) after waiting 0.5 s; nothing checked, no report written "
        "(--skip-if-locked: exit 0, that run judges this node)"]
    assert not (tmp_path / "r").exists()  # nothing judged, nothing written
    assert bad.returncode == 2 and "unknown profile" in bad.stderr  # bad input is still 2


def test_lock_released_during_the_wait_runs_the_check(tmp_path: Path) -> None:
    """A run that finds the lock held and gets it within ``--lock-wait`` judges the board:
    a FAIL is still exit 1, ``--skip-if-locked`` or not."""
    argv = [sys.executable, "-m", "nodegate.cli", "sim", "run",
            "h100-hgx+nvlink-down@gpu3.link5", "--", "nodegate",
            *_health_args(tmp_path, "--checks", "gpu,log", "--lock-wait", "120",
                          "--skip-if-locked")]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}"
                                 f"{os.environ.get('PATH', '')}", **_env(tmp_path)}
    with BatteryLock(tmp_path / "lock"):
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env, cwd=ROOT)
        assert proc.stderr is not None
        seen: list[str] = []
        while not seen or "waiting up to 120 s" not in seen[-1]:
            line = proc.stderr.readline()  # the run announces its wait: release it then
            assert line, f"no wait announced: {seen}"
            seen.append(line)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    assert "skipped" not in err and "nodegate health: FAIL" in err
    assert json.loads((tmp_path / "r" / "quick-latest.json").read_text())["verdict"] == "FAIL"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--checks", "gpu,disk"], "unknown check group disk"),
        (["--xid-window", "soon"], "bad duration"),
        (["--lock-wait", "nan"], "argument --lock-wait: 'nan' must be a finite number"),
        (["--lock-wait", "-1"], "argument --lock-wait: '-1' must be within [0, 3600]"),
    ],
)
def test_bad_arguments_exit_2(tmp_path: Path, args: list[str], words: str) -> None:
    result = run_cli(*_health_args(tmp_path, *args), env=_env(tmp_path))
    assert result.returncode == 2
    assert words in result.stderr and "Traceback" not in result.stderr


def test_bad_profile_exits_2(tmp_path: Path) -> None:
    result = run_cli("health", "--profile", "xe9999-h900", "--report-dir", str(tmp_path),
                     env=_env(tmp_path))
    assert result.returncode == 2
    assert "unknown profile 'xe9999-h900'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.skipif(ctypes.util.find_library("nvidia-ml") is not None,
                    reason="this machine has a real libnvidia-ml")
def test_no_nvml_is_a_result_not_exit_3(tmp_path: Path) -> None:
    """NVML down: a node without NVML is unhealthy (exit 1, a report the gate drains on);
    exit 3 would leave the previous PASS in force."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NODEGATE_SIM")}
    env.pop("LD_LIBRARY_PATH", None)
    env.update(_env(tmp_path))
    proc = subprocess.run([sys.executable, "-m", "nodegate.cli", *_health_args(tmp_path)],
                          capture_output=True, text=True, env=env, cwd=ROOT, check=False,
                          timeout=60)
    assert proc.returncode == 1, proc.stderr
    report = json.loads((tmp_path / "r" / "quick-latest.json").read_text())
    down = [r for r in report["results"] if r["check"] == "gpu_reachable"]
    assert [(r["entity"], r["verdict"]) for r in down] == [("node", "ERROR")]
    assert "cannot initialise NVML" in down[0]["evidence"]["reason"]


def test_pytest_battery_reads_like_the_issue(tmp_path: Path) -> None:
    result = run_cli(
        "sim", "run", "h100-hgx+nvlink-down@gpu3.link5", "--", sys.executable, "-m", "pytest",
        str(ROOT / "validation"), "-q", "-p", "no:cacheprovider",
        "--nodegate-profile", "xe9680-h100", "--nodegate-checks", "gpu,log",
        "--nodegate-report-dir", str(tmp_path), env=_env(tmp_path), timeout=300)
    assert result.returncode == 1, result.stdout[-2000:]
    assert "FAILED validation/gpu/test_nvlink.py::test_nvlink_state" in result.stdout
    assert "nvlink_state[gpu3.link5]: FAIL measured='inactive'" in result.stdout
    # the two skips: page retirement does not exist on Hopper (row remapping replaced it), and
    # the H100 layer declares no NVML recovery action (gpu_recovery_action judges none there)
    assert "\n1 failed, 31 passed, 2 skipped" in result.stdout and " error" not in result.stdout
    report = json.loads((tmp_path / "battery-quick.json").read_text())
    assert report["verdict"] == "FAIL"


@pytest.mark.torch
def test_load_phases_do_not_collide_with_a_foreign_process(tmp_path: Path) -> None:
    result = run_cli("sim", "run", "h100-hgx+foreign-process@gpu3", "--", "nodegate",
                     "validate", "--level", "standard", "--profile", "sim-h100-hgx",
                     "--checks", "gpu,load", "--report-dir", str(tmp_path / "r"),
                     "--no-textfile", env=_env(tmp_path))
    assert result.returncode == 1, result.stderr
    report = json.loads((tmp_path / "r" / "standard-latest.json").read_text())
    flagged = {(r["check"], r["verdict"]) for r in report["results"] if r["verdict"] != "PASS"}
    assert flagged == {("foreign_processes", "WARN"), ("gemm_completed", "ERROR"),
                       ("memory_completed", "ERROR"), ("p2p_completed", "ERROR"),
                       ("allreduce_completed", "ERROR"), ("collectives_completed", "ERROR"),
                       ("retired_pages", "SKIP"),  # Hopper: row remapping instead
                       # the storage checks this profile does not ask for (nvme.fio, dcgm)
                       ("nvme_seq_read", "SKIP"), ("nvme_seq_write", "SKIP"),
                       ("nvme_rand_read", "SKIP"), ("dcgm_diag", "SKIP")}
    assert not any(r["check"] == "gemm_tflops" for r in report["results"])  # nothing ran
