"""Benchmark: the lab bring-up ``pyinfra -y inventory.py deploy.py`` at 1, 4 and 8 nodes,
first run (fresh nodes) and the no-op rerun: wall time and control-side CPU seconds.

Each size gets a fresh lab (``lab down``, ``lab up --nodes N``: not timed) and the README's
lab steps: the lab's site file as NODEGATE_SITE and its credentials (lab.env) in the
environment. CPU is ``getrusage(RUSAGE_CHILDREN)`` around each pyinfra run, per GPU node
(the controller is in the inventory too and gets no roles).

A run that failed is never timed: the bench prints what failed and the tail of pyinfra's
output, tears the lab down and exits 1; a rerun that changed anything but the gate's battery
run (an action on every run, roles/ops/gate.py) is not a no-op and fails the same way.
``--site FILE`` deploys with another site file (a broken one shows the failure path). Run as
root on an instance nobody else uses::

    NODEGATE_LAB_INSTANCE=5 sudo -E .venv/bin/python bench/deploy_time.py [--sizes 1 4 8]

Exit codes: 0 every size measured; 1 a deploy failed (no timing printed for it); 2 bad
arguments; 3 cannot run (not root, the default lab in use, the lab would not come up).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

from nodegate.errors import NodegateError
from nodegate_lab import config, deploys, lab, sitefile


class DeployFailed(Exception):
    """A run that must not be reported as a time."""


def _checked(what: str, run: deploys.DeployRun, *, noop: bool = False) -> deploys.DeployRun:
    why = run.failure
    changed = deploys.role_changes(run.output) if noop else {}
    if why is None and changed:
        why = (f"the rerun changed {sum(changed.values())} operation(s) besides the gate's "
               f"runs ({', '.join(sorted(changed))}): not a no-op")
    if why:
        raise DeployFailed(f"{what}: FAILED ({why}); no timing reported. Last lines of "
                           f"pyinfra's output:\n{run.tail()}")
    return run


def measure(size: int, site: Path | None) -> tuple[deploys.DeployRun, deploys.DeployRun]:
    """A fresh ``size``-node lab, then the first deploy and the rerun, both checked."""
    lab.down()
    lab.up(size)
    env = deploys.lab_env(site or sitefile.site_path())
    first = _checked(f"{size} node(s), first deploy", deploys.run_deploy(env))
    rerun = _checked(f"{size} node(s), rerun", deploys.run_deploy(env), noop=True)
    return first, rerun


def _row(size: int, first: deploys.DeployRun, rerun: deploys.DeployRun) -> str:
    return (f"{size:>5} {first.wall_s:>8.1f} {first.cpu_s:>7.1f} {first.cpu_s / size:>9.2f}"
            f" {rerun.wall_s:>8.1f} {rerun.cpu_s:>7.1f} {rerun.cpu_s / size:>9.2f}  "
            f"{rerun.totals}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--site", type=Path, help="deploy with this site file instead of "
                        "the lab's (a broken one shows the failure path)")
    args = parser.parse_args(argv)
    if any(not 1 <= s <= config.MAX_NODES for s in args.sizes):
        print(f"--sizes must be 1..{config.MAX_NODES}", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("deploy_time: the lab needs root", file=sys.stderr)
        return 3
    if config.INSTANCE == 0 and Path("/tmp/nodegate-lab-in-use").exists():
        print("deploy_time: the default lab is in use: run with NODEGATE_LAB_INSTANCE=N",
              file=sys.stderr)
        return 3
    rows = []
    try:
        for size in args.sizes:
            first, rerun = measure(size, args.site.resolve() if args.site else None)
            rows.append(_row(size, first, rerun))
            print(f"{size} node(s): first {first.wall_s:.1f} s wall, {first.cpu_s:.1f} s CPU; "
                  f"rerun {rerun.wall_s:.1f} s wall, {rerun.cpu_s:.1f} s CPU [{rerun.totals}]",
                  flush=True)
    except DeployFailed as exc:
        print(exc, flush=True)
        return 1
    except NodegateError as exc:
        print(f"deploy_time: the lab would not come up: {exc}", file=sys.stderr)
        return 3
    finally:
        left = lab.down()
        if left:
            print(f"deploy_time: lab down left {left}", file=sys.stderr)
    print(f"\n{time.strftime('%Y-%m-%d')}, {platform.machine()}, {os.cpu_count()} cpus, load "
          f"{os.getloadavg()[0]:.2f}; lab instance {config.INSTANCE}; CPU = pyinfra's user+sys "
          "(RUSAGE_CHILDREN), per GPU node")
    print(f"{'nodes':>5} {'first s':>8} {'CPU s':>7} {'CPU/node':>9} {'rerun s':>8} "
          f"{'CPU s':>7} {'CPU/node':>9}  rerun")
    for row in rows:
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
