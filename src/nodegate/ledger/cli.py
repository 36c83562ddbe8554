"""``nodegate ledger``: ingest fetched reports, show a card's lifetime or a node's history.

Exit codes (docs/exit-codes.md): ``ingest`` 0 when every file was read, 1 when some could not
be (each is recorded as ERROR evidence of its node; the batch goes on), 2 bad input (no such
folder, a bad ``--db``, a ledger newer than this nodegate), 3 could not run (the database
does not answer, the ``ledger`` extra is not installed). ``gpu``/``node``: 0 shown, 2 when the
ledger never saw that serial or name. Module-level imports: argparse only.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nodegate.bounds import arg_number


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "ledger", help="the fleet ledger: every node's history and every GPU's lifetime",
        description="The fleet ledger (docs/ledger.md): a SQLite file (default) or a "
                    "PostgreSQL database holding every report's run, each GPU by serial "
                    "across hosts, non-PASS evidence, metrics and events.")
    sub = parser.add_subparsers(dest="ledger_command", metavar="ACTION")
    sub.required = True
    db_help = "the ledger: a SQLite file or a postgresql:// URL (default: $NODEGATE_LEDGER_DB)"
    ingest = sub.add_parser("ingest", help="read a folder of fetched reports into the ledger",
                            description="Every *.json report (and remediation.json) below "
                                        "DIR, each once: prints read, new, already there, "
                                        "unreadable.")
    ingest.add_argument("dir", type=Path, metavar="DIR",
                        help="a folder of fetched reports (deploy/fetch_reports.py's reports/)")
    ingest.add_argument("--db", metavar="PATH|URL", help=db_help)
    ingest.add_argument("--batch", type=arg_number(int, 1, 100000), default=500, metavar="N",
                        help="files per transaction (default %(default)s)")
    ingest.add_argument("--jobs", type=arg_number(int, 1, 64), metavar="N",
                        help="processes parsing reports (default 1; at most 4 and the CPUs)")
    ingest.add_argument("--json", action="store_true", help="print the counts as JSON")
    ingest.set_defaults(func=_ingest)
    gpu = sub.add_parser("gpu", help="one card's lifetime across hosts, by serial")
    gpu.add_argument("serial", metavar="SERIAL", help="the card's serial number as NVML reports it")
    gpu.add_argument("--db", metavar="PATH|URL", help=db_help)
    gpu.add_argument("--json", action="store_true", help="print it as JSON")
    gpu.set_defaults(func=_gpu)
    node = sub.add_parser("node", help="one node's history, by name")
    node.add_argument("name", metavar="NAME",
                      help="a host name or Slurm name the node has had (matched to its machine id)")
    node.add_argument("--db", metavar="PATH|URL", help=db_help)
    node.add_argument("--json", action="store_true", help="print it as JSON")
    node.set_defaults(func=_node)
    prune = sub.add_parser("prune", help="retention: metrics older than DAYS become daily "
                                         "aggregates")
    prune.add_argument("--older-than", type=arg_number(int, 1, 100000), required=True,
                       metavar="DAYS", dest="days",
                       help="age in days past which metrics are kept as daily aggregates")
    prune.add_argument("--db", metavar="PATH|URL", help=db_help)
    prune.set_defaults(func=_prune)


def _ingest(args: argparse.Namespace) -> int:
    from nodegate.errors import ConfigError
    from nodegate.ledger.engine import open_ledger
    from nodegate.ledger.ingest import ingest

    if not args.dir.is_dir():
        raise ConfigError("not a folder of reports", file=str(args.dir))
    ledger = open_ledger(args.db)
    try:
        counts = ingest(ledger, args.dir, batch=args.batch, jobs=args.jobs)
    finally:
        ledger.close()
    if args.json:
        print(json.dumps({"ledger": ledger.name, **vars(counts)}))
    else:
        print(f"nodegate ledger: {ledger.name}: {counts.line()}")
    if counts.unreadable:
        print(f"nodegate ledger: {counts.unreadable} file(s) could not be read: recorded as "
              f"ERROR evidence (exit 1)", file=sys.stderr)
    return 1 if counts.unreadable else 0


def _gpu(args: argparse.Namespace) -> int:
    from nodegate.ledger.queries import gpu_lifetime
    from nodegate.ledger.render import gpu_text

    return _show(args, lambda ledger: gpu_lifetime(ledger, args.serial), gpu_text)


def _node(args: argparse.Namespace) -> int:
    from nodegate.ledger.queries import node_history
    from nodegate.ledger.render import node_text

    return _show(args, lambda ledger: node_history(ledger, args.name), node_text)


def _show(args: argparse.Namespace, query: Callable[[Any], Any],
          text: Callable[[Any], str]) -> int:
    """One read of an existing ledger, printed as JSON (``--json``) or as text."""
    from nodegate.ledger.engine import open_ledger

    ledger = open_ledger(args.db, create=False)
    try:
        data = query(ledger)
    finally:
        ledger.close()
    print(json.dumps(data, indent=2) if args.json else text(data), end="\n")
    return 0


def _prune(args: argparse.Namespace) -> int:
    from nodegate.ledger.engine import open_ledger
    from nodegate.ledger.retention import prune

    ledger = open_ledger(args.db, create=False)
    try:
        rows, days = prune(ledger, older_than_days=args.days)
    finally:
        ledger.close()
    print(f"nodegate ledger: {ledger.name}: {rows} metric row(s) older than {args.days} "
          f"days kept as {days} daily aggregate(s)")
    return 0
