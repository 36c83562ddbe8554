"""Benchmark: wall time of ``nodegate-lab up --nodes 4`` with a cached base (target <= 30 s).

Builds the base first if it is missing (not timed), starts from a lab that is down, times a
cold ``up`` (boot to SSH on every host) and an idempotent second ``up``, then takes it down.
Run as root: ``sudo .venv/bin/python bench/lab_up.py [--nodes 4]`` (it takes the lab down
first: beside a lab someone uses, run it with ``NODEGATE_LAB_INSTANCE=1``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from nodegate_lab import base, config, lab


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=4)
    args = parser.parse_args()
    lab.require_root()
    if config.INSTANCE == 0 and Path("/tmp/nodegate-lab-in-use").exists():
        print("lab in use (/tmp/nodegate-lab-in-use): run with NODEGATE_LAB_INSTANCE=1",
              file=sys.stderr)
        return 3
    base.build()
    lab.down()
    t0 = time.monotonic()
    lab.up(args.nodes)
    cold = time.monotonic() - t0
    t1 = time.monotonic()
    lab.up(args.nodes)
    again = time.monotonic() - t1
    t2 = time.monotonic()
    left = lab.down()
    gone = time.monotonic() - t2
    print(f"lab up --nodes {args.nodes} (cached base, cold boot): {cold:.1f} s (target <= 30 s)")
    print(f"lab up again (idempotent, nothing to do): {again:.1f} s")
    print(f"lab down: {gone:.1f} s, left behind: {left or 'nothing'}")
    return 0 if cold <= 30 and not left else 1


if __name__ == "__main__":
    sys.exit(main())
