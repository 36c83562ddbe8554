"""Benchmark: the fleet ledger's ingest rate, the fleet view from it and one card's lifetime.

    .venv/bin/python bench/ledger.py [--nodes 2000] [--history 1] [--level standard]
                                     [--dir DIR] [--db PATH|URL] [--batch 500] [--lookups 20]

Reports are ``nodegate_lab.synthetic_fleet`` reports (8-GPU H100; ``standard``: ~190 KB and
~410 results with series and the P2P matrix, as bench/fleet_report.py; ``quick``: ~80 KB and
~340 results, what the cron check writes). To keep generation quick, 40 distinct reports are
built and each file is one of them under its own node name, its own 8 card serials and, for
``--history N``, its own day (every date in it moved, report id included): each file is a
distinct report with distinct cards, parsed in full by the ledger's ingest as any other.
Each has its fleet summary beside it, as a node writes it (same lengths replaced, so its
``report_bytes`` holds): a second ingest skips the reports it holds by their summaries.

Prints: the ingest (reports/s, wall and CPU), a second ingest of the same folder (all
"already there"), ``nodegate report --db``'s view built from the ledger (fleet items, view
and trends, as the command does, the garbage collector paused as there, not printed), and
``--lookups`` card lifetimes (``ledger gpu``), median and worst. Exit 1 when the counts are
not the expected ones (a figure from a wrong run is no figure).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

from nodegate import collector
from nodegate.fleet.aggregate import build_view
from nodegate.fleet.read import History
from nodegate.fleet.trend_metrics import has_trend
from nodegate.fleet.trends import trends
from nodegate.ledger.engine import Ledger, open_ledger
from nodegate.ledger.ingest import ingest
from nodegate.ledger.queries import fleet_items, gpu_lifetime
from nodegate.report import fleet_summary
from nodegate.report.model import dumps
from nodegate_lab.synthetic_fleet import synthetic_gpus, synthetic_report

TEMPLATES = 40
START = dt.datetime(2024, 5, 14, 3, 0, tzinfo=dt.timezone.utc)


def node_name(index: int) -> str:
    return f"hgx{index:05d}"


def template_name(index: int) -> str:
    return f"zqtpl{index:03d}"


def serial(node: int, slot: int) -> str:
    return f"17{node:08d}{slot:03d}"  # 13 digits, as the templates' (16549 + 8 digits)


def generate(root: Path, nodes: int, history: int, level: str) -> int:
    marker = root / f".generated-{nodes}-{history}-{level}-v2"
    if marker.exists():
        return nodes * history
    texts = []
    for index in range(TEMPLATES):
        faults = ["nvlink-down@gpu3.link5"] if index == 3 else []
        report = synthetic_report(template_name(index), level=level, seed=index,
                                  faults=faults, started_at=START, samples=10)
        serials = [synthetic_gpus(template_name(index))[f"gpu{k}"]["serial"] for k in range(8)]
        data = report.to_dict()
        text = dumps(data)
        texts.append((template_name(index), text, fleet_summary.text_for(data, text), serials))
    for index in range(nodes):
        name, text, summary, serials = texts[index % TEMPLATES]
        node = node_name(index)
        body, beside = text.replace(name, node), summary.replace(name, node)
        for slot, old in enumerate(serials):  # same lengths: the summary's report_bytes holds
            body = body.replace(old, serial(index, slot))
            beside = beside.replace(old, serial(index, slot))
        rack = root / f"rack{index // 100:03d}" / node
        rack.mkdir(parents=True, exist_ok=True)
        for day in range(history):
            moved = START + dt.timedelta(days=day)
            for text_, name_ in ((body, f"{level}-{day:04d}.json"),
                                 (beside, f"{level}-{day:04d}.summary.json")):
                out = text_.replace("2024-05-14", moved.strftime("%Y-%m-%d")).replace(
                    "20240514T", moved.strftime("%Y%m%dT"))
                (rack / name_).write_text(out, encoding="utf-8")
    marker.touch()
    return nodes * history


def cpu() -> float:
    """This process's and its finished children's (the ingest's parsers) CPU seconds."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def view_and_lookups(ledger: Ledger, nodes: int, history_len: int, lookups: int) -> bool:
    """Time the fleet view from the ledger and ``lookups`` card lifetimes; False when an
    answer is not the expected one."""
    t0, c0 = time.perf_counter(), cpu()
    with collector.paused():  # as `nodegate report` runs (fleet.cli.run, ledger.report_cli)
        items = fleet_items(ledger)
        history = History(has_trend)
        for item in items:
            history.add(item)
        view = build_view(Path(ledger.name), items, history=history)
        t1 = time.perf_counter()
        trend = trends(view)
        t2 = time.perf_counter()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"fleet view from the ledger: {len(view.nodes)} nodes, {view.n_reports} reports: "
          f"{t1 - t0:.2f} s (items and view), trends {t2 - t1:.2f} s, "
          f"{cpu() - c0:.2f} s CPU; peak RSS of the whole bench {peak:.0f} MiB; "
          f"{len(trend.degrading)} degrading")
    if len(view.nodes) != nodes:
        return False
    times = []
    for k in range(lookups):
        wanted = serial((k * 7919) % nodes, k % 8)
        t0 = time.perf_counter()
        card = gpu_lifetime(ledger, wanted)
        times.append(time.perf_counter() - t0)
        if card["runs"]["count"] != history_len:
            print(f"bench: {wanted} shows {card['runs']['count']} runs", file=sys.stderr)
            return False
    print(f"card lifetime ({lookups} serials): median {statistics.median(times) * 1000:.1f}"
          f" ms, worst {max(times) * 1000:.1f} ms")
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--history", type=int, default=1)
    parser.add_argument("--level", choices=("quick", "standard"), default="standard")
    parser.add_argument("--dir", type=Path)
    parser.add_argument("--db")
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--lookups", type=int, default=20)
    parser.add_argument("--jobs", type=int, help="processes parsing reports (ingest --jobs)")
    args = parser.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="nodegate-ledger-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    total = generate(root, args.nodes, args.history, args.level)
    print(f"reports: {total} ({args.nodes} nodes x {args.history}, {args.level}) in {root}, "
          f"made in {time.perf_counter() - t0:.1f} s")
    db = args.db or str(Path(tempfile.mkdtemp(prefix="nodegate-ledger-db-")) / "ledger.sqlite")
    ledger = open_ledger(db)
    t0, c0 = time.perf_counter(), cpu()
    counts = ingest(ledger, root, batch=args.batch, jobs=args.jobs)
    wall, used = time.perf_counter() - t0, cpu() - c0
    print(f"ingest: {counts.line()}; {wall:.1f} s wall, {used:.1f} s CPU: "
          f"{total / wall:.0f} reports/s")
    if counts.new != total or counts.unreadable:
        print("bench: the ingest did not take every report once", file=sys.stderr)
        return 1
    t0 = time.perf_counter()
    again = ingest(ledger, root, batch=args.batch, jobs=args.jobs)
    wall = time.perf_counter() - t0
    print(f"second ingest: {again.line()}; {wall:.1f} s: {total / wall:.0f} reports/s")
    if again.already != total:
        return 1
    if not view_and_lookups(ledger, args.nodes, args.history, args.lookups):
        return 1
    if "://" not in db:
        size = sum(p.stat().st_size for p in Path(db).parent.glob(Path(db).name + "*"))
        print(f"ledger: {size / 2**20:.0f} MiB on disk ({db})")
    ledger.close()
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
