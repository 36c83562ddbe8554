"""Read the kernel log of the current boot and extract NVIDIA Xid and NVSwitch SXid events.

Sources, first that applies: ``NODEGATE_KERNEL_LOG`` (a file in dmesg format, used by the
simulator and for replaying a saved log), ``journalctl -k -b 0 -o short-monotonic``, then
``dmesg``. Those carry ``[seconds.micros]`` since boot, which the window filter uses. Saved
logs in other real formats parse too: ``dmesg --ctime`` (``[Tue Mar  5 10:00:00 2024]``) and
``journalctl -o short-iso`` (``2024-03-05T10:00:00+0000 host kernel: ...``) keep their
wall-clock stamp as text (no seconds since boot, so the window keeps them).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from nodegate.errors import ConfigError
from nodegate.fileio import read_bytes

# NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python3, GPU has fallen off the bus.
# NVRM: Xid (0000:3b:00): 13, Graphics SM Warp Exception on (GPC 0, TPC 1)
# NVRM: Xid (PCI:3b:00): 31, Ch 00000010, intr 10000000. MMU Fault ...
XID_RE = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<bus>(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.\d)?)\):"
    r" (?P<xid>\d+),\s*(?P<rest>.*)$"
)
TIME_RE = re.compile(r"^\[\s*(?P<t>\d+\.\d+)\]")
# dmesg --ctime: [Tue Mar  5 10:00:00 2024]; journalctl short-iso: 2024-03-05T10:00:00+0000
STAMP_RE = re.compile(
    r"^(?:\[(?P<ctime>[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} \d{4})\]"
    r"|(?P<iso>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[+-]\d{2}:?\d{2}|Z)?))"
)
# nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error
# nvidia-nvswitch0: SXid (PCI:0000:a9:00.0): 20034, Data {0x50610002, 0x10100030}
SXID_RE = re.compile(
    r"nvidia-nvswitch(?P<switch>\d+): SXid \((?:PCI:)?(?P<bus>[0-9a-fA-F:.]+)\):"
    r" (?P<sxid>\d+),\s*(?P<rest>.*)$"
)
SEVERITY_RE = re.compile(r"^(?P<sev>Fatal|Non-fatal),\s*", re.IGNORECASE)
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
    stamp: str | None = None  # wall-clock text where the log format carries one


@dataclass(frozen=True)
class SXidEvent:
    """One NVSwitch SXid line; ``severity`` is what the driver printed (``fatal`` or
    ``non-fatal``), None on its follow-up ``Data {...}`` lines that state none."""

    switch: int
    bus_id: str
    sxid: int
    severity: str | None
    seconds: float | None
    message: str
    line: str
    stamp: str | None = None


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
            text = read_bytes(override, kind="kernel_log").decode("utf-8", errors="replace")
        except (OSError, ConfigError) as exc:
            why = exc.message if isinstance(exc, ConfigError) else exc.strerror or exc
            return KernelLog(f"file:{override}", [], boot_id, None,
                             problem=f"cannot read {override}: {why}")
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


def _times(line: str) -> tuple[float | None, str | None]:
    """Seconds since boot (``[ 12.34]``) and/or the wall-clock stamp text of a log line."""
    time = TIME_RE.search(line)
    stamp = STAMP_RE.search(line)
    text = (stamp.group("ctime") or stamp.group("iso")) if stamp else None
    return (float(time.group("t")) if time else None), text


def parse_xids(lines: list[str]) -> list[XidEvent]:
    events = []
    for line in lines:
        match = XID_RE.search(line)
        if match is None:
            continue
        seconds, stamp = _times(line)
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
            seconds=seconds,
            pid=pid.group("pid") if pid else None,
            process=name.group("name").strip() if name else None,
            message=message.strip(),
            line=line.strip(),
            stamp=stamp,
        ))
    return events


def parse_sxids(lines: list[str]) -> list[SXidEvent]:
    """NVSwitch SXid lines, with the severity the driver printed in them."""
    events = []
    for line in lines:
        match = SXID_RE.search(line)
        if match is None:
            continue
        seconds, stamp = _times(line)
        rest = match.group("rest")
        sev = SEVERITY_RE.match(rest)
        events.append(SXidEvent(
            switch=int(match.group("switch")),
            bus_id=match.group("bus"),
            sxid=int(match.group("sxid")),
            severity=sev.group("sev").lower() if sev else None,
            seconds=seconds,
            message=(rest[sev.end():] if sev else rest).strip(),
            line=line.strip(),
            stamp=stamp,
        ))
    return events


_E = TypeVar("_E", XidEvent, SXidEvent)


def within_window(events: list[_E], window_s: float | None, now_s: float | None) -> list[_E]:
    """Events in the last ``window_s`` seconds of this boot (all of it when None)."""
    if window_s is None or now_s is None:
        return events
    start = now_s - window_s
    return [e for e in events if e.seconds is None or e.seconds >= start]
