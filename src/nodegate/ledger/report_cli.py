"""``nodegate report``: the fleet view from a folder of reports (``nodegate.fleet.cli``) or,
with ``--db``, from the fleet ledger: the same view, built by the same code
(``fleet.aggregate.build_view``, ``fleet.trends``, ``fleet.render``) from the fleet summaries
the ledger kept of each report. Module-level imports: argparse and the fleet's CLI only (no
database package: ``nodegate report DIR`` runs without the ``ledger`` extra).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from nodegate.fleet import cli as fleet_cli


def register(subparsers: Any) -> None:
    parser = fleet_cli.register(subparsers)
    parser.add_argument("--db", metavar="PATH|URL",
                        help="read the fleet ledger (a SQLite file or a postgresql:// URL) "
                             "instead of DIR: the same view (docs/ledger.md)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.db is None:
        return fleet_cli.run(args)
    from nodegate import collector

    with collector.paused():
        return _from_ledger(args)


def _from_ledger(args: argparse.Namespace) -> int:
    from nodegate.errors import ConfigError
    from nodegate.fleet.aggregate import build_view
    from nodegate.fleet.pair_records import pair_matrix
    from nodegate.fleet.read import History
    from nodegate.fleet.trend_metrics import has_trend
    from nodegate.ledger.engine import open_ledger
    from nodegate.ledger.queries import fleet_items, pair_results

    if args.dir is not None:
        raise ConfigError("give DIR or --db, not both", key="--db")
    ledger = open_ledger(args.db, create=False)
    try:
        where = Path(ledger.name)
        fleet_cli.check_output_args(args, where)
        history = History(has_trend)
        items = fleet_items(ledger)
        for item in items:
            history.add(item)
        view = build_view(where, items, margin_pct=args.margin, history=history)
        fleet_cli.check_view(view, where)
        pairs = pair_results(ledger)
        return fleet_cli.show(args, view, pair_matrix(view, pairs.get), where)
    finally:
        ledger.close()
