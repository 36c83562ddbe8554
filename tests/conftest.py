"""Shared test helpers: paths into the checkout and a runner for the real CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import parallel

ROOT = Path(__file__).resolve().parent.parent

# The suite's own labs are instance 3 (10.77.10.0/24, /var/lib/nodegate-lab3, its own site file
# and lab.env), and under xdist one instance per worker (tests/parallel.py): a lab someone
# brought up by hand or with `make demo` (instance 0) is never touched, skipped around or torn
# down, so `make demo; make test` works in either order. Set before any test imports
# nodegate_lab.config, which reads it once.
parallel.set_lab_instance()
# pyinfra runs in tests keep their hosts' fact lists (nodegate.fact_cache) apart from an
# operator's ~/.cache, and every suite run starts without one
os.environ.setdefault("NODEGATE_FACT_READS_DIR", tempfile.mkdtemp(prefix="nodegate-fact-reads-"))
# the holds record (nodegate.cluster.holds) of every gate, budget and remediation a test runs:
# never the machine's own /var/lib/nodegate/holds
os.environ.setdefault("NODEGATE_HOLDS_DIR", tempfile.mkdtemp(prefix="nodegate-holds-"))


#: Every default path of the local process, pointed into a per-test folder by
#: ``_own_paths`` (the variable -> the folder or file name below the test's folder). Lab tests
#: still talk about /run/nodegate.lock *inside* their hosts: only this process's defaults
#: (and its children's, through the environment) are redirected.
OWN_PATHS = {
    "NODEGATE_LOCK_FILE": "run/nodegate.lock",
    "NODEGATE_REPORT_DIR": "var/lib/nodegate/reports",
    "NODEGATE_TEXTFILE_DIR": "var/lib/node_exporter/textfile_collector",
    "NODEGATE_CONFIG_DIR": "etc/nodegate",
    "NODEGATE_REMEDIATION_DIR": "var/lib/nodegate/remediation",
}
# NODEGATE_CACHE_DIR stays: it holds the built simulator library and the lab's base image,
# which every test shares (and which are the suite's own, not the machine's files)
#: The machine's own files no test may open (``_MachineFiles``).
MACHINE_PATHS = ("/run/nodegate.lock", "/etc/nodegate", "/var/lib/nodegate",
                 "/var/lib/node_exporter/textfile_collector")


class _MachineFiles:
    """An audit hook (``sys.addaudithook``) noting every open of the machine's own nodegate
    files by this process; ``_own_paths`` fails the test that did it."""

    def __init__(self) -> None:
        self.opened: list[str] = []

    def __call__(self, event: str, args: tuple[Any, ...]) -> None:
        if event != "open" or not args or not isinstance(args[0], (str, bytes, Path)):
            return
        path = os.fsdecode(args[0]) if not isinstance(args[0], Path) else str(args[0])
        if path.startswith(MACHINE_PATHS) and (
                path in MACHINE_PATHS or path.startswith(tuple(f"{p}/" for p in MACHINE_PATHS))):
            self.opened.append(path)


MACHINE_FILES = _MachineFiles()
sys.addaudithook(MACHINE_FILES)
# module- and session-scoped fixtures run before ``_own_paths``: they get a folder of the
# session's own (set once, at import, as NODEGATE_FACT_READS_DIR is)
_SESSION_PATHS = Path(tempfile.mkdtemp(prefix="nodegate-own-paths-"))
for _name, _below in OWN_PATHS.items():
    os.environ.setdefault(_name, str(_SESSION_PATHS / _below))


@pytest.fixture(autouse=True)
def _own_paths(tmp_path_factory: pytest.TempPathFactory,
               monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every test runs with the local defaults (battery lock, report and textfile folders,
    /etc/nodegate, caches, remediation state) in a folder of its own: the suite passes on a
    node in service, whose own nodegate run holds /run/nodegate.lock, and never writes its
    reports. A test that opens one of the machine's files in this process fails."""
    base = tmp_path_factory.mktemp("own-paths")
    for name, below in OWN_PATHS.items():
        monkeypatch.setenv(name, str(base / below))
    before = len(MACHINE_FILES.opened)
    yield base
    touched = MACHINE_FILES.opened[before:]
    del MACHINE_FILES.opened[before:]
    assert not touched, f"the test opened the machine's own nodegate files: {touched[:5]}"


def run_cli(*args: str, env: dict[str, str] | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``nodegate ARGS`` in a fresh interpreter, as an operator would."""
    bin_dir = str(Path(sys.executable).parent)
    full_env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
                **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "nodegate.cli", *args],
        capture_output=True, text=True, env=full_env, timeout=timeout, check=False, cwd=ROOT,
    )


@pytest.fixture
def root() -> Path:
    return ROOT


def _register_fuzz_profiles() -> None:
    """Hypothesis budgets: a fixed, small one in `make test` (derandomized, so CI is
    repeatable), a long random one behind `make fuzz` (NODEGATE_FUZZ=long)."""
    try:
        from hypothesis import HealthCheck, settings
    except ImportError:  # the dev extra is not installed: the fuzz tests skip themselves
        return
    quiet = [HealthCheck.too_slow, HealthCheck.data_too_large,
             HealthCheck.function_scoped_fixture]
    settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True,
                              suppress_health_check=quiet, print_blob=True)
    settings.register_profile("long", max_examples=3000, deadline=None,
                              suppress_health_check=quiet, print_blob=True)
    settings.load_profile("long" if os.environ.get("NODEGATE_FUZZ") == "long" else "ci")


_register_fuzz_profiles()


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup``: whole files and lab groups per worker (tests/parallel.py)."""
    return parallel.make_scheduler(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist the slow tests go out longest group first (tests/parallel.py)."""
    if parallel.worker_index() is not None:
        parallel.order_slow(items, str(ROOT))


_TIMELINE = parallel.Timeline()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """On the xdist controller: note each test's span on its worker (tests/parallel.py)."""
    worker = getattr(getattr(report, "node", None), "gateway", None)
    if worker is not None and report.start:
        _TIMELINE.add(str(worker.id), report.nodeid, report.start, report.stop)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The workers' timeline, after an xdist run (where the time went, for CI logs)."""
    lines = _TIMELINE.lines()
    if lines:
        terminalreporter.write_sep("=", "where each worker's time went (tests/parallel.py)")
        for line in lines:
            terminalreporter.write_line(line)
