"""Keep one lab host booted: run systemd-nspawn, restart it when the guest reboots.

systemd-nspawn exits 133 when the container's systemd asks for a reboot; anything else means
poweroff or failure, and the supervisor stops. Before every boot the host's simulated board
is prepared afresh (new simulated boot id and kernel log), as a real power cycle would leave
the board. SIGTERM asks nspawn for a clean poweroff (nspawn turns it into the guest's
SIGRTMIN+3) and escalates to SIGKILL after a grace period.

Run as ``python -m nodegate_lab.supervisor HOST_DIR``; HOST_DIR/supervisor.json holds the
nspawn argv and the board spec, written by ``nodegate_lab.hosts``.
"""

from __future__ import annotations

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


class Supervisor:
    """One nspawn child at a time; state files in the host dir say what runs and how often."""

    def __init__(self, host_dir: Path) -> None:
        self.host_dir = host_dir
        self.spec = json.loads((host_dir / "supervisor.json").read_text())
        self.child: subprocess.Popen[bytes] | None = None
        self.stopping = False

    def _on_term(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signal.SIGTERM)

    def _prepare_board(self) -> None:
        board = self.spec.get("board")
        if board:
            from nodegate.sim.runtime import prepare

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
        try:
            while not self.stopping:
                self._prepare_board()
                boots += 1
                (self.host_dir / "boots").write_text(f"{boots}\n")
                with (self.host_dir / "console.log").open("ab") as log:
                    log.write(f"\n=== boot {boots} at {time.ctime()} ===\n".encode())
                    log.flush()
                    self.child = subprocess.Popen(self.spec["argv"], stdin=subprocess.DEVNULL,
                                                  stdout=log, stderr=log)
                (self.host_dir / "nspawn.pid").write_text(f"{self.child.pid}\n")
                code = self._wait()
                if code != REBOOT_EXIT:
                    break
        finally:
            for name in ("nspawn.pid", "supervisor.pid"):
                (self.host_dir / name).unlink(missing_ok=True)
        (self.host_dir / "last-exit").write_text(f"{code}\n")
        return 0 if code in (0, REBOOT_EXIT) or self.stopping else code

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
