"""Benchmark: ``pyinfra -y inventory.py deploy.py`` wall time on 1, 4 and 8 lab nodes,
first run (fresh nodes) and the no-op rerun, printed as a table.

Each size gets a fresh lab (``lab down`` then ``lab up --nodes N``, not timed). Run as root,
beside a lab someone uses on another instance: ``NODEGATE_LAB_INSTANCE=1 sudo .venv/bin/python
bench/deploy_time.py [--sizes 1 4 8]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from nodegate.lab import config, lab, sitefile  # noqa: E402


def _deploy(site: Path) -> tuple[float, int, str]:
    env = {**os.environ, "NODEGATE_SITE": str(site)}
    pyinfra = str(Path(sys.executable).parent / "pyinfra")
    start = time.monotonic()
    proc = subprocess.run([pyinfra, "-y", "inventory.py", "deploy.py"], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - start
    total = next((line for line in (proc.stdout + proc.stderr).splitlines()
                  if "Grand total" in line), "")
    return elapsed, proc.returncode, " ".join(total.split()[2:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 8])
    args = parser.parse_args()
    lab.require_root()
    if config.INSTANCE == 0 and Path("/tmp/nodegate-lab-in-use").exists():
        print("lab in use: run with NODEGATE_LAB_INSTANCE=1", file=sys.stderr)
        return 3
    rows = []
    for size in args.sizes:
        lab.down()
        lab.up(size)
        site = sitefile.site_path()
        first = _deploy(site)
        rerun = _deploy(site)
        rows.append((size, first, rerun))
        print(f"{size} nodes: first {first[0]:.1f} s (exit {first[1]}), "
              f"rerun {rerun[0]:.1f} s (exit {rerun[1]}) [{rerun[2]}]", flush=True)
    lab.down()
    print(f"\nmachine: {platform.machine()}, {os.cpu_count()} cpus; lab instance "
          f"{config.INSTANCE}; ops: total / success / error / no change")
    print(f"{'nodes':>5} {'first s':>8} {'rerun s':>8}  rerun ops")
    for size, first, rerun in rows:
        print(f"{size:>5} {first[0]:>8.1f} {rerun[0]:>8.1f}  {rerun[2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
