"""The ``nodegate`` command line: an explicit registry of subcommand modules.

Each module in ``COMMAND_MODULES`` exposes ``register(subparsers)`` which adds its parser and
sets ``func`` (a callable taking the parsed namespace and returning an exit code). Command
modules import only argparse at module level so ``nodegate health`` starts fast; heavy
imports happen inside the handlers.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from nodegate.errors import ExitCode, NodegateError
from nodegate.redaction import redact, redacted_std_streams

#: Explicit registry, in help order: each command and the module whose ``register`` adds it.
#: No register-on-import magic; tests/foundation/test_cli_parser.py holds it to the modules.
COMMANDS: dict[str, str] = {
    "version": "nodegate.commands.version",
    "profiles": "nodegate.commands.profiles",
    "health": "nodegate.commands.health",
    "validate": "nodegate.commands.validate",
    "multinode": "nodegate.commands.multinode",
    "netload": "nodegate.commands.netload",
    "sim": "nodegate.sim.cli",
    "power": "nodegate.power.cli",
    "gate": "nodegate.cluster.cli",
    "hold": "nodegate.cluster.holds_cli",
    "sweep": "nodegate.cluster.sweep_cli",
    "cluster-check": "nodegate.cluster.cluster_check_cli",
    "report": "nodegate.ledger.report_cli",
    "ledger": "nodegate.ledger.cli",
    "remediate": "nodegate.commands.remediate",
}
COMMAND_MODULES: tuple[str, ...] = tuple(COMMANDS.values())
#: Commands that moved out of the node package: a one-line pointer instead of argparse's
#: "invalid choice" (hidden from the help). The lab is the nodegate-lab distribution (lab/).
MOVED_COMMANDS: dict[str, str] = {
    "lab": "`nodegate lab` is now `nodegate-lab` (the nodegate-lab distribution in the "
           "checkout's lab/: make setup installs it)",
}


#: Optional packages and the extra that brings each (a missing one is exit 3, never a crash).
OPTIONAL_EXTRAS: dict[str, str] = {
    "torch": "torch",
    "pysnmp": "power",
    "redfish": "power",
    "prometheus_client": "power",
    "pyinfra": "deploy",
    "ansible": "deploy",
    "jinja2": "deploy",
    "sqlalchemy": "ledger",
    "alembic": "ledger",
    "psycopg": "ledger",
}


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The whole parser; given the command line, only the parser of the command it names.

    Every command module imports its own dependencies and builds its options: the cron
    health check paid ~0.1 s for nine parsers it never used. Argparse hands everything
    after the command word to that command's parser, and the top-level usage names no
    command (``COMMAND``), so one command's parser parses, prints help and fails exactly as
    the whole one does. A line that names no command plainly (help, an unknown word, any
    option but ``--debug`` first) gets the whole parser: its help and its errors list them all.
    """
    chosen = _chosen_command(argv) if argv is not None else None
    parser = argparse.ArgumentParser(
        prog="nodegate",
        description="Provision and gate 8-GPU NVIDIA servers.",
    )
    parser.add_argument("--debug", action="store_true",
                        help="print the traceback of an unexpected error (also: NODEGATE_DEBUG=1)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name, module_name in COMMANDS.items():
        if chosen in (None, name):
            importlib.import_module(module_name).register(subparsers)
    for name, message in MOVED_COMMANDS.items():  # no help=: left out of the help
        if chosen not in (None, name):
            continue
        # no option prefix: every word after the name (--help too) is taken, none refused
        moved = subparsers.add_parser(name, add_help=False, prefix_chars="\0")
        moved.add_argument("rest", nargs="*")
        moved.set_defaults(func=lambda _args, message=message: _moved(message))
    return parser


def _chosen_command(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names after any ``--debug`` flags; None for anything else."""
    for word in argv:
        if word != "--debug":
            return word if word in COMMANDS or word in MOVED_COMMANDS else None
    return None


def _moved(message: str) -> int:
    say("nodegate", f"error: {message}")
    return int(ExitCode.BAD_INPUT)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; every way out is a documented exit code (docs/exit-codes.md).
    Whatever it prints passes the redaction filter (URL userinfo, credentials read)."""
    with redacted_std_streams():
        return run(build_parser(sys.argv[1:] if argv is None else argv), argv)


def entry(collector: bool | None = None) -> NoReturn:
    """The ``nodegate`` console script and ``python -m nodegate``: ``main``, then out without
    tearing the interpreter down object by object.

    Freeing a health run's ~800 results, their reports and ~200 modules one at a time was
    ~25 ms of CPU at exit, an eighth of the cron check; the kernel frees the process at once.
    What an ordinary exit does that matters still happens first: the exit handlers run
    (``atexit``: logging's flush, weakref finalizers such as temporary folders) and the
    standard streams are flushed (``main`` already made a failing flush harmless). A command
    that leaves another thread running exits the ordinary way, which waits for it.

    Start-up runs without the cyclic garbage collector: importing a command's modules and
    building its parser allocate only what lives until the process ends, and the collector's
    passes over them (a full one among them) were ~10 ms of the cron health check's CPU.
    It is back on before the command's handler runs (``_dispatch``). ``collector``: whether
    it was on before the caller paused it (``python -m nodegate`` pauses it before importing
    this module); None: as it is now.
    """
    if gc.isenabled() if collector is None else collector:
        _STARTUP_PAUSE.append(True)
    gc.disable()
    code = main()
    threading = sys.modules.get("threading")
    if threading is not None and threading.active_count() > 1:
        sys.exit(code)
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    os._exit(code)


def run(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None,
        prog: str = "nodegate") -> int:
    """Parse ``argv`` and run the chosen handler (``func``), turning every error into one
    line and a documented exit code; ``nodegate-lab`` runs its own parser through this too.
    The parser must have a ``--debug`` flag and a ``command`` destination.

    The code is the handler's (its verdict) whatever happens to stdout and stderr: a closed
    pipe, a full disk or a descriptor closed before the start loses the text, never the
    code (``nodegate.commands._streams``)."""
    from nodegate.commands._streams import guarded

    with guarded() as lost:
        code = _dispatch(parser, argv, prog)
        note = lost.note("stdout")
        if note is not None:
            say(prog, f"warning: {note}")
    return code


def say(prog: str, message: str) -> None:
    """The one place a command's error line is printed (``PROG: MESSAGE`` on stderr), through
    the redaction filter (an exception's text may carry a URL password or a credential)."""
    print(redact(f"{prog}: {message}"), file=sys.stderr)


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """``argv`` parsed as ``run`` parses it; a bad value is argparse's exit 2 naming it."""
    args = parser.parse_args(argv)
    _one_value_each(parser, args)
    return args


#: Non-empty while the garbage collector is paused for the start-up (``entry``);
#: ``_dispatch`` turns it back on.
_STARTUP_PAUSE: list[bool] = []


def _dispatch(parser: argparse.ArgumentParser, argv: Sequence[str] | None, prog: str) -> int:
    args = parse(parser, argv)
    if _STARTUP_PAUSE:  # every handler runs with the collector (health pauses it itself)
        _STARTUP_PAUSE.clear()
        gc.enable()
    debug = bool(args.debug) or os.environ.get("NODEGATE_DEBUG", "") not in ("", "0")
    try:
        return int(args.func(args))
    except NodegateError as exc:
        say(prog, f"error: {exc}")
        return int(exc.exit_code)
    except KeyboardInterrupt:
        say(prog, "interrupted")
        return int(ExitCode.CANNOT_RUN)
    except ModuleNotFoundError as exc:
        extra = OPTIONAL_EXTRAS.get((exc.name or "").split(".")[0])
        if extra is None:
            return _unexpected(exc, debug, prog)
        say(prog, f"error: {args.command} needs the optional package {exc.name}: "
            f"pip install 'nodegate[{extra}]'")
        return int(ExitCode.CANNOT_RUN)
    except Exception as exc:  # the last line of defence: one line and exit 3, no traceback
        return _unexpected(exc, debug, prog)


def _one_value_each(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """argparse before Python 3.12 parses ``--opt=--`` into an empty list for an option that
    takes one value, which no handler expects (``--nvml-timeout=--`` was an internal error):
    exit 2 naming the option, as for any other bad value."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = getattr(args, action.dest, None) if action.dest else None
            for name, sub in action.choices.items():
                if chosen in (None, name):
                    _one_value_each(sub, args)
        elif action.option_strings and action.nargs is None and \
                type(action) is argparse._StoreAction and \
                isinstance(getattr(args, action.dest, None), list):
            parser.error(f"argument {'/'.join(action.option_strings)}: expected one value")


def _unexpected(exc: BaseException, debug: bool, prog: str = "nodegate") -> int:
    """A defect of ours (or an environment we did not foresee): say what failed in one line,
    keep the traceback in a file (or print it with --debug), exit 3 ("could not run")."""
    import tempfile
    import traceback

    from nodegate.yamlio import shorten

    what = redact(f"{type(exc).__name__}: {shorten(str(exc))}")
    text = redact("".join(traceback.format_exception(exc)))
    if debug:
        sys.stderr.write(text)
        say(prog, f"internal error: {what}")
        return int(ExitCode.CANNOT_RUN)
    where = "rerun with --debug to see it"
    try:
        fd, path = tempfile.mkstemp(prefix=f"{prog}-error-", suffix=".log")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        where = f"traceback in {path}"
    except OSError:
        pass
    say(prog, f"internal error: {what} ({where}); a defect in nodegate: report it, with "
        "that traceback, to whoever maintains your nodegate install")
    return int(ExitCode.CANNOT_RUN)


if __name__ == "__main__":
    entry()
