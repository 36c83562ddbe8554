"""Read the kernel log of the current boot and extract NVIDIA Xid events.

Sources, first that applies: ``NODEGATE_KERNEL_LOG`` (a file in dmesg format, used by the
simulator and for replaying a saved log), ``journalctl -k -b 0 -o short-monotonic``, then
``dmesg``. All carry ``[seconds.micros]`` since boot, which the window filter uses.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

# NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python3, GPU has fallen off the bus.
# NVRM: Xid (0000:3b:00): 13, Graphics SM Warp Exception on (GPC 0, TPC 1)
# NVRM: Xid (PCI:3b:00): 31, Ch 00000010, intr 10000000. MMU Fault ...
XID_RE = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<bus>(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.\d)?)\):"
    r" (?P<xid>\d+),\s*(?P<rest>.*)$"
)
TIME_RE = re.compile(r"^\[\s*(?P<t>\d+\.\d+)\]")
PID_RE = re.compile(r"pid=(?P<pid>'?<?\w+>?'?)")
NAME_RE = re.compile(r"name=(?P<name>[^,]*)")


@dataclass(frozen=True)
class XidEvent:
    bus_id: str
    xid: int
    seconds: float | None
    pid: str | None
    process: str | None
    message: str
    line: str


@dataclass(frozen=True)
class KernelLog:
    source: str
    lines: list[str]
    boot_id: str | None
    uptime_s: float | None
    #: Why no source could be read (None: read). An unreadable log proves nothing about Xids.
    problem: str | None = None


def read_boot_id() -> str | None:
    path = Path(os.environ.get("NODEGATE_BOOT_ID_FILE", "/proc/sys/kernel/random/boot_id"))
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def _uptime() -> float | None:
    try:
        return float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def read_kernel_log(timeout_s: float = 20.0) -> KernelLog:
    """The current boot's kernel messages. No readable source is not a crash and not an empty
    log: ``problem`` says why each source failed, so the caller reports ERROR."""
    boot_id = read_boot_id()
    override = os.environ.get("NODEGATE_KERNEL_LOG")
    if override:
        try:
            text = Path(override).read_text(errors="replace")
        except OSError as exc:
            return KernelLog(f"file:{override}", [], boot_id, None,
                             problem=f"cannot read {override}: {exc.strerror or exc}")
        return KernelLog(f"file:{override}", text.splitlines(), boot_id, None)
    failed: list[str] = []
    for argv in (["journalctl", "-k", "-b", "0", "-o", "short-monotonic", "--no-pager", "-q"],
                 ["dmesg"]):
        exe = shutil.which(argv[0])
        if exe is None:
            failed.append(f"{argv[0]}: not installed")
            continue
        try:
            proc = subprocess.run([exe, *argv[1:]], capture_output=True, text=True,
                                  timeout=timeout_s, check=False, errors="replace")
        except subprocess.TimeoutExpired:
            failed.append(f"{argv[0]}: no answer within {timeout_s:g}s")
            continue
        except OSError as exc:
            failed.append(f"{argv[0]}: {exc.strerror or exc}")
            continue
        if proc.returncode == 0:
            return KernelLog(argv[0], proc.stdout.splitlines(), boot_id, _uptime())
        detail = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        failed.append(f"{argv[0]}: {detail[:200]}")
    return KernelLog("none", [], boot_id, _uptime(), problem="; ".join(failed))


def parse_xids(lines: list[str]) -> list[XidEvent]:
    events = []
    for line in lines:
        match = XID_RE.search(line)
        if match is None:
            continue
        time = TIME_RE.search(line)
        rest = match.group("rest")
        pid = PID_RE.search(rest)
        name = NAME_RE.search(rest)
        message = rest
        if pid or name:
            # strip the "pid=..., name=..., " prefix the 470+ drivers add
            message = re.sub(r"^(pid=[^,]*,\s*)?(name=[^,]*,\s*)?", "", rest)
        events.append(XidEvent(
            bus_id=match.group("bus"),
            xid=int(match.group("xid")),
            seconds=float(time.group("t")) if time else None,
            pid=pid.group("pid") if pid else None,
            process=name.group("name").strip() if name else None,
            message=message.strip(),
            line=line.strip(),
        ))
    return events


def within_window(events: list[XidEvent], window_s: float | None,
                  now_s: float | None) -> list[XidEvent]:
    """Events in the last ``window_s`` seconds of this boot (all of it when None)."""
    if window_s is None or now_s is None:
        return events
    start = now_s - window_s
    return [e for e in events if e.seconds is None or e.seconds >= start]
