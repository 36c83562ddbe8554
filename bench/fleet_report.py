"""Benchmark: aggregate 10,000 node reports into the fleet view (target: at most 2 s).

    .venv/bin/python bench/fleet_report.py [--reports 10000] [--dir DIR] [--jobs N]
                                           [--repeat N] [--evict]

Reports are made with ``nodegate.report.build`` (through ``nodegate.fleet.synthetic``): 8-GPU
H100 standard runs, ~190 KB and ~400 results each, with telemetry series, the P2P matrix and
the fleet ``digest`` the writer embeds before ``results``; a few carry planted faults. To keep
generation itself quick, 40 distinct reports are built and each of the N files is one of them
under its own node name and report id (same length as the template's, so the file stays
byte-for-byte what the writer would have produced for that node).

Prints three figures per round: a cold run (empty summary cache: every file read), a warm run
(nothing changed: the per-file summary cache), and an incremental run (1 % of the files
rewritten, as after a cron round on part of the fleet). The 2 s target is for all three. The
files are in the OS page cache (they were just written or read); ``--evict`` also times a cold
run after asking the kernel to drop them from it (``posix_fadvise(DONTNEED)``, no root needed),
which is what a first run on a freshly copied or remounted directory costs. ``--dir`` with
reports written by an older nodegate (no digest) times the slow path.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import tempfile
import time
from pathlib import Path

from nodegate.fleet.aggregate import aggregate, summary_from_prefix
from nodegate.fleet.synthetic import synthetic_report
from nodegate.report import to_json

TEMPLATES = 40
VERSION = 4  # bump when the generated files change: a kept --dir is then regenerated


def node_name(index: int) -> str:
    return f"hgx{index:05d}"


def template_name(index: int) -> str:
    """As long as ``node_name``, unlike any text a report holds otherwise."""
    name = f"zqtpl{index:03d}"
    assert len(name) == len(node_name(0))
    return name


def generate(root: Path, count: int) -> None:
    marker = root / f".generated-{count}-v{VERSION}"
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
        report = synthetic_report(template_name(index), seed=index, faults=faults,
                                  started_at=start + dt.timedelta(minutes=index))
        texts.append((template_name(index), to_json(report)))
    for index in range(count):
        rack = root / f"rack{index // 100:03d}"
        rack.mkdir(parents=True, exist_ok=True)
        name, text = texts[index % TEMPLATES]
        node = node_name(index)
        (rack / f"{node}-standard.json").write_text(text.replace(name, node), encoding="utf-8")
    marker.touch()


def fast_path_share(root: Path, sample: int = 50) -> str:
    """How many of a sample of files the fast path (digest in the head) takes."""
    every = sorted(root.glob("rack*/*.json"))
    files = every[:: max(1, len(every) // sample)][:sample]
    hits = 0
    for path in files:
        data = path.read_bytes()
        hits += summary_from_prefix(data[:16384], len(data), path=path.name) is not None
    return f"{hits}/{len(files)}"


def evict(root: Path) -> None:
    """Ask the kernel to drop every report from the page cache (best effort)."""
    for path in root.glob("rack*/*.json"):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def timed(label: str, root: Path, cache: Path, jobs: int | None) -> tuple[float, float]:
    """Wall and CPU seconds (this process: user + system) of one ``aggregate``. CPU time is
    the figure that other work on the machine does not inflate (with a parser pool it leaves
    out the workers)."""
    t0 = time.perf_counter()
    c0 = time.process_time()
    view = aggregate(root, cache=cache, jobs=jobs)
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - c0
    outliers = sum(len(metric.outliers) for metric in view.metrics)
    print(f"{label:12s} {elapsed:6.2f} s (cpu {cpu:4.2f} s)  {view.n_reports} reports, "
          f"{len(view.nodes)} nodes, {view.parsed} parsed, {len(view.metrics)} metrics, "
          f"{outliers} outliers, verdicts {view.verdicts()}")
    return elapsed, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reports", type=int, default=10_000)
    parser.add_argument("--dir", type=Path, help="keep generated reports here (reused)")
    parser.add_argument("--jobs", type=int, help="parser processes for the cold run")
    parser.add_argument("--repeat", type=int, default=1, help="rounds (figures: min-max)")
    parser.add_argument("--evict", action="store_true",
                        help="also time a cold run with the files evicted from the page cache")
    args = parser.parse_args()
    root = args.dir or Path(tempfile.gettempdir()) / f"nodegate-bench-fleet-{args.reports}"
    t0 = time.perf_counter()
    generate(root, args.reports)
    print(f"reports in {root} ({time.perf_counter() - t0:.1f} s to generate or reuse); "
          f"fast path on {fast_path_share(root)} sampled files; {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f}")
    figures: dict[str, list[tuple[float, float]]] = {}
    for _ in range(max(1, args.repeat)):
        with tempfile.TemporaryDirectory() as tmp:
            cache = Path(tmp) / "fleet.marshal"
            if args.evict:
                evict(root)
                figures.setdefault("cold-disk", []).append(
                    timed("cold-disk", root, Path(tmp) / "other.marshal", args.jobs))
            figures.setdefault("cold", []).append(timed("cold", root, cache, args.jobs))
            figures.setdefault("warm", []).append(timed("warm", root, cache, args.jobs))
            for path in sorted(root.glob("rack*/*.json"))[::100]:
                os.utime(path)
            figures.setdefault("incremental", []).append(
                timed("incremental", root, cache, args.jobs))
    for label, runs in figures.items():
        walls = [wall for wall, _ in runs]
        cpus = [cpu for _, cpu in runs]
        print(f"{label:12s} {min(walls):.2f}-{max(walls):.2f} s wall, "
              f"{min(cpus):.2f}-{max(cpus):.2f} s cpu over {len(runs)} run(s)")
    worst = max(wall for label in ("cold", "warm", "incremental") for wall, _ in figures[label])
    verdict = "OK" if worst <= 2.0 else "OVER"
    print(f"aggregate {args.reports} reports: {worst:.2f} s worst (target 2 s: {verdict}); "
          f"load average now {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
