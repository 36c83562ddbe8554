"""Lab services on the uplink (the package mirror; later the PDU and BMCs).

Each is a detached process bound to a lab address only, with a pid file under
``lab_dir()/services`` so ``lab down`` stops exactly what ``lab up`` started.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from nodegate.lab import config


@dataclass
class ServiceStatus:
    name: str
    address: str
    state: str
    detail: str


def _dir() -> Path:
    return config.lab_dir() / "services"


def _pid(name: str) -> int | None:
    try:
        pid = int((_dir() / f"{name}.pid").read_text())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def _listening(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=0.5):
            return True
    except OSError:
        return False


def start_mirror(directory: Path) -> None:
    """Serve ``directory`` on the uplink address (never on 0.0.0.0)."""
    if _pid("mirror") is not None:
        return
    _dir().mkdir(parents=True, exist_ok=True)
    with (_dir() / "mirror.log").open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "http.server", "--bind", config.HOST_ADDRESS,
             "--directory", str(directory), str(config.MIRROR_PORT)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    (_dir() / "mirror.pid").write_text(f"{proc.pid}\n")
    (_dir() / "mirror.dir").write_text(f"{directory}\n")
    deadline = time.monotonic() + 10
    while not _listening(config.HOST_ADDRESS, config.MIRROR_PORT):
        if time.monotonic() > deadline or proc.poll() is not None:
            break
        time.sleep(0.05)


def stop_all() -> None:
    """Stop every service the lab started (SIGTERM, then SIGKILL)."""
    if not _dir().is_dir():
        return
    for pid_file in _dir().glob("*.pid"):
        pid = _pid(pid_file.stem)
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 5
            while _pid(pid_file.stem) is not None and time.monotonic() < deadline:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
                time.sleep(0.05)
            if _pid(pid_file.stem) is not None:
                os.kill(pid, signal.SIGKILL)
        pid_file.unlink(missing_ok=True)


def status() -> list[ServiceStatus]:
    rows = []
    mirror_dir = _dir() / "mirror.dir"
    up = _pid("mirror") is not None and _listening(config.HOST_ADDRESS, config.MIRROR_PORT)
    detail = (f"apt: deb [trusted=yes] http://{config.HOST_ADDRESS}:{config.MIRROR_PORT}/ ./; "
              f"wheels: /wheels/ ({mirror_dir.read_text().strip()})"
              if mirror_dir.is_file() else "not built (lab up --no-mirror)")
    rows.append(ServiceStatus("mirror", f"{config.HOST_ADDRESS}:{config.MIRROR_PORT}",
                              "running" if up else "stopped", detail))
    rows.append(ServiceStatus("pdu", f"{config.PDU_ADDRESS}:{config.PDU_PORT}", "absent",
                              "snmpsim APC AP8641: not provisioned yet"))
    return rows
