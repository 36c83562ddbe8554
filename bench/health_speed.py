"""Benchmark: ``nodegate health --checks gpu,log`` against a plain pynvml read of the same
fields, on the simulated 8-GPU H100 board, process start to exit.

The plain read is ``bench/plain_nvml_read.py``: the same NVML calls (checked here before any
timing: both are traced once and must call the same functions as often) and the same kernel
log, no nodegate. Both run in the simulator's environment (what ``nodegate sim run`` sets),
alternately in one loop so load on shared cores falls on both alike, each from a bytecode
cache as an installed package runs (``PYTHONPYCACHEPREFIX`` in a temporary folder).
Every run's exit status is checked: a failed run prints no figure and the bench exits 1.
Target: nodegate's median <= 2.5x the plain read's. Beside wall time, each command's CPU
time (user + system, its forked children included) is printed: on shared cores the wall
clock mostly measures the other work, CPU time what the command itself costs.

    python bench/health_speed.py [--runs 21]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_RATIO = 2.5
BENCH = Path(__file__).resolve().parent

#: Run in the simulator's environment: count the NVML functions nodegate's board read for
#: gpu,log and the plain script call (module functions wrapped before either runs).
_TRACE = """
import collections, json, sys
import pynvml
sys.path.insert(0, sys.argv[1])
import plain_nvml_read
from nodegate.probes.nvml import read_board
calls = collections.Counter()
def wrap(name, fn):
    def traced(*args, **kwargs):
        calls[name] += 1
        return fn(*args, **kwargs)
    return traced
for name in dir(pynvml):
    if name.startswith("nvml") and callable(getattr(pynvml, name)):
        setattr(pynvml, name, wrap(name, getattr(pynvml, name)))
read_board(with_nvlink_counters=True)
nodegate = dict(calls)
calls.clear()
plain_nvml_read.read_all(pynvml)
print(json.dumps({"nodegate": nodegate, "plain": dict(calls)}))
"""


class RunFailed(Exception):
    """A timed or traced command did not end as expected: no figure may be printed."""


def _cpu() -> float:
    """CPU seconds of every child this process has waited for (and theirs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(argv: list[str], env: dict[str, str], expect: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run of ``argv``."""
    cpu = _cpu()
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != expect:
        tail = (proc.stderr or proc.stdout).decode(errors="replace")[-800:]
        raise RunFailed(f"{' '.join(argv)} exited {proc.returncode} (expected {expect}):\n"
                        f"{tail}")
    return elapsed, _cpu() - cpu


def _same_calls(env: dict[str, str]) -> int:
    """Both sides make the same NVML calls; returns how many."""
    proc = subprocess.run([sys.executable, "-c", _TRACE, str(BENCH)], env=env,
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RunFailed(f"tracing the NVML calls failed ({proc.returncode}):\n"
                        f"{proc.stderr[-800:]}")
    traced = json.loads(proc.stdout)
    if traced["nodegate"] != traced["plain"]:
        names = sorted(set(traced["nodegate"]) | set(traced["plain"]))
        diff = [f"{n}: nodegate {traced['nodegate'].get(n, 0)}, plain {traced['plain'].get(n, 0)}"
                for n in names if traced["nodegate"].get(n) != traced["plain"].get(n)]
        raise RunFailed("the plain read does not make nodegate's NVML calls:\n"
                        + "\n".join(diff))
    return sum(traced["plain"].values())


def _row(name: str, values: list[tuple[float, float]]) -> str:
    wall, cpu = [w for w, _ in values], [c for _, c in values]
    return (f"{name:<36} {statistics.median(wall):>9.3f} {min(wall):>7.3f} "
            f"{max(wall):>7.3f} {statistics.median(cpu):>10.3f}")


def _load() -> str:
    return ", ".join(f"{value:.2f}" for value in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=21, help="timed runs of each (default 21)")
    parser.add_argument("--scenario", default="h100-hgx")
    parser.add_argument("--profile", default="xe9680-h100")
    parser.add_argument("--expect-exit", type=int, default=0,
                        help="nodegate health's exit status on this scenario (default 0)")
    args = parser.parse_args()

    from nodegate.sim.runtime import prepare

    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "sim"
        state.mkdir()
        env = {key: value for key, value in os.environ.items()
               if key != "PYTHONDONTWRITEBYTECODE"}
        env.update(prepare(args.scenario, state), NODEGATE_LOCK_FILE=f"{tmp}/lock",
                   PYTHONPYCACHEPREFIX=f"{tmp}/pycache")
        health = [sys.executable, "-m", "nodegate", "health", "--profile", args.profile,
                  "--checks", "gpu,log", "--report-dir", f"{tmp}/reports",
                  "--textfile-dir", f"{tmp}/textfile", "--quiet"]
        plain = [sys.executable, str(BENCH / "plain_nvml_read.py")]
        floor = [sys.executable, "-c", "pass"]
        load_before = _load()
        try:
            calls = _same_calls(env)
            for _ in range(2):  # warm the page and bytecode caches, the resolved profile
                _run(health, env, args.expect_exit)
                _run(plain, env, 0)
            samples: dict[str, list[tuple[float, float]]] = {"health": [], "plain": [],
                                                             "floor": []}
            for _ in range(args.runs):  # alternately: shared cores load both alike
                samples["health"].append(_run(health, env, args.expect_exit))
                samples["plain"].append(_run(plain, env, 0))
                samples["floor"].append(_run(floor, env, 0))
        except RunFailed as exc:
            print(f"FAILED: {exc}\nno figure reported", file=sys.stderr)
            return 1
        report = json.loads(Path(f"{tmp}/reports/quick-latest.json").read_text())

    def median(name: str, which: int) -> float:
        return statistics.median(sample[which] for sample in samples[name])

    ratio = median("health", 0) / median("plain", 0)
    cpu_ratio = median("health", 1) / median("plain", 1)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}; load average {load_before} before, "
          f"{_load()} after (1, 5, 15 min)")
    print(f"scenario {args.scenario}, profile {args.profile}: {len(report['results'])} "
          f"results, {calls} NVML calls on both sides; {args.runs} runs each, alternating")
    print(f"{'command':<36} {'median s':>9} {'min s':>7} {'max s':>7} {'median CPU':>10}")
    print(_row("nodegate health --checks gpu,log", samples["health"]))
    print(_row("plain pynvml read, same fields", samples["plain"]))
    print(_row("python -c pass", samples["floor"]))
    verdict = "met" if ratio <= TARGET_RATIO else "MISSED"
    print(f"ratio nodegate / plain read: {ratio:.2f}x (target <= {TARGET_RATIO}x: {verdict}); "
          f"CPU time {cpu_ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
