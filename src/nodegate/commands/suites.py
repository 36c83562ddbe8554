"""What the suite commands (``nodegate netload``, ``multinode``) share beyond
``nodegate.commands.session``: their output options, and a report written under the suite's
own name (``<suite>-latest.json``) that the join gate requires, with no Prometheus file."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from nodegate.arguments import add_color, add_profile, add_report_dir


def add_suite_arguments(parser: argparse.ArgumentParser) -> None:
    """The profile, where the report goes and how it is shown: as ``health`` and ``validate``
    take them."""
    add_profile(parser)
    add_report_dir(parser, "where the report goes", path=False)
    parser.add_argument("--node-name", help="node name in the report (default: hostname)")
    parser.add_argument("--json", action="store_true", help="print the JSON report on stdout")
    parser.add_argument("--quiet", action="store_true", help="print only the verdict line")
    add_color(parser)


def emit_suite(report: Any, args: argparse.Namespace, suite: str) -> int:
    """Write the report set as ``<suite>-latest.json``, print it as asked, return the exit
    code. No textfile: a suite's series would collide with the standard run's."""
    from nodegate.commands.session import emit

    args.report_dir = Path(args.report_dir) if args.report_dir else None
    args.no_textfile = True
    return emit(report, args, suite, [], name=suite)
