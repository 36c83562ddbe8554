"""``nodegate lab``: bring the embedded lab up, show it, open a shell on a host, tear it down.

Module level imports argparse only (the CLI registry contract); handlers import the rest.
"""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "lab", help="the embedded lab: Debian hosts with simulated GPU boards (root)",
        description="Disposable Debian 12 hosts booted with systemd-nspawn on a private "
        "lab network (10.77.7.0/24), each with a simulated GPU board, reached over SSH.")
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])
    sub = parser.add_subparsers(dest="lab_command", metavar="SUBCOMMAND")

    p_up = sub.add_parser("up", help="create or update the lab (idempotent)")
    p_up.add_argument("--nodes", type=int, default=2, help="GPU nodes (default 2)")
    p_up.add_argument("--fault", action="append", default=[], metavar="NODE:FAULT",
                      help="a simulator fault on one node, e.g. node2:xid79@gpu6 (repeatable)")
    p_up.add_argument("--scenario", default="h100-hgx", help="board scenario of every node")
    p_up.add_argument("--no-mirror", action="store_true",
                      help="skip the package mirror (no apt/pip source for the nodes)")
    p_up.set_defaults(func=cmd_up)

    p_status = sub.add_parser("status", help="list lab hosts and services")
    p_status.set_defaults(func=cmd_status)

    p_shell = sub.add_parser("shell", help="ssh to a lab host (optionally run CMD)")
    p_shell.add_argument("host", metavar="HOST")
    p_shell.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS")
    p_shell.set_defaults(func=cmd_shell)

    p_down = sub.add_parser("down", help="stop and remove every lab host, mount and link")
    p_down.add_argument("--purge", action="store_true",
                        help="also delete the lab dir (extracted base, lab key)")
    p_down.set_defaults(func=cmd_down)


def cmd_up(args: argparse.Namespace) -> int:
    from nodegate.lab import lab, services

    result = lab.up(args.nodes, args.fault, args.scenario,
                    with_mirror=not args.no_mirror)
    names = ", ".join(m.name for m in result.members)
    started = ", ".join(result.started) or "none (already running)"
    print(f"lab up: {names} in {result.seconds:.1f} s; booted: {started}")
    from nodegate.lab import config

    site = "lab" if not config.INSTANCE else str(result.site_file)
    print(f"site file: {result.site_file} (NODEGATE_SITE={site}); "
          f"credentials: set -a; . {services.env_file()}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from nodegate.lab import lab, services

    rows = lab.status()
    if not rows:
        print("lab: down")
        return 0
    print(f"{'HOST':<10} {'KIND':<11} {'ADDRESS':<21} {'STATE':<8} {'BOOTS':>5}  DETAIL")
    for r in rows:
        print(f"{r.name:<10} {r.kind:<11} {r.address:<21} {r.state:<8} {r.boots:>5}  {r.detail}")
    nodes = [m for m in lab.existing_members() if m.kind == "node"]
    for svc in services.status(nodes):
        print(f"{svc.name:<10} {'service':<11} {svc.address:<21} {svc.state:<8} {'':>5}  "
              f"{svc.detail}")
    return 0


def cmd_shell(args: argparse.Namespace) -> int:
    import os

    from nodegate.errors import ConfigError
    from nodegate.lab import lab

    lab.require_root()
    members = {m.name: m for m in lab.existing_members()}
    if args.host not in members:
        raise ConfigError(f"no lab host {args.host!r} (have: {', '.join(members) or 'none'})",
                          key="HOST")
    import shlex

    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    # ssh hands the remote shell one string: several words are quoted so each stays one
    # argument; a single word is a shell command line of its own (pipes allowed)
    remote = [cmd[0]] if len(cmd) == 1 else ([shlex.join(cmd)] if cmd else [])
    argv = [*lab.ssh_argv(members[args.host], tty=not cmd and os.isatty(0)), *remote]
    os.execvp(argv[0], argv)


def cmd_down(args: argparse.Namespace) -> int:
    import sys

    from nodegate.lab import lab

    left = lab.down(purge=args.purge)
    if left:
        print("lab down: left behind: " + "; ".join(left), file=sys.stderr)
        return 1
    print("lab down: no mounts, namespaces, links, loop devices or processes left")
    return 0
