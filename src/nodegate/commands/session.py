"""What every battery command of the CLI shares: its common options, the output folders
checked before anything runs, and the report set written with the summary and exit code.

``nodegate health`` (quick), ``validate`` (standard/acceptance), ``netload`` and ``multinode``
share this so their outputs and exit codes are the same by construction (the profile comes
from ``nodegate.profiles.installed``, the lock from ``nodegate.battery_lock``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodegate.arguments import add_color, add_profile, add_report_dir
from nodegate.errors import CannotRunError, ConfigError

if TYPE_CHECKING:
    from nodegate.identity import Identity


def add_common_arguments(parser: argparse.ArgumentParser, groups: tuple[str, ...]) -> None:
    """The battery commands' options; ``groups``: what ``--checks`` accepts (the command's
    own list, which its ``parse_groups`` holds it to)."""
    add_profile(parser)
    parser.add_argument("--checks", metavar="GROUP,...",
                        help=f"comma-separated check groups, of {','.join(groups)} "
                             "(default: all of them that have a check at the level)")
    add_report_dir(parser, "where JSON/JUnit reports go")
    parser.add_argument("--textfile-dir", type=Path, help="node_exporter textfile collector "
                        "directory (default /var/lib/node_exporter/textfile_collector)")
    parser.add_argument("--no-textfile", action="store_true", help="skip the Prometheus file")
    parser.add_argument("--xid-window", default="boot",
                        help="Xid scan window: boot (default), or 90s/15m/6h/2d")
    parser.add_argument("--nvml-timeout", metavar="SECONDS",
                        help="deadline for reading the board through NVML (default 30s); "
                             "a driver that does not answer in time is gpu_reachable ERROR")
    parser.add_argument("--node-name", help="this node's Slurm name in reports (default "
                        "$NODEGATE_NODE_NAME, $SLURMD_NODENAME, else the host name; the "
                        "host name and machine id are recorded too)")
    parser.add_argument("--json", action="store_true", help="print the JSON report on stdout")
    parser.add_argument("--quiet", action="store_true", help="print only the verdict line")
    add_color(parser)


def output_dirs(args: argparse.Namespace) -> tuple[Path, Path | None]:
    """Where this run's report set goes: (report folder, textfile folder or None)."""
    from nodegate.report.outputs import default_report_dir, default_textfile_dir

    textfile = None if args.no_textfile else (args.textfile_dir or default_textfile_dir())
    return Path(args.report_dir or default_report_dir()), textfile


def check_outputs(args: argparse.Namespace, name: str | None = None) -> None:
    """Exit 2 on an unusable output folder, or a file of the run ``name`` that cannot be
    replaced, before the battery starts (nothing measured, nothing written)."""
    from nodegate.report.outputs import preflight

    preflight(*output_dirs(args), name=name)


def emit(report: Any, args: argparse.Namespace, level: str, notes: list[str],
         name: str | None = None) -> int:
    import dataclasses

    from nodegate.report import exit_code_for, render_summary, to_json
    from nodegate.report.outputs import write_outputs

    if not report.results:
        # a report of nothing would read as PASS; no check ran, so nothing was judged (exit 2)
        raise ConfigError(f"no check ran at level {report.level.value} with these groups "
                          f"({report.labels.get('groups') or 'none'}); no report written",
                          key="--checks")
    ident = node_identity(args)
    labels = {**ident.labels(), **report.labels}
    if ident.notes:
        labels["names"] = "; ".join(ident.notes)
    report = dataclasses.replace(report, labels=labels)
    notes = [*ident.notes, *notes]
    report_dir, textfile = output_dirs(args)
    # the cron health path skips re-validating (time budget); load levels validate
    try:
        files = write_outputs(report, report_dir=report_dir, textfile_dir=textfile,
                              validate=level != "health", name=name)
    except (ConfigError, CannotRunError, OSError) as exc:
        if exit_code_for(report) == 0:
            raise  # nothing failed, and no report says so: not a pass (exit 2)
        # the board was judged and failed: a full disk must not turn that into "bad input"
        # or "could not run"; the gate of Slurm's HealthCheckProgram reads the verdict from
        # the JSON on stdout (--json) when no new report could be written
        if args.json:
            print(to_json(report))
        print(f"nodegate {level}: {report.verdict.value} (judged; the report could not be "
              f"written to {report_dir}: {_why(exc)})", file=sys.stderr)
        return int(exit_code_for(report))
    report = files.report or report  # as written: numbered (report.outputs.number)
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


def _why(exc: BaseException) -> str:
    """One line for an exception of the writer (a ConfigError's message names the file)."""
    if isinstance(exc, OSError):
        return f"{exc.strerror or exc}" + (f" ({exc.filename})" if exc.filename else "")
    return str(exc)


def node_identity(args: argparse.Namespace) -> Identity:
    """This run's node identity (``nodegate.identity``), from ``--node-name`` first."""
    from nodegate.identity import node_identity as identify

    found = getattr(args, "_identity", None)
    if found is None:
        found = identify(getattr(args, "node_name", None))
        args._identity = found
    return found


def node_name(args: argparse.Namespace) -> str:
    """The report's ``node``: the Slurm name (``--node-name``, ``$NODEGATE_NODE_NAME``,
    ``$SLURMD_NODENAME``), else the host name, as printable text (``nodegate.identity``)."""
    return node_identity(args).node
