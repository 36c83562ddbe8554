"""Command-line options several commands share, declared once, so each says the same default
the same way everywhere (the environment variable first, then the agent role's path) and a
change of default is made in one place. Imports argparse's types only: the cron path loads
it."""

from __future__ import annotations

import argparse
from pathlib import Path

from nodegate.bounds import arg_number

#: Where a node's profile comes from when ``--profile`` is not given.
PROFILE_DEFAULT = "$NODEGATE_PROFILE, then /etc/nodegate/profile.json"
#: Where a node's reports are when ``--report-dir`` is not given.
REPORT_DIR_DEFAULT = "$NODEGATE_REPORT_DIR or /var/lib/nodegate/reports"


def add_profile(parser: argparse.ArgumentParser, what: str = "profile name, or a resolved "
                "profile JSON file", *, then: str = "") -> None:
    """``--profile``; ``then`` adds a last fallback after the node's own profile."""
    parser.add_argument("--profile", help=f"{what} (default: {PROFILE_DEFAULT}{then})")


def add_report_dir(parser: argparse.ArgumentParser, what: str, *, path: bool = True) -> None:
    """``--report-dir`` (a Path unless ``path`` is False: the suites keep the text)."""
    parser.add_argument("--report-dir", type=Path if path else str,
                        help=f"{what} (default {REPORT_DIR_DEFAULT})")


def add_color(parser: argparse.ArgumentParser) -> None:
    """``--color``: the verdict lines' colours."""
    parser.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                        help="colour the verdicts: auto (when stdout is a terminal), "
                             "always or never (default %(default)s)")


def add_slurm_client(parser: argparse.ArgumentParser, *, retries: bool = True) -> None:
    """``--slurm-conf`` and, for commands that read the controller again, ``--retries``."""
    parser.add_argument("--slurm-conf", type=Path, help="slurm.conf for the clients "
                        "(default $SLURM_CONF or Slurm's own)")
    if retries:
        parser.add_argument("--retries", type=arg_number(int, 1, 100), default=3,
                            help="tries of each read when the controller is unreachable "
                                 "(default %(default)s)")


def add_holds_dir(parser: argparse.ArgumentParser) -> None:
    """``--holds-dir``: the record of the drains nodegate made (``cluster.holds``)."""
    parser.add_argument("--holds-dir", type=Path,
                        help="the record of the drains nodegate made (holds.json; default "
                             "$NODEGATE_HOLDS_DIR or /var/lib/nodegate/holds): only a drain "
                             "recorded there is ever lifted")
