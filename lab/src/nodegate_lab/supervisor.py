"""Keep one lab host booted: run systemd-nspawn, restart it when the guest reboots.

systemd-nspawn exits 133 when the container's systemd asks for a reboot; anything else means
poweroff or failure, and the supervisor stops. Before every boot the host's simulated board
is prepared afresh (new simulated boot id and kernel log), as a real power cycle would leave
the board. SIGTERM asks nspawn for a clean poweroff (nspawn turns it into the guest's
SIGRTMIN+3) and escalates to SIGKILL after a grace period.

The host's BMC (``nodegate_lab.bmc_emulator --host-dir``) drives its power through
:func:`request_reset`: the Redfish ResetType goes into ``HOST_DIR/reset-request`` and SIGUSR1
tells the supervisor. ForceRestart and ForceOff stop the guest at once (SIGKILL: no shutdown,
as a reset line or a pulled plug); GracefulRestart and GracefulShutdown let the guest power
off cleanly first. A PowerCycle (and an On after an off) is a *cold* boot: power left the
board, so the board's faults that live only while it is powered (``nodegate.sim.faults``,
``clears_on_power_cycle``: a GPU that fell off the bus) are gone from then on, while the
warm restarts keep them, as a reset that never removes power does.

Run as ``python -m nodegate_lab.supervisor HOST_DIR``; HOST_DIR/supervisor.json holds the
nspawn argv and the board spec, written by ``nodegate_lab.hosts``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

REBOOT_EXIT = 133
STOP_GRACE_S = 20.0
RESET_REQUEST = "reset-request"
#: ResetType -> (stop the guest hard, boot again, that boot is cold)
RESETS: dict[str, tuple[bool, bool, bool]] = {
    "ForceRestart": (True, True, False),
    "GracefulRestart": (False, True, False),
    "PowerCycle": (True, True, True),
    "ForceOff": (True, False, True),
    "GracefulShutdown": (False, False, True),
    "On": (False, True, True),
}


def request_reset(host_dir: Path, reset_type: str) -> None:
    """Ask the host's supervisor for a Redfish ``ResetType`` (the BMC emulator's handler);
    OSError when no supervisor runs for the host (the BMC answers 500)."""
    if reset_type not in RESETS:
        raise ValueError(f"unknown ResetType {reset_type!r}")
    pid = int((host_dir / "supervisor.pid").read_text().strip())
    tmp = host_dir / (RESET_REQUEST + ".tmp")
    tmp.write_text(reset_type + "\n")
    os.replace(tmp, host_dir / RESET_REQUEST)
    os.kill(pid, signal.SIGUSR1)


def _fabric_not_started(state: Path) -> None:
    """A board fresh from power-on: the NVSwitch fabric waits for the fabric manager.

    The lab's nvidia-fabricmanager package flips it to completed while its daemon runs.
    Uses the documented ``state`` key=value format (docs/simulator.md).
    """
    lines = state.read_text().splitlines()
    out = ["fabric_state=1" if ln.startswith("fabric_state=") else
           "fabric_status=27" if ln.startswith("fabric_status=") else ln for ln in lines]
    tmp = state.with_name(state.name + ".lab")
    tmp.write_text("\n".join(out) + "\n")
    os.replace(tmp, state)


def _kill_guest(nspawn: subprocess.Popen[bytes]) -> None:
    """Stop the guest at once: SIGKILL its PID 1 (the kernel then kills every process of its
    PID namespace, as power loss would), and nspawn, seeing its child gone, cleans up and
    exits. nspawn itself is killed only when no such child is found."""
    own = os.readlink("/proc/self/ns/pid")
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            parents[int(entry.name)] = int(stat[stat.rindex(")") + 2:].split()[1])
        except (OSError, ValueError):
            continue
    frontier: list[int] = [nspawn.pid]
    inits: list[int] = []
    while frontier:
        pid = frontier.pop()
        for child in (c for c, parent in parents.items() if parent == pid):
            try:
                other = os.readlink(f"/proc/{child}/ns/pid") != own
            except OSError:
                continue
            (inits if other else frontier).append(child)
    for pid in inits or [nspawn.pid]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


class Supervisor:
    """One nspawn child at a time; state files in the host dir say what runs and how often."""

    def __init__(self, host_dir: Path) -> None:
        self.host_dir = host_dir
        self.spec = json.loads((host_dir / "supervisor.json").read_text())
        self.child: subprocess.Popen[bytes] | None = None
        self.stopping = False
        self.pending: str | None = None  # a ResetType taken, acted on when the guest is gone
        self.powered = True

    def _on_reset(self, signum: int, frame: FrameType | None) -> None:
        path = self.host_dir / RESET_REQUEST
        try:
            reset_type = path.read_text().strip()
            path.unlink()
        except OSError:
            return
        if reset_type not in RESETS:
            return
        if not self.powered:
            if reset_type == "On":
                self.pending = reset_type
            return
        if reset_type == "On" or self.pending is not None:
            return  # already on, or a reset already under way
        self.pending = reset_type
        self._stop_guest()

    def _stop_guest(self) -> None:
        """Stop the running guest for the pending reset (a no-op between boots: the boot
        that follows checks again)."""
        if self.pending is None or self.child is None or self.child.poll() is not None:
            return
        if RESETS[self.pending][0]:
            _kill_guest(self.child)  # no shutdown: the reset line, or the power gone
        else:
            self.child.send_signal(signal.SIGTERM)  # the guest's clean poweroff

    def _on_term(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signal.SIGTERM)

    def _prepare_board(self, cold: bool = False) -> None:
        board = self.spec.get("board")
        if board:
            from nodegate.sim.runtime import power_cycled, prepare

            if cold:  # power left the board: what lived only while powered is gone for good
                kept = power_cycled(str(board["spec"]))
                if kept != board["spec"]:
                    board["spec"] = kept
                    (self.host_dir / "supervisor.json").write_text(
                        json.dumps(self.spec, indent=1) + "\n")
                    (self.host_dir / "spec").write_text(kept + "\n")
            state_dir = Path(board["state_dir"])
            prepare(board["spec"], state_dir)
            if board.get("fabric_needs_manager"):
                _fabric_not_started(state_dir / "state")
            root = next((a.split("=", 1)[1] for a in self.spec["argv"]
                         if a.startswith("--directory=")), None)
            if root:  # the driver apt installed, as a real boot loads the installed module
                from nodegate_lab.driver_boot import follow_installed

                follow_installed(Path(root), state_dir)

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, self._on_term)
        signal.signal(signal.SIGUSR1, self._on_reset)
        group = self.spec.get("cgroup")
        if group:  # never boot into the root cgroup every other host shares (nodegate_lab.cgroups)
            from nodegate_lab import cgroups

            try:
                cgroups.enter(group)
            except OSError as exc:
                print(f"supervisor: cannot join cgroup {group}: {exc}", file=sys.stderr,
                      flush=True)
                (self.host_dir / "last-exit").write_text("1\n")
                return 1
        (self.host_dir / "supervisor.pid").write_text(f"{os.getpid()}\n")
        boots = 0
        code = 0
        cold = False
        try:
            while not self.stopping:
                self._prepare_board(cold)
                boots += 1
                (self.host_dir / "boots").write_text(f"{boots}\n")
                with (self.host_dir / "console.log").open("ab") as log:
                    log.write(f"\n=== boot {boots} at {time.ctime()} ===\n".encode())
                    log.flush()
                    self.child = subprocess.Popen(self.spec["argv"], stdin=subprocess.DEVNULL,
                                                  stdout=log, stderr=log)
                (self.host_dir / "nspawn.pid").write_text(f"{self.child.pid}\n")
                self._stop_guest()  # a reset that came while no guest ran
                code = self._wait()
                reset, self.pending = self.pending, None
                if reset is not None and not self.stopping:
                    _hard, again, cold = RESETS[reset]
                    if not again and not self._wait_for_on():
                        break
                    code = REBOOT_EXIT
                    continue
                cold = False
                if code != REBOOT_EXIT:
                    break
        finally:
            for name in ("nspawn.pid", "supervisor.pid"):
                (self.host_dir / name).unlink(missing_ok=True)
        (self.host_dir / "last-exit").write_text(f"{code}\n")
        return 0 if code in (0, REBOOT_EXIT) or self.stopping else code

    def _wait_for_on(self) -> bool:
        """Powered off by the BMC: wait for its On (True) or for the stop (False)."""
        self.powered = False
        (self.host_dir / "nspawn.pid").unlink(missing_ok=True)
        try:
            while not self.stopping:
                if self.pending == "On":
                    self.pending = None
                    return True
                time.sleep(0.2)
            return False
        finally:
            self.powered = True

    def _wait(self) -> int:
        assert self.child is not None
        deadline: float | None = None
        while True:
            try:
                return self.child.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                if self.stopping and deadline is None:
                    deadline = time.monotonic() + STOP_GRACE_S
                if deadline is not None and time.monotonic() > deadline:
                    self.child.kill()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m nodegate_lab.supervisor HOST_DIR", file=sys.stderr)
        return 2
    return Supervisor(Path(args[0])).run()


if __name__ == "__main__":
    sys.exit(main())
