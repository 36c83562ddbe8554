"""Benchmark: aggregate 10,000 node reports into the fleet view (target: at most 2 s).

    .venv/bin/python bench/fleet_report.py [--reports 10000] [--dir DIR] [--jobs N]

Reports are made with ``nodegate.report.build`` (through ``nodegate.fleet.synthetic``): 8-GPU
H100 standard runs, ~190 KB and ~400 results each, with telemetry series and the P2P matrix;
a few carry planted faults. To keep generation itself quick, 40 distinct reports are built and
each of the N files is one of them under its own node name and report id.

Prints three figures: a cold run (empty cache: every file parsed), a warm run (nothing
changed: the per-file summary cache), and an incremental run (1 % of the files rewritten, as
after a cron round on part of the fleet). The 2 s target is for the warm and incremental runs;
the cold figure is what a first run on a new directory costs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import tempfile
import time
from pathlib import Path

from nodegate.fleet.aggregate import aggregate
from nodegate.fleet.synthetic import synthetic_report
from nodegate.report import to_json

TEMPLATES = 40
PLACEHOLDER = "zzbenchnodezz"


def generate(root: Path, count: int) -> None:
    marker = root / f".generated-{count}"
    if marker.exists():
        return
    start = dt.datetime(2024, 5, 14, 3, 0, tzinfo=dt.timezone.utc)
    texts = []
    for index in range(TEMPLATES):
        faults = []
        if index == 3:
            faults = ["nvlink-down@gpu3.link5"]
        elif index == 7:
            faults = ["slow-gpu@gpu2"]
        elif index == 11:
            faults = ["hot-gpu@gpu5"]
        report = synthetic_report(f"{PLACEHOLDER}{index:02d}", seed=index, faults=faults,
                                  started_at=start + dt.timedelta(minutes=index))
        texts.append((f"{PLACEHOLDER}{index:02d}", to_json(report)))
    for index in range(count):
        rack = root / f"rack{index // 100:03d}"
        rack.mkdir(parents=True, exist_ok=True)
        name, text = texts[index % TEMPLATES]
        node = f"hgx{index:05d}"
        (rack / f"{node}-standard.json").write_text(text.replace(name, node))
    marker.touch()


def timed(label: str, root: Path, cache: Path, jobs: int | None) -> float:
    t0 = time.perf_counter()
    view = aggregate(root, cache=cache, jobs=jobs)
    elapsed = time.perf_counter() - t0
    outliers = sum(len(metric.outliers) for metric in view.metrics)
    print(f"{label:12s} {elapsed:6.2f} s  {view.n_reports} reports, {len(view.nodes)} nodes, "
          f"{view.parsed} parsed, {len(view.metrics)} metrics, {outliers} outliers, "
          f"verdicts {view.verdicts()}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reports", type=int, default=10_000)
    parser.add_argument("--dir", type=Path, help="keep generated reports here (reused)")
    parser.add_argument("--jobs", type=int, help="parser processes for the cold run")
    args = parser.parse_args()
    root = args.dir or Path(tempfile.gettempdir()) / f"nodegate-bench-fleet-{args.reports}"
    t0 = time.perf_counter()
    generate(root, args.reports)
    print(f"reports in {root} ({time.perf_counter() - t0:.1f} s to generate or reuse)")
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "fleet.marshal"
        timed("cold", root, cache, args.jobs)
        warm = timed("warm", root, cache, args.jobs)
        touched = sorted(root.glob("rack*/*.json"))[:: 100]
        for path in touched:
            os.utime(path)
        incremental = timed("incremental", root, cache, args.jobs)
    worst = max(warm, incremental)
    verdict = "OK" if worst <= 2.0 else "OVER"
    print(f"aggregate {args.reports} reports: {worst:.2f} s (target 2 s: {verdict})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
