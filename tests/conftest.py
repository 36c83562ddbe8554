"""Shared test helpers: paths into the checkout and a runner for the real CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
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
