"""``nodegate remediate``: one step of this node's remediation (``nodegate.remediation``).

Run from the gate's timer once the site or profile enables it (``remediation.enabled``).
Exit codes (docs/remediation.md, docs/exit-codes.md's meanings): 0 a step was taken or
nothing was needed (off, in service, someone else's drain, waiting for jobs, a dry run);
1 the node needs a person: RMA, an action or re-qualification failed; 2 bad input (a state
file that cannot be read, no report, no profile); 3 could not run (the lock is held, Slurm
unreachable, the re-qualification could not start). Module level imports: argparse only.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodegate.arguments import add_holds_dir, add_profile, add_report_dir, add_slurm_client
from nodegate.bounds import arg_number

if TYPE_CHECKING:
    from nodegate.remediation.engine import BoardView, Runners


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "remediate", help="take one step of this node's remediation (reset, reboot, RMA)",
        description="Moves a node nodegate drained back to service or to RMA, one step per "
                    "run: waits while jobs run, never touches a drain that is not nodegate's, "
                    "re-qualifies at standard before a resume. Off unless the profile sets "
                    "remediation.enabled. Exit 0 done or nothing to do, 1 needs a person "
                    "(RMA, failed action or re-qualification), 2 bad input, 3 could not run.")
    parser.add_argument("--node", help="Slurm node name (default $SLURMD_NODENAME, then the "
                        "latest report's slurm_node label or node)")
    add_profile(parser, "profile")
    add_report_dir(parser, "the node's reports")
    parser.add_argument("--state-dir", type=Path, help="remediation state (default "
                        "$NODEGATE_REMEDIATION_DIR or /var/lib/nodegate/remediation)")
    add_holds_dir(parser)
    parser.add_argument("--bundle-dir", type=Path, help="where RMA bundles go (default: "
                        "the state dir's rma/)")
    add_slurm_client(parser, retries=False)
    parser.add_argument("--textfile-dir", type=Path,
                        help="write nodegate_remediation.prom (the phase as gauges) there")
    parser.add_argument("--dry-run", action="store_true",
                        help="say what would be done; change nothing (no state, no Slurm)")
    parser.add_argument("--enable", action="store_true",
                        help="remediate even where the profile leaves remediation.enabled "
                             "off: the control side's opt-in (deploy/remediate.py)")
    parser.add_argument("--duration-scale", type=arg_number(float, 0, 100, low_open=True),
                        default=1.0, help="passed to the standard re-qualification "
                                          "(nodegate validate --duration-scale; default "
                                          "%(default)s)")
    parser.add_argument("--node-file", type=Path,
                        help="the power wiring naming the node's BMC (default "
                             "$NODEGATE_NODE_FILE or /etc/nodegate/node.json)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from nodegate.cluster.cli import read_node_reports, scheduler_name
    from nodegate.cluster.gate import battery_reports, latest
    from nodegate.cluster.slurm import SlurmScheduler
    from nodegate.errors import ConfigError
    from nodegate.profiles.installed import select_profile
    from nodegate.remediation.engine import Context, step
    from nodegate.remediation.state import StateStore, default_state_dir
    from nodegate.report.outputs import default_report_dir

    report_dir: Path = args.report_dir or default_report_dir()
    check_outputs(args)  # every folder it writes, before anything is read or done
    hint = args.node or os.environ.get("SLURMD_NODENAME")
    reports, unreadable = read_node_reports(report_dir, hint)
    newest = latest(battery_reports(reports)) or latest(reports)
    if newest is None:
        raise ConfigError("no readable report to remediate from"
                          + "".join(f"; unreadable: {p}: {why}" for p, why in unreadable[:3]),
                          file=str(report_dir))
    node = hint or scheduler_name(newest)
    state_dir: Path = args.state_dir or default_state_dir()
    if os.path.lexists(state_dir) and not state_dir.is_dir():  # before anything is read
        raise ConfigError("not a folder: the remediation state folder must be one",
                          file=str(state_dir), key="--state-dir")
    from nodegate.cluster.holds import HoldStore

    holds = HoldStore(args.holds_dir)
    holds.check()
    profile: dict[str, Any] = dict(select_profile(args.profile or None).data)
    if args.enable:
        profile["remediation"] = {**(profile.get("remediation") or {}), "enabled": True}
    runners = real_runners(report_dir, profile=args.profile,
                           duration_scale=args.duration_scale, node_file=args.node_file)
    ctx = Context(node=node, scheduler=SlurmScheduler(conf=args.slurm_conf),
                  store=StateStore(state_dir), reports=lambda: reports, profile=profile,
                  runners=runners, bundle_dir=args.bundle_dir or state_dir / "rma",
                  dry_run=args.dry_run, holds=holds)
    outcome = step(ctx)
    print(f"nodegate remediate: {node}: {outcome.phase.value}: {outcome.message}")
    if args.textfile_dir is not None and not args.dry_run:
        from nodegate.errors import ExitCode, NodegateError
        from nodegate.remediation import metrics

        try:
            metrics.write(ctx.store.load(node), args.textfile_dir)
        except NodegateError as exc:  # the step is done and recorded: name it, never 2
            print(f"nodegate remediate: {node}: {outcome.phase.value} done and recorded; "
                  f"its textfile could not be written: {exc}", file=sys.stderr)
            return int(outcome.code) or int(ExitCode.CANNOT_RUN)
    return int(outcome.code)


def check_outputs(args: argparse.Namespace) -> None:
    """``--bundle-dir`` (a folder with room for a bundle) and ``--textfile-dir`` (a folder
    that takes a file), checked before remediation acts: a full or wrong one found after a
    drain or a reset would leave the act half told (exit 2 naming the option here)."""
    if args.dry_run:
        return
    from nodegate.remediation.bundle import MIN_ROOM, check_folder

    if args.bundle_dir is not None:
        check_folder(args.bundle_dir, key="--bundle-dir", room=MIN_ROOM)
    if args.textfile_dir is not None:
        check_folder(args.textfile_dir, key="--textfile-dir")


# --- the real runners -----------------------------------------------------------------------


def real_runners(report_dir: Path, *, profile: str | None = None,
                 duration_scale: float = 1.0, node_file: Path | None = None) -> Runners:
    from nodegate.probes.kernel_log import read_boot_id
    from nodegate.remediation.bundle import default_bug_report
    from nodegate.remediation.engine import Runners

    cycle, why_not = bmc_power_cycle(node_file)
    return Runners(board=read_board_view, reset_gpus=nvidia_smi_reset, reboot=systemctl_reboot,
                   power_cycle=cycle, no_power_cycle=why_not,
                   requalify=lambda: requalify(report_dir, profile, duration_scale),
                   boot_id=read_boot_id, kernel_log=kernel_log_text,
                   bug_report=default_bug_report, chassis=dmi_identity,
                   bmc=lambda: bmc_identity_of(node_file))


def node_bmc(node_file: Path | None) -> tuple[tuple[str, Any] | None, str]:
    """(name, target) of the node's BMC, or (None, why not). The BMC is the one the
    pdu_monitor role wired for the power poller (node.json -> the poller config's ``bmcs``),
    read with the poller's own loader, so its address, CA and password reference (env:/file:,
    resolved at the last moment, redacted everywhere) are the poller's; nothing is configured
    twice."""
    from nodegate.battery.power import load_wiring
    from nodegate.errors import ConfigError
    from nodegate.power.credentials import redact
    from nodegate.power.poller import load_config

    try:
        wiring = load_wiring(node_file)
        if wiring is None:
            return None, "no power wiring (node.json, the pdu_monitor role) names a BMC here"
        bmcs = load_config(wiring.power_config).bmcs
    except ConfigError as exc:
        return None, f"the node's BMC cannot be used: {redact(str(exc))}"
    if len(bmcs) != 1:
        return None, f"{wiring.power_config} lists {len(bmcs)} BMCs, not this node's one"
    return bmcs[0], ""


def bmc_identity_of(node_file: Path | None) -> dict[str, Any]:
    """The node's BMC as it names itself, for the RMA manifest; where it cannot be read, why
    (an RMA bundle is written all the same)."""
    from nodegate.power.bmc import BmcError, bmc_identity

    found, why_not = node_bmc(node_file)
    if found is None:
        return {"error": why_not}
    try:
        return bmc_identity(found[1])
    except BmcError as exc:
        return {"address": found[1].display, "error": str(exc)}


def bmc_power_cycle(node_file: Path | None) -> tuple[Callable[[], None] | None, str]:
    """The node's BMC power cycle (``node_bmc``), or (None, why not)."""
    from nodegate.power.bmc import power_cycle

    found, why_not = node_bmc(node_file)
    if found is None:
        return None, why_not
    name, target = found

    def cycle() -> None:
        posted = power_cycle(target)
        print(f"nodegate remediate: {name}: ComputerSystem.Reset {posted} accepted by "
              f"{target.display}", flush=True)

    return cycle, ""


def _run(argv: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    from nodegate.errors import CannotRunError

    try:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CannotRunError(f"{argv[0]}: {exc}") from None


def nvidia_smi_reset(uuids: Sequence[str]) -> None:
    """``nvidia-smi -r`` (every GPU) or ``-r -i UUID,UUID``: nvidia-smi(1), -r/--gpu-reset."""
    from nodegate.errors import CannotRunError

    argv = ["nvidia-smi", "-r", *(["-i", ",".join(uuids)] if uuids else [])]
    proc = _run(argv, 300.0)
    if proc.returncode != 0:
        raise CannotRunError(f"{' '.join(argv)} exited {proc.returncode}: "
                             f"{(proc.stderr or proc.stdout).strip()[:200]}")


def systemctl_reboot() -> None:
    from nodegate.errors import CannotRunError

    proc = _run(["systemctl", "reboot"], 60.0)
    if proc.returncode != 0:
        raise CannotRunError(f"systemctl reboot exited {proc.returncode}: "
                             f"{proc.stderr.strip()[:200]}")


def requalify(report_dir: Path, profile: str | None = None,
              duration_scale: float = 1.0) -> bool | None:
    """``nodegate validate --level standard``: exit 0 PASS, 1 FAIL, anything else None."""
    argv = [sys.executable, "-m", "nodegate.cli", "validate", "--level", "standard",
            "--report-dir", str(report_dir), "--duration-scale", f"{duration_scale:g}",
            *(["--profile", profile] if profile else [])]
    proc = subprocess.run(argv, check=False)
    return {0: True, 1: False}.get(proc.returncode)


def read_board_view() -> BoardView:
    """The live board; the recovery action is read defensively (absent on older probes)."""
    from nodegate.errors import CannotRunError
    from nodegate.probes.nvml import read_board
    from nodegate.remediation.engine import BoardView

    board = read_board()
    view = BoardView(driver_version=board.driver_version)
    for gpu in board.gpus:
        view.gpus[gpu.entity] = {**gpu.identity(), "inforom_image": gpu.inforom_image,
                                 "inforom_ecc": gpu.inforom_ecc}
        view.processes[gpu.entity] = [p.pid for p in gpu.processes]
        view.recovery_actions[gpu.entity] = getattr(gpu, "recovery_action", None)
    fm = _run(["systemctl", "is-active", "--quiet", "nvidia-fabricmanager"], 10.0)
    view.fabricmanager_running = fm.returncode == 0
    try:
        version = _run(["nv-fabricmanager", "--version"], 10.0)
        view.fabricmanager_version = version.stdout.strip().splitlines()[-1] \
            if version.returncode == 0 and version.stdout.strip() else None
    except CannotRunError:  # not installed: unknown, never a failure
        view.fabricmanager_version = None
    return view


def kernel_log_text() -> str | None:
    from nodegate.probes.kernel_log import read_kernel_log

    log = read_kernel_log()
    return "\n".join(log.lines) if log.problem is None else None


def dmi_identity() -> dict[str, Any] | None:
    """The chassis as the firmware names it (/sys/class/dmi/id); unreadable fields are left
    out (product_serial is root-only)."""
    from nodegate.errors import ConfigError
    from nodegate.fileio import read_text

    out: dict[str, Any] = {}
    for name in ("sys_vendor", "product_name", "product_serial", "board_serial",
                 "chassis_serial", "bios_version"):
        try:
            value = read_text(Path("/sys/class/dmi/id") / name, kind="config").strip()
        except ConfigError:
            continue
        if value:
            out[name] = value
    return out or None
