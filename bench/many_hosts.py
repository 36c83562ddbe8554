"""Benchmark: the control side's cost per host, 16 to 64 minimal SSH hosts.

For each size, ``nodegate_lab.manyhosts`` brings up that many hosts (sshd alone, one shared
read-only root, not timed), then ``pyinfra -y`` runs ``bench/many_hosts_deploy.py`` against
them twice: *cold* (no recorded fact questions: pyinfra asks them one by one) and *warm* (the
fact cache's recorded questions from the cold run: one batched read per host). Each run is
measured with ``os.wait4`` on the pyinfra process: wall seconds, user+system CPU seconds and
peak RSS. A run that exits non-zero, errs, or changes anything is a failure: its tail is
printed, no figure, exit 1. Afterwards the bench fits ``a + b*n`` by least squares and states
the extrapolation to 512 hosts.

    NODEGATE_LAB_INSTANCE=2 sudo -E .venv/bin/python bench/many_hosts.py [--sizes 16 32 64]
        [--deploy FILE]

Exit codes: 0 measured; 1 a run failed (no figure for it) or the harness left something
behind; 2 bad arguments; 3 cannot run (not root, a lab of that instance is up).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from nodegate.errors import NodegateError
from nodegate_lab import config, deploys
from nodegate_lab.manyhosts import MAX_HOSTS, ManyHosts

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "bench" / "many_hosts_deploy.py"
EXTRAPOLATE_TO = 512


class RunFailed(Exception):
    """A run that must not be reported as a figure."""


@dataclass(frozen=True)
class Measured:
    wall_s: float
    cpu_s: float
    max_rss_mb: float


def run_pyinfra(inventory: Path, env: dict[str, str], deploy: Path = DEPLOY,
                timeout_s: float = 900) -> Measured:
    """One ``pyinfra -y INVENTORY DEPLOY``; RunFailed unless it passed and changed nothing."""
    start = time.monotonic()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen([deploys.pyinfra_bin(), "-y", str(inventory), str(deploy)],
                                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        deadline = start + timeout_s
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.05)
        wall = time.monotonic() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        output = out.read().decode(errors="replace")
    run = deploys.DeployRun(proc.returncode, wall, usage.ru_utime + usage.ru_stime, output,
                            deploys.parse_totals(output))
    why = run.failure
    if why is None and run.totals is not None and run.totals.changed:
        why = f"{run.totals.changed} operation(s) changed something: not a no-op"
    if why:
        raise RunFailed(f"FAILED ({why}); no figure reported. Last lines of pyinfra's "
                        f"output:\n{run.tail()}")
    return Measured(wall, run.cpu_s, usage.ru_maxrss / 1024)


def fit(xs: list[int], ys: list[float]) -> tuple[float, float]:
    """Least-squares ``y = a + b*x``; (a, b)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    return my - b * mx, b


def measure(size: int, deploy: Path = DEPLOY) -> tuple[Measured, Measured]:
    """``size`` hosts up; the cold run, then the warm one; the hosts down again."""
    with ManyHosts(size) as hosts, tempfile.TemporaryDirectory(prefix="ng-many-") as tmp:
        inventory = Path(tmp) / "inventory.py"
        inventory.write_text(hosts.inventory_text())
        env = {**os.environ, "NODEGATE_FACT_READS_DIR": str(Path(tmp) / "fact-reads")}
        try:
            cold = run_pyinfra(inventory, env, deploy)
            warm = run_pyinfra(inventory, env, deploy)
        except RunFailed as exc:
            raise RunFailed(f"{size} hosts: {exc}") from None
    return cold, warm


def _print_table(rows: list[tuple[int, Measured, Measured]]) -> None:
    print(f"\n{time.strftime('%Y-%m-%d')}, {platform.machine()}, {os.cpu_count()} cpus, load "
          f"{os.getloadavg()[0]:.2f}; lab instance {config.INSTANCE}; pyinfra's wall, user+sys "
          "CPU and peak RSS (wait4)")
    print(f"{'hosts':>5} {'cold s':>7} {'CPU s':>6} {'CPU/host':>8} {'warm s':>7} {'CPU s':>6} "
          f"{'CPU/host':>8} {'RSS MB':>7}")
    for size, cold, warm in rows:
        print(f"{size:>5} {cold.wall_s:>7.1f} {cold.cpu_s:>6.1f} {cold.cpu_s / size:>8.3f} "
              f"{warm.wall_s:>7.1f} {warm.cpu_s:>6.1f} {warm.cpu_s / size:>8.3f} "
              f"{max(cold.max_rss_mb, warm.max_rss_mb):>7.0f}")
    if len(rows) >= 2:
        sizes = [r[0] for r in rows]
        print(f"\nleast-squares fit a + b*n, extrapolated to {EXTRAPOLATE_TO} hosts:")
        for label, values in (("cold CPU s", [r[1].cpu_s for r in rows]),
                              ("warm CPU s", [r[2].cpu_s for r in rows]),
                              ("cold wall s", [r[1].wall_s for r in rows]),
                              ("warm wall s", [r[2].wall_s for r in rows]),
                              ("peak RSS MB", [max(r[1].max_rss_mb, r[2].max_rss_mb)
                                               for r in rows])):
            a, b = fit(sizes, values)
            print(f"  {label:<12} {a:8.2f} + {b:7.4f}*n  -> {a + b * EXTRAPOLATE_TO:8.1f} "
                  f"at {EXTRAPOLATE_TO}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--deploy", type=Path, default=DEPLOY,
                        help="another deploy file (one that changes something shows the "
                        "failure path)")
    args = parser.parse_args(argv)
    if any(not 1 <= s <= MAX_HOSTS for s in args.sizes):
        print(f"--sizes must be 1..{MAX_HOSTS}", file=sys.stderr)
        return 2
    if not args.deploy.is_file():
        print(f"--deploy {args.deploy}: no such file", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("many_hosts: the hosts need root (namespaces, mounts)", file=sys.stderr)
        return 3
    rows: list[tuple[int, Measured, Measured]] = []
    for size in sorted(set(args.sizes)):
        try:
            cold, warm = measure(size, args.deploy.resolve())
        except RunFailed as exc:
            print(exc, flush=True)
            return 1
        except NodegateError as exc:
            print(f"many_hosts: cannot run: {exc}", file=sys.stderr)
            return 3
        rows.append((size, cold, warm))
        print(f"{size} hosts: cold {cold.wall_s:.1f} s wall, {cold.cpu_s:.1f} s CPU; warm "
              f"{warm.wall_s:.1f} s wall, {warm.cpu_s:.1f} s CPU", flush=True)
    left = ManyHosts(1).leftovers()
    if left:
        print(f"many_hosts: left behind: {', '.join(left)}", file=sys.stderr)
        return 1
    _print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
