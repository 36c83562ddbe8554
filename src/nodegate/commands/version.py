"""``nodegate version``."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("version", help="print the nodegate version")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from nodegate import __version__

    print(f"nodegate {__version__}")
    return 0
