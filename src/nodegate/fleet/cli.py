"""``nodegate report DIR``: the fleet view over a directory of node reports.

Exit 0 when every node's latest report passes, 1 when some node's latest FAILs or ERRORs or
a report file could not be read (it may be a node's newest: never a pass), 2 bad input (no
such directory, bad margin, no report at all or none that could be read: nothing judged), 3
could not run (the second process of a split first read did not deliver its part:
``fleet.read.read_entries``; no view is printed from half a fleet).
Module-level imports: argparse only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodegate.bounds import arg_number

if TYPE_CHECKING:
    from nodegate.fleet.aggregate import FleetView
    from nodegate.fleet.pair_records import PairMatrix


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``report``; the parser is returned for ``nodegate.ledger.report_cli``, which adds
    ``--db`` (the same view from the fleet ledger) and makes DIR optional."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "report", help="fleet view over a directory of node reports (text, JSON, HTML)",
        description="Read every *.json node report below DIR (several per node = history): "
                    "each node's verdict and failing checks, each metric's spread across "
                    "the nodes of each profile and the nodes worse than their profile's "
                    "median by more than --margin.")
    parser.add_argument("dir", type=Path, metavar="DIR", nargs="?",
                        help="a folder of node reports (deploy/fetch_reports.py's reports/); "
                             "leave it out with --db to read the fleet ledger instead")
    parser.add_argument("--html", type=Path, metavar="FILE",
                        help="also write a self-contained HTML report with plots (only "
                             "a regular file is replaced, in a folder that exists; never a "
                             "*.json name: docs/gate.md)")
    parser.add_argument("--margin", type=arg_number(float, 0, 1000, low_open=True),
                        default=10.0, metavar="PCT",
                        help="outlier margin in percent of the median of the node's "
                             "profile (default %(default)s)")
    parser.add_argument("--plots", type=arg_number(int, 0, 10000), default=50, metavar="N",
                        help="nodes with per-node plots in the HTML (default %(default)s)")
    parser.add_argument("--drift", type=arg_number(float, 0, 1000, low_open=True),
                        metavar="PCT",
                        help="trends: list a node whose metric is worse than its own first "
                             "runs, or the median of its profile's nodes, by more than PCT "
                             "percent (default: each node profile's trend_drift_pct_max)")
    parser.add_argument("--json", action="store_true", help="print the view as JSON")
    parser.add_argument("--strict", action="store_true",
                        help="validate every report against the full schema (slow)")
    parser.add_argument("--no-cache", action="store_true",
                        help="read every summary, without the per-user summary cache "
                             "(used for fleets of 500 reports or more)")
    parser.add_argument("--jobs", type=arg_number(int, 1, 64),
                        help="processes parsing reports without a usable summary "
                             "(default: up to 4)")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """The command with the cyclic garbage collector paused, as ``nodegate health`` runs:
    the view of 10,000 reports is ~250,000 containers, none in a cycle, that live until the
    process exits, and each full pass over them costs ~0.2-0.4 s (docs/dev/benchmarks.md). It
    runs again afterwards (an in-process caller)."""
    from nodegate import collector

    with collector.paused():
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from nodegate.errors import ConfigError
    from nodegate.fleet.aggregate import aggregate
    from nodegate.fleet.pair_records import pair_matrix, read_report

    if args.dir is None:
        raise ConfigError("give DIR (a folder of reports) or --db (the fleet ledger)",
                          key="DIR")
    check_output_args(args, args.dir)
    view = aggregate(args.dir, margin_pct=args.margin, jobs=args.jobs, strict=args.strict,
                     cache=not args.no_cache)
    check_view(view, args.dir)
    # the cluster check's pairs, for every view: only reports that hold some are decoded
    return show(args, view, pair_matrix(view, read_report(view.root)), args.dir)


def check_output_args(args: argparse.Namespace, where: Path) -> None:
    """``--plots`` and ``--html`` checked before anything is read (exit 2)."""
    from nodegate.errors import ConfigError

    if args.plots < 0:
        raise ConfigError("--plots must be >= 0", key="--plots")
    if args.html:
        from nodegate.fleet.html import check_html_target

        check_html_target(args.html, where)


def check_view(view: FleetView, where: Path) -> None:
    """No report at all, or none readable: nothing judged (exit 2)."""
    from nodegate.errors import ConfigError

    if not view.nodes and not view.unreadable:
        raise ConfigError("no *.json reports found", file=str(where))
    if not view.nodes:  # nothing judged: the same as no reports at all
        _warn_unreadable(where, view.unreadable)
        raise ConfigError(f"none of the {len(view.unreadable)} *.json report files could be "
                          f"read (listed above): nothing to judge", file=str(where))


def show(args: argparse.Namespace, view: FleetView, pairs: PairMatrix | None,
         where: Path) -> int:
    """Print (and write) the view of reports read from ``where``; the exit code."""
    from nodegate.fleet import trends
    from nodegate.fleet.render import render_text, to_data

    trend = trends.trends(view, drift_pct=args.drift)
    if args.json:
        print(json.dumps({**to_data(view, pairs=pairs), "trends": trends.to_data(trend)},
                         indent=2))
    else:
        sys.stdout.write(render_text(view, pairs=pairs) + "".join(
            line + "\n" for line in trends.text_lines(trend)))
    if args.html:
        from nodegate.fleet.html import write_html
        from nodegate.fleet.trends_html import section

        written = write_html(view, args.html, plots=args.plots, extra=section(trend),
                             pairs=pairs)
        print(f"nodegate report: HTML written to {written}", file=sys.stderr)
    _warn_unreadable(where, view.unreadable)
    if view.unreadable:
        # any one may be a node's newest report: what could not be read never passes
        print(f"nodegate report: {len(view.unreadable)} report file(s) could not be read: "
              f"the fleet is not proven passing (exit 1)", file=sys.stderr)
    failing = any(node.verdict in ("FAIL", "ERROR") for node in view.nodes)
    return 1 if failing or view.unreadable else 0


def _warn_unreadable(root: Path, unreadable: list[tuple[str, str]]) -> None:
    for path, error in unreadable:
        print(f"nodegate report: warning: {root / path}: {error}", file=sys.stderr)
