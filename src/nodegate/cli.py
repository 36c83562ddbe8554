"""The ``nodegate`` command line: an explicit registry of subcommand modules.

Each module in ``COMMAND_MODULES`` exposes ``register(subparsers)`` which adds its parser and
sets ``func`` (a callable taking the parsed namespace and returning an exit code). Command
modules import only argparse at module level so ``nodegate health`` starts fast; heavy
imports happen inside the handlers.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from nodegate.errors import ExitCode, NodegateError

#: Explicit registry, in help order. No register-on-import magic.
COMMAND_MODULES: tuple[str, ...] = (
    "nodegate.commands.version",
    "nodegate.commands.profiles",
    "nodegate.commands.health",
    "nodegate.commands.validate",
    "nodegate.commands.multinode",
    "nodegate.sim.cli",
    "nodegate.power.cli",
    "nodegate.cluster.cli",
    "nodegate.fleet.cli",
    "nodegate.lab.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nodegate",
        description="Provision and gate 8-GPU NVIDIA servers.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = int(args.func(args))
    except NodegateError as exc:
        print(f"nodegate: error: {exc}", file=sys.stderr)
        return int(exc.exit_code)
    except BrokenPipeError:
        # the reader (head, less) went away: not an error of ours
        sys.stderr.close()
        return int(ExitCode.PASSED)
    except KeyboardInterrupt:
        print("nodegate: interrupted", file=sys.stderr)
        return int(ExitCode.CANNOT_RUN)
    return code


if __name__ == "__main__":
    sys.exit(main())
