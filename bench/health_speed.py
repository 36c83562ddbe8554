"""Benchmark: ``nodegate health`` on the simulated 8-GPU H100 board, process start to exit.

Prints the median of repeated runs next to ``python -c pass`` on the same machine in the same
run (the floor any Python CLI pays). Target from issue 4: median <= 0.5 s on 2 cores.

    python bench/health_speed.py [--runs 15]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _time(argv: list[str], env: dict[str, str], runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        proc = subprocess.run(argv, env=env, capture_output=True, check=False)
        samples.append(time.perf_counter() - start)
        if proc.returncode not in (0, 1):
            sys.exit(f"{argv} failed ({proc.returncode}): {proc.stderr.decode()[-500:]}")
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--scenario", default="h100-hgx")
    parser.add_argument("--profile", default="xe9680-h100")
    args = parser.parse_args()

    from nodegate.sim.build import ensure_built
    from nodegate.sim.runtime import prepare

    ensure_built()
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "sim"
        state.mkdir()
        env = {**os.environ, **prepare(args.scenario, state),
               "NODEGATE_LOCK_FILE": f"{tmp}/lock"}
        health = [sys.executable, "-m", "nodegate.cli", "health", "--profile", args.profile,
                  "--checks", "gpu,log", "--report-dir", f"{tmp}/reports",
                  "--textfile-dir", f"{tmp}/textfile", "--quiet"]
        _time(health, env, 2)  # warm the page cache and the resolved-profile cache
        floor = _time([sys.executable, "-c", "pass"], env, args.runs)
        samples = _time(health, env, args.runs)
        results = len(Path(f"{tmp}/reports/quick-latest.json").read_text().split('"check"')) - 1

    print(f"machine: {platform.machine()}, {os.cpu_count()} cpus, "
          f"Python {platform.python_version()}")
    print(f"scenario {args.scenario}, profile {args.profile}, {results} results per run, "
          f"{args.runs} runs each")
    print(f"{'command':<40} {'median s':>9} {'min s':>7} {'max s':>7}")
    for name, values in (("python -c pass", floor),
                         ("nodegate health --checks gpu,log", samples)):
        print(f"{name:<40} {statistics.median(values):>9.3f} {min(values):>7.3f} "
              f"{max(values):>7.3f}")
    print("target: nodegate health median <= 0.500 s (issue 4)")


if __name__ == "__main__":
    main()
