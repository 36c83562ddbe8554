"""One battery run from the CLI: pick the profile, take the lock, run, report, exit code.

``nodegate health`` (quick) and ``nodegate validate`` (standard/acceptance) share this so
their outputs and exit codes are the same by construction.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from nodegate.errors import ConfigError
from nodegate.fileio import read_text
from nodegate.profiles import Profile

NODE_PROFILE_FILE = Path("/etc/nodegate/profile.json")


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", help="profile name, or a resolved profile JSON file "
                        "(default: $NODEGATE_PROFILE, then /etc/nodegate/profile.json)")
    parser.add_argument("--checks", help="comma-separated check groups: gpu,log,host "
                        "(+load,power for validate); default all of the level's groups")
    parser.add_argument("--report-dir", type=Path, help="where JSON/JUnit reports go "
                        "(default $NODEGATE_REPORT_DIR or /var/lib/nodegate/reports)")
    parser.add_argument("--textfile-dir", type=Path, help="node_exporter textfile collector "
                        "directory (default /var/lib/node_exporter/textfile_collector)")
    parser.add_argument("--no-textfile", action="store_true", help="skip the Prometheus file")
    parser.add_argument("--xid-window", default="boot",
                        help="Xid scan window: boot (default), or 90s/15m/6h/2d")
    parser.add_argument("--nvml-timeout", metavar="SECONDS",
                        help="deadline for reading the board through NVML (default 30s); "
                             "a driver that does not answer in time is gpu_reachable ERROR")
    parser.add_argument("--node-name", help="node name in reports (default: hostname)")
    parser.add_argument("--json", action="store_true", help="print the JSON report on stdout")
    parser.add_argument("--quiet", action="store_true", help="print only the verdict line")
    parser.add_argument("--color", choices=("auto", "always", "never"), default="auto")


def select_profile(value: str | None) -> Profile:
    from nodegate.profiles.cache import resolve_profile_cached

    value = value or os.environ.get("NODEGATE_PROFILE")
    if value is None:
        if NODE_PROFILE_FILE.is_file():
            value = str(NODE_PROFILE_FILE)
        else:
            raise ConfigError("no profile given and /etc/nodegate/profile.json is absent",
                              key="--profile")
    if value.endswith(".json"):
        return _profile_from_json(Path(value))
    return resolve_profile_cached(value)


def _profile_from_json(path: Path) -> Profile:
    """A resolved profile the agent role installed; validated again, it is cheap insurance."""
    from nodegate.profiles.loader import _validate
    from nodegate.profiles.schema import resolved_schema

    try:
        data = json.loads(read_text(path, kind="profile"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read resolved profile: {exc}", file=str(path)) from None
    _validate(data, resolved_schema(), file=str(path))
    return Profile(name=str(data["name"]), data=data, layers=[str(path)])


def output_dirs(args: argparse.Namespace) -> tuple[Path, Path | None]:
    """Where this run's report set goes: (report folder, textfile folder or None)."""
    from nodegate.battery.outputs import default_report_dir, default_textfile_dir

    textfile = None if args.no_textfile else (args.textfile_dir or default_textfile_dir())
    return Path(args.report_dir or default_report_dir()), textfile


def check_outputs(args: argparse.Namespace, name: str | None = None) -> None:
    """Exit 2 on an unusable output folder, or a file of the run ``name`` that cannot be
    replaced, before the battery starts (nothing measured, nothing written)."""
    from nodegate.battery.outputs import preflight

    preflight(*output_dirs(args), name=name)


def emit(report: Any, args: argparse.Namespace, level: str, notes: list[str],
         name: str | None = None) -> int:
    from nodegate.battery.outputs import write_outputs
    from nodegate.report import exit_code_for, render_summary, to_json

    if not report.results:
        # a report of nothing would read as PASS; no check ran, so nothing was judged (exit 2)
        raise ConfigError(f"no check ran at level {report.level.value} with these groups "
                          f"({report.labels.get('groups') or 'none'}); no report written",
                          key="--checks")
    report_dir, textfile = output_dirs(args)
    # the cron health path skips re-validating (time budget); load levels validate
    try:
        files = write_outputs(report, report_dir=report_dir, textfile_dir=textfile,
                              validate=level != "health", name=name)
    except ConfigError as exc:
        if exit_code_for(report) == 0:
            raise  # nothing failed, and no report says so: not a pass (exit 2)
        # the board was judged and failed: a full disk must not turn that into "bad input"
        print(f"nodegate {level}: error: {exc}", file=sys.stderr)
        print(f"nodegate {level}: {report.verdict.value} (judged; the report could not be "
              "written)", file=sys.stderr)
        return int(exit_code_for(report))
    report = files.report or report  # as written: numbered (battery.outputs.number)
    color = args.color == "always" or (args.color == "auto" and sys.stdout.isatty())
    if args.json:
        print(to_json(report))
    elif not args.quiet:
        print(render_summary(report, color=color, show_passed=False))
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    code = int(exit_code_for(report))
    print(f"nodegate {level}: {report.verdict.value}  report {files.latest}", file=sys.stderr)
    return code


def node_name(args: argparse.Namespace) -> str:
    return str(args.node_name or os.environ.get("NODEGATE_NODE_NAME") or socket.gethostname())


def now() -> float:
    return time.time()
