"""The bring-up as an operator runs it on the lab, measured: ``pyinfra -y inventory.py
deploy.py`` with the lab's site file and credentials (docs/lab.md), timed in wall seconds and
control-side CPU seconds.

CPU is ``getrusage(RUSAGE_CHILDREN)`` before and after the run: pyinfra and its SSH
connections (paramiko, in-process) are the child, so the delta is what the bastion spent.
The bench and the 8-node lab test share this, so neither can time or pass a failed run.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
_TOTAL = re.compile(r"Grand total\s+(\d+)\s+(\S+)\s+(\S+)\s+(\S+)")
#: A row of pyinfra's results table: operation, hosts, success, error, no change.
_ROW = re.compile(r"^\s*(?P<name>\S.*?)\s+\d+\s+(?P<changed>\d+|-)\s+(?:\d+|-)\s+(?:\d+|-)\s*$",
                  re.M)
#: The gate operations that act on every run by design (roles/ops/gate.py: the battery and the
#: all-reduce are commands an operation runs, not reads), so a converged node's rerun still
#: counts them; the join counts only when the Slurm state changes.
GATE_RUNS = re.compile(r"(^|\| )gate: (nodegate (health|validate)|multinode)")


@dataclass(frozen=True)
class Totals:
    """pyinfra's ``Grand total`` row, counted in host-operations (one operation on one host):
    all, success (= ran commands: a change), error and no change."""

    host_ops: int
    changed: int
    errors: int
    unchanged: int

    def __str__(self) -> str:
        return (f"{self.host_ops} host-ops: {self.changed} changed, {self.errors} error, "
                f"{self.unchanged} no change")


def parse_totals(output: str) -> Totals | None:
    """The ``Grand total`` row of a pyinfra run ("-" counts 0), None when it has none."""
    found = _TOTAL.findall(output)
    if not found:
        return None
    ops, *rest = found[-1]
    changed, errors, unchanged = (0 if v == "-" else int(v) for v in rest)
    return Totals(int(ops), changed, errors, unchanged)


def changed_operations(output: str) -> dict[str, int]:
    """Operation -> the hosts it changed something on, from the last results table."""
    table = output.rsplit("--> Results:", maxsplit=1)[-1]
    return {m["name"]: int(m["changed"]) for m in _ROW.finditer(table)
            if m["name"] != "Grand total" and m["changed"] != "-"}


def role_changes(output: str) -> dict[str, int]:
    """``changed_operations`` less the gate's runs (``GATE_RUNS``): what a no-op rerun must
    leave empty."""
    return {name: count for name, count in changed_operations(output).items()
            if not GATE_RUNS.search(name)}


@dataclass(frozen=True)
class DeployRun:
    returncode: int
    wall_s: float
    cpu_s: float  # user + system of pyinfra (and anything it waited for)
    output: str
    totals: Totals | None

    @property
    def failure(self) -> str | None:
        """Why this run must not be reported as a timing, or None when it passed."""
        if self.returncode != 0:
            return f"pyinfra exited {self.returncode}"
        if self.totals is None:
            return "pyinfra printed no Grand total (the run did not reach its summary)"
        if self.totals.errors:
            return f"{self.totals.errors} operation(s) in error"
        return None

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.output.rstrip().splitlines()[-lines:])


def lab_env(site: Path) -> dict[str, str]:
    """This environment plus ``NODEGATE_SITE`` and the lab's credentials (``set -a; .
    lab.env``): pdu_monitor refuses every host without them."""
    from nodegate_lab import services

    return {**os.environ, "NODEGATE_SITE": str(site), **services.lab_secrets()}


def pyinfra_bin() -> str:
    """The pyinfra beside this interpreter (the project's venv)."""
    return str(Path(sys.executable).parent / "pyinfra")


def run_deploy(env: dict[str, str], *args: str, timeout_s: float = 1800,
               root: Path = ROOT, deploy: str = "deploy.py") -> DeployRun:
    """``pyinfra -y inventory.py DEPLOY ARGS`` in the checkout, measured."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    try:
        proc = subprocess.run([pyinfra_bin(), "-y", "inventory.py", deploy, *args],
                              cwd=root, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=timeout_s,
                              check=False)
        code, output = proc.returncode, proc.stdout
    except subprocess.TimeoutExpired as exc:
        raw = exc.stdout or b""
        code = 124
        output = (raw.decode(errors="replace") if isinstance(raw, bytes) else raw) + \
            f"\n(killed after {timeout_s:.0f} s)"
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return DeployRun(code, wall, cpu, output, parse_totals(output))
