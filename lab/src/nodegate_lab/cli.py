"""``nodegate-lab``: bring the embedded lab up, show it, open a shell on a host, keep a
baseline and reset to it, tear it down;
``nodegate-lab mdvm``: the md rehearsal VM; ``nodegate-lab prebuild``: their cached images.

Module level imports argparse and the node CLI's runner only (one error handling and exit
code contract for both commands); handlers import the rest.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from nodegate.cli import run
from nodegate.redaction import redacted_std_streams

PROG = "nodegate-lab"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="The embedded lab: disposable Debian 12 hosts booted with "
        "systemd-nspawn on a private lab network (10.77.7.0/24), each with a simulated GPU "
        "board, reached over SSH (root).")
    parser.add_argument("--debug", action="store_true",
                        help="print the traceback of an unexpected error (also: NODEGATE_DEBUG=1)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p_up = sub.add_parser("up", help="create or update the lab (idempotent)")
    p_up.add_argument("--nodes", type=int, default=2, help="GPU nodes (default 2)")
    p_up.add_argument("--fault", action="append", default=[], metavar="NODE:FAULT",
                      help="a simulator fault on one node, e.g. node2:xid79@gpu6 (repeatable)")
    p_up.add_argument("--scenario", default="h100-hgx", help="board scenario of every node")
    p_up.add_argument("--no-mirror", action="store_true",
                      help="skip the package mirror (no apt/pip source for the nodes)")
    p_up.set_defaults(func=cmd_up)

    p_snap = sub.add_parser(
        "snapshot", help="make the lab as it is now its baseline (hosts reboot)",
        description="Power every host off, keep what it holds now as its baseline, boot it "
        "again; `reset` goes back to it. Refused while a baseline exists (`down` drops it).")
    p_snap.set_defaults(func=cmd_snapshot)

    p_reset = sub.add_parser(
        "reset", help="put the lab back to its baseline, with these faults",
        description="Power every host off, drop what it wrote since the baseline (packages, "
        "files, Slurm's node states), prepare each board afresh with the faults given (none: "
        "healthy) and boot again. Node count and scenario are the baseline's. Fails without "
        "a baseline; a reset that fails half way takes the lab down.")
    p_reset.add_argument("--fault", action="append", default=[], metavar="NODE:FAULT",
                         help="a simulator fault on one node (repeatable)")
    p_reset.set_defaults(func=cmd_reset)

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
    _register_mdvm(sub)
    sub.add_parser("prebuild", help="build the cached lab base, md VM image and package "
                   "mirror at once (make test runs it beside the fast tests)").set_defaults(
        func=cmd_prebuild)
    return parser


def _register_mdvm(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    mdvm = sub.add_parser(
        "mdvm", help="the md rehearsal VM: Debian's kernel under qemu, two NVMe disks (root)",
        description="A qemu VM on Debian 12's own kernel with two emulated NVMe disks, for "
        "the nvme role's real mdadm RAID0 path (docs/dev/md-rehearsal.md).")
    mdvm.add_argument("--dir", type=Path, default=None, help="VM directory (default "
                      "NODEGATE_MDVM_DIR or /var/lib/nodegate-mdvm)")
    mdvm.set_defaults(func=lambda _args: _usage(mdvm))
    vm_sub = mdvm.add_subparsers(dest="mdvm_command", metavar="SUBCOMMAND")
    p_up = vm_sub.add_parser("up", help="build the image (cached), boot, write the site file")
    p_up.add_argument("--accel", choices=("auto", "kvm", "tcg"), default="auto")
    p_up.set_defaults(func=cmd_mdvm_up)
    vm_sub.add_parser("status", help="show the VM").set_defaults(func=cmd_mdvm_status)
    vm_sub.add_parser("down", help="kill the VM and remove its directory").set_defaults(
        func=cmd_mdvm_down)
    vm_sub.add_parser("build", help="build the cached root tarball only").set_defaults(
        func=cmd_mdvm_build)


def _usage(parser: argparse.ArgumentParser) -> int:
    """A command group run without its subcommand: its help, and exit 2 (bad input)."""
    parser.print_help()
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Run one lab command; exit codes as the node CLI's (docs/exit-codes.md). What it
    prints passes the same redaction filter as the node CLI's (lab BMC/PDU credentials)."""
    with redacted_std_streams():
        return run(build_parser(), argv, prog=PROG)


# --- the lab ------------------------------------------------------------------------------


def cmd_up(args: argparse.Namespace) -> int:
    from nodegate_lab import config, lab, services

    result = lab.up(args.nodes, args.fault, args.scenario,
                    with_mirror=not args.no_mirror)
    names = ", ".join(m.name for m in result.members)
    started = ", ".join(result.started) or "none (already running)"
    print(f"lab up: {names} in {result.seconds:.1f} s; booted: {started}")
    site = "lab" if not config.INSTANCE else str(result.site_file)
    print(f"site file: {result.site_file} (NODEGATE_SITE={site}); "
          f"credentials: set -a; . {services.env_file()}")
    return 0


def cmd_snapshot(args: argparse.Namespace) -> int:
    from nodegate_lab import lab

    result = lab.snapshot()
    print(f"lab snapshot: baseline of {', '.join(m.name for m in result.members)} taken and "
          f"booted again in {result.seconds:.1f} s")
    return 0


def cmd_reset(args: argparse.Namespace) -> int:
    from nodegate_lab import lab

    result = lab.reset(args.fault)
    print(f"lab reset: {', '.join(m.name for m in result.members)} back to the baseline "
          f"({', '.join(args.fault) or 'no faults'}) in {result.seconds:.1f} s")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from nodegate_lab import lab, services

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
    import shlex

    from nodegate.errors import ConfigError
    from nodegate_lab import lab

    lab.require_root()
    members = {m.name: m for m in lab.existing_members()}
    if args.host not in members:
        raise ConfigError(f"no lab host {args.host!r} (have: {', '.join(members) or 'none'})",
                          key="HOST")
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    # ssh hands the remote shell one string: several words are quoted so each stays one
    # argument; a single word is a shell command line of its own (pipes allowed)
    remote = [cmd[0]] if len(cmd) == 1 else ([shlex.join(cmd)] if cmd else [])
    argv = [*lab.ssh_argv(members[args.host], tty=not cmd and os.isatty(0)), *remote]
    os.execvp(argv[0], argv)


def cmd_down(args: argparse.Namespace) -> int:
    from nodegate_lab import lab

    left = lab.down(purge=args.purge)
    if left:
        print("lab down: left behind: " + "; ".join(left), file=sys.stderr)
        return 1
    print("lab down: no mounts, namespaces, links, loop devices or processes left")
    return 0


# --- the md rehearsal VM ------------------------------------------------------------------


def _vm_dir(args: argparse.Namespace) -> Path:
    from nodegate_lab import mdvm

    return Path(args.dir) if args.dir else mdvm.vm_dir()


def cmd_mdvm_up(args: argparse.Namespace) -> int:
    from nodegate_lab import lock, mdvm

    directory = _vm_dir(args)
    with lock.vm_exclusive(directory):
        vm = mdvm.up(directory, accel=args.accel)
    print(f"mdvm up: pid {vm.pid}, {vm.accel} ({vm.accel_why}), booted in "
          f"{vm.boot_s} s, ssh 127.0.0.1:{vm.port}\nsite file: {vm.site_file} "
          f"(NODEGATE_SITE={vm.site_file} pyinfra -y inventory.py roles/nvme.py)\n"
          f"ssh: {' '.join(mdvm.ssh_argv(vm))}")
    return 0


def cmd_mdvm_down(args: argparse.Namespace) -> int:
    from nodegate_lab import lock, mdvm

    directory = _vm_dir(args)
    with lock.vm_exclusive(directory):
        removed = mdvm.down(directory)
    print("mdvm: removed" if removed else "mdvm: nothing to remove")
    return 0


def cmd_prebuild(args: argparse.Namespace) -> int:
    """Every cached image the lab and VM tests start from, built at once, each under its own
    build lock: a lab or VM that starts meanwhile waits for that build instead of making it
    twice. Debootstrap and the mirror's downloads mostly wait on the network, so ``make
    test`` runs this in the background while the fast tests use the cores. Exit 1 when one
    could not be built (the tests then build it themselves, and say why if they cannot)."""
    from nodegate_lab import base, mdvm, mirror

    builds: dict[str, Callable[[], Path]] = {
        "md VM image": mdvm.build, "lab base": base.build, "package mirror": mirror.build}
    with ThreadPoolExecutor(len(builds)) as pool:
        started = time.monotonic()
        futures = {name: pool.submit(build) for name, build in builds.items()}
        failed = 0
        for name, future in futures.items():
            try:
                path = future.result()
            except Exception as exc:  # reported: the tests build it again
                failed += 1
                print(f"{PROG} prebuild: {name}: not built: {exc}", flush=True)
            else:
                print(f"{PROG} prebuild: {name}: {path} (ready after "
                      f"{time.monotonic() - started:.0f} s)", flush=True)
    return 1 if failed else 0


def cmd_mdvm_build(args: argparse.Namespace) -> int:
    from nodegate_lab import mdvm

    print(mdvm.build())
    return 0


def cmd_mdvm_status(args: argparse.Namespace) -> int:
    from nodegate_lab import mdvm

    found = mdvm.load(_vm_dir(args))
    if found is None:
        print("mdvm: none")
        return 1
    state = "running" if mdvm.running(found) else "stopped"
    print(f"mdvm: {state}, pid {found.pid}, {found.accel}, ssh 127.0.0.1:{found.port}, "
          f"disks {' '.join(found.disk_ids)}, site {found.site_file}")
    return 0 if state == "running" else 1


if __name__ == "__main__":
    sys.exit(main())
