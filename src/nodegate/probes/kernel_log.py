"""Read the kernel log of the current boot and extract NVIDIA Xid and NVSwitch SXid events.

A GPU that fell off the bus is also reported without any Xid line: the driver's probe prints
``NVRM: The NVIDIA GPU 0000:b3:00.0`` / ``NVRM: (PCI ID: 10de:26b5) installed in this system
has`` / ``NVRM: fallen off the bus and is not responding to commands.`` (one printk over three
lines, open-gpu-kernel-modules ``kernel-open/nvidia/nv.c``; seen on 570 drivers,
github.com/NVIDIA/NVSentinel/issues/155). ``parse_xids`` turns it into an Xid 79 event (``origin``
``fallen-off-bus``) unless a real Xid 79 line names the same bus.

Sources, first that applies: ``NODEGATE_KERNEL_LOG`` (a saved log or the simulator's, in any
format of ``LINE_FORMATS``), ``journalctl -k -b 0 -o short-monotonic``, then ``dmesg``.

Every accepted line format is listed in ``LINE_FORMATS`` with how its time is read: seconds
since boot (``monotonic``) or a wall-clock instant (``epoch``). ``within_window`` judges each
event by the time its format carries; an event whose time cannot be read, or is not
believable, counts as inside every window (never outside). Numbers are ASCII digits of a
bounded length: a line that looks like an Xid but whose code or bus cannot be read is kept
as an unparsed event (``xid`` None), never a crash.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import time as _time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import NamedTuple, TypeVar

from nodegate.errors import ConfigError
from nodegate.fileio import read_bytes

#: Longest Xid/SXid code accepted (the catalogue's codes have 3 digits, SXids 5).
CODE_DIGITS = 6
#: Characters read from the marker on (and of the time prefix): a kernel record's text is at
#: most 1,024 bytes (printk). The marker is found in the whole line and matched once, so a
#: hostile line costs linear time and a long prefix never hides an Xid.
LINE_MAX = 4096
#: A stamp more than this many seconds before this boot began cannot belong to this boot's
#: log: the clock was wrong when it was written, so its time is unknown.
BOOT_SLACK_S = 300.0

_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_MON = "(?P<mon>" + "|".join(_MONTHS) + ")"
# dmesg --decode / -x puts "facility:level : " in front of any time format
_DECODE = r"(?:[a-z]{2,8}\s*:[a-z]{0,7}\s*: )?"
_HMS = r"(?P<h>[0-9]{2}):(?P<mi>[0-9]{2}):(?P<s>[0-9]{2})"
_FRAC = r"(?:[.,](?P<frac>[0-9]{1,9}))?"


class LineFormat(NamedTuple):
    """One kernel-log line format: its name, where it comes from, an example, the pattern
    of its time prefix and which clock that time is on."""

    name: str
    producer: str
    example: str
    regex: str
    clock: str  # "monotonic" (seconds since boot) or "wall" (an instant)

    @property
    def pattern(self) -> re.Pattern[str]:
        return compiled(self.regex)


@functools.cache
def compiled(regex: str, flags: int = 0) -> re.Pattern[str]:
    """``regex`` compiled on first use: a healthy log has no Xid line, and compiling every
    pattern here at import was ~5 ms of each cron health check."""
    return re.compile(regex, flags)


#: The formats the parser accepts, tried in this order at the start of each line. A line in
#: none of them is still searched for Xids; its time is unknown (inside every window).
LINE_FORMATS: tuple[LineFormat, ...] = (
    LineFormat("monotonic", "dmesg; journalctl -o short-monotonic",
               "[ 8123.456789] NVRM: Xid (PCI:0000:18:00): 79, ...",
               _DECODE + r"\[\s{0,12}(?P<sec>[0-9]{1,10})\.(?P<frac>[0-9]{1,9})\]",
               "monotonic"),
    LineFormat("ctime", "dmesg --ctime / -T (local time)",
               "[Fri Aug 30 11:43:14 2024] NVRM: Xid ...",
               _DECODE + r"\[(?P<stamp>(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) " + _MON
               + r" (?P<d>[ 0-9][0-9]) " + _HMS + r" (?P<y>[0-9]{4}))\]", "wall"),
    LineFormat("iso", "dmesg --time-format=iso; rsyslog RFC 3339; journalctl -o short-iso, "
               "short-iso-precise (no zone: local time)",
               "2025-01-21T04:26:49,803751+00:00 NVRM: Xid ...",
               _DECODE + r"(?P<stamp>(?P<y>[0-9]{4})-(?P<mo>[0-9]{2})-(?P<d>[0-9]{2})T"
               + _HMS + _FRAC + r"(?P<tz>Z|[+-][0-9]{2}:?[0-9]{2})?)(?=\s)", "wall"),
    LineFormat("syslog", "classic syslog (RFC 3164); journalctl -o short, short-precise "
               "(local time, no year: the latest such date not after now)",
               "Dec  6 05:20:53 host kernel: NVRM: Xid ...",
               _DECODE + r"(?P<stamp>" + _MON + r" (?P<d>[ 0-9][0-9]) " + _HMS + _FRAC
               + r")(?=\s)",
               "wall"),
)

_BUS = r"(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"
_CODE = rf"[0-9]{{1,{CODE_DIGITS}}}"
# NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python3, GPU has fallen off the bus.
# NVRM: Xid (0000:3b:00): 13, Graphics SM Warp Exception on (GPC 0, TPC 1)
# Anything after the marker is read strictly below; the marker alone makes it an event.
# (patterns as text, compiled on first use: ``compiled``)
XID_RE = r"NVRM: Xid \((?P<bus>[^)]*)\):? ?(?P<code>[^,]*)(?:,\s*(?P<rest>.*))?$"
BUS_RE = r"(?:PCI:)?(?P<bus>" + _BUS + ")"
# nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error
# nvidia-nvswitch0: SXid (PCI:0000:a9:00.0): 20034, Data {0x50610002, 0x10100030}
SXID_RE = (r"nvidia-nvswitch(?P<switch>[^:\s]*): SXid \((?P<bus>[^)]*)\):? ?"
           r"(?P<code>[^,]*)(?:,\s*(?P<rest>.*))?$")
SWITCH_RE = r"[0-9]{1,4}"
SEVERITY_RE = r"^(?P<sev>Fatal|Non-fatal),\s*"  # case-insensitive
# NVLink5 Xids (144-150) state their severity after the unit that raised them:
# "SAW_MVB Nonfatal XC0 i0 Link 00 (...)", "NETIR_LINK_EVT/NETIR_LINK_DOWN Fatal XC0 ..."
STATED_SEVERITY_RE = r"^[A-Z0-9_/]{1,64} (?P<sev>Fatal|Non-?fatal)\b"
# the driver's probe message for a lost GPU, printed without an Xid line (see module doc)
FALLEN_GPU_RE = r"NVRM: The NVIDIA GPU (?P<bus>[0-9a-fA-F:.]{5,20})\b"
FALLEN_TEXT = "fallen off the bus"
#: Lines after ``NVRM: The NVIDIA GPU <bus>`` searched for the rest of that message.
FALLEN_LOOKAHEAD = 3
PID_RE = r"pid=(?P<pid>'?<?\w{1,32}>?'?)"
NAME_RE = r"name=(?P<name>[^,]{0,64})"


class XidEvent(NamedTuple):
    """One Xid line. ``xid`` is None when the line's code or bus could not be read
    (``unparsed`` says why). ``seconds`` (since boot) and ``epoch`` (wall clock) are the
    event's time where its format carries one; both None: time unknown."""

    bus_id: str
    xid: int | None
    seconds: float | None
    pid: str | None
    process: str | None
    message: str
    line: str
    stamp: str | None = None  # wall-clock text where the log format carries it
    epoch: float | None = None
    unparsed: str | None = None
    #: ``fatal`` / ``non-fatal`` where the line states it (NVLink5 Xids 144-150), else None
    severity: str | None = None
    #: ``fallen-off-bus``: built from the driver's lost-GPU message, not from an Xid line
    origin: str | None = None


class SXidEvent(NamedTuple):
    """One NVSwitch SXid line; ``severity`` is what the driver printed (``fatal`` or
    ``non-fatal``), None on its follow-up ``Data {...}`` lines that state none."""

    switch: int | None
    bus_id: str
    sxid: int | None
    severity: str | None
    seconds: float | None
    message: str
    line: str
    stamp: str | None = None
    epoch: float | None = None
    unparsed: str | None = None


class KernelLog(NamedTuple):
    """This boot's kernel log lines, from the first source that could be read."""

    source: str
    lines: list[str]
    boot_id: str | None
    uptime_s: float | None
    #: Why no source could be read (None: read). An unreadable log proves nothing about Xids.
    problem: str | None = None


def read_boot_id() -> str | None:
    """This boot's id (``$NODEGATE_BOOT_ID_FILE`` in tests and the simulator), through the
    one reader: a FIFO or a device there is refused, never waited on. A file the variable
    names that is not a short line of text is a ConfigError naming it (exit 2, no
    traceback); the kernel's own file unreadable is no boot id (None)."""
    from nodegate.errors import ConfigError
    from nodegate.fileio import read_bytes
    from nodegate.paths import env_path

    named = env_path("NODEGATE_BOOT_ID_FILE")
    path = named or Path("/proc/sys/kernel/random/boot_id")
    try:
        text = read_bytes(path, kind="config", limit=4096).decode("ascii").strip()
        if len(text) > 64 or not text.isprintable():
            raise ConfigError("not a boot id (one line of at most 64 printable characters)",
                              file=str(path))
    except UnicodeDecodeError:
        text = ""
        if named is not None:
            raise ConfigError("not a boot id (not ASCII text)", file=str(path),
                              key="NODEGATE_BOOT_ID_FILE") from None
    except ConfigError as exc:
        if named is not None and "not found" not in exc.message:
            raise ConfigError(exc.message, file=str(path), key="NODEGATE_BOOT_ID_FILE") \
                from None
        return None
    return text or None


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


class LineTime(NamedTuple):
    """The time a line's format carries: seconds since boot, or an instant (epoch seconds)
    with its text; no time at all when the line is in no known format or its stamp names no
    real date (Feb 30, 25:61): unknown, never a guess."""

    format: str | None = None
    seconds: float | None = None
    epoch: float | None = None
    stamp: str | None = None


def line_time(line: str, *, now_wall: float | None = None) -> LineTime:
    """Which of ``LINE_FORMATS`` the line starts with, and its time. ``now_wall`` (default:
    now) places a syslog date, which has no year, in the latest year not after now."""
    for fmt in LINE_FORMATS:
        match = fmt.pattern.match(line)
        if match is None:
            continue
        fields = match.groupdict()
        if fmt.clock == "monotonic":
            return LineTime(fmt.name, seconds=float(f"{fields['sec']}.{fields['frac']}"))
        epoch = _epoch(fields, _time.time() if now_wall is None else now_wall)
        return LineTime(fmt.name, epoch=epoch,
                        stamp=fields["stamp"] if epoch is not None else None)
    return LineTime()


def _epoch(fields: dict[str, str | None], now_wall: float) -> float | None:
    """Seconds since the epoch of a wall-clock stamp; None when it names no real instant."""
    frac = fields.get("frac") or ""
    micro = int(frac[:6].ljust(6, "0")) if frac else 0
    month = _MONTHS.index(fields["mon"]) + 1 if fields.get("mon") else int(fields["mo"] or 0)
    try:
        zone = _zone(fields.get("tz"))
        if fields.get("y") is None:  # syslog: no year; the latest such date not after now
            now = datetime.fromtimestamp(now_wall)
            stamp = _local(now.year, month, fields, micro)
            if stamp is not None and stamp.timestamp() > now_wall + 86400:
                stamp = _local(now.year - 1, month, fields, micro)
            return stamp.timestamp() if stamp is not None else None
        value = datetime(int(fields["y"] or 0), month, int(fields["d"] or 0),
                         int(fields["h"] or 0), int(fields["mi"] or 0), int(fields["s"] or 0),
                         micro, tzinfo=zone)
        return value.timestamp()
    except (ValueError, OverflowError, OSError):  # Feb 30, hour 25, year 0, out of range
        return None


def _local(year: int, month: int, fields: dict[str, str | None],
           micro: int) -> datetime | None:
    try:
        return datetime(year, month, int(fields["d"] or 0), int(fields["h"] or 0),
                        int(fields["mi"] or 0), int(fields["s"] or 0), micro)
    except ValueError:  # Feb 29 outside a leap year
        return None


def _zone(text: str | None) -> timezone | None:
    """``Z``, ``+00:00``, ``-0500`` as a fixed offset; None (local time) when absent."""
    if not text:
        return None
    if text == "Z":
        return timezone.utc
    digits = text[1:].replace(":", "")
    offset = timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
    return timezone(-offset if text[0] == "-" else offset)


def _code(text: str | None) -> int | None:
    """An Xid/SXid code: ASCII digits only, at most ``CODE_DIGITS`` of them."""
    text = (text or "").strip()
    return int(text) if compiled(_CODE).fullmatch(text) else None


def _bus(text: str) -> str | None:
    match = compiled(BUS_RE).fullmatch(text.strip())
    return match.group("bus") if match else None


def _unparsed(code: int | None, bus: str | None, what: str) -> str | None:
    if code is None:
        return f"{what} code is not 1-{CODE_DIGITS} ASCII digits"
    if bus is None:
        return "PCI bus id is not domain:bus:device"
    return None


def parse_xids(lines: list[str], *, now_wall: float | None = None) -> list[XidEvent]:
    """Every line holding ``NVRM: Xid``; one whose code or bus cannot be read is kept with
    ``xid`` None and the reason in ``unparsed``."""
    events = []
    for line in lines:
        at = line.find("NVRM: Xid (")
        if at < 0:
            continue
        body = line[at:at + LINE_MAX]
        match = compiled(XID_RE).match(body)
        when = line_time(line[:LINE_MAX], now_wall=now_wall)
        code = _code(match.group("code")) if match else None
        bus = _bus(match.group("bus")) if match else None
        rest = (match.group("rest") or "") if match else body
        pid = compiled(PID_RE).search(rest)
        name = compiled(NAME_RE).search(rest)
        message = rest
        if pid or name:
            # strip the "pid=..., name=..., " prefix the 470+ drivers add
            message = re.sub(r"^(pid=[^,]*,\s*)?(name=[^,]*,\s*)?", "", rest)
        unparsed = _unparsed(code, bus, "Xid")
        stated = compiled(STATED_SEVERITY_RE).match(message.strip())
        events.append(XidEvent(
            bus_id=bus or "unknown",
            xid=code if unparsed is None else None,
            seconds=when.seconds,
            pid=pid.group("pid") if pid else None,
            process=name.group("name").strip() if name else None,
            message=message.strip()[:500],
            line=line.strip()[:500],
            stamp=when.stamp,
            epoch=when.epoch,
            unparsed=unparsed,
            severity=_severity(stated.group("sev")) if stated else None,
        ))
    return events + _fallen_off_bus(lines, events, now_wall=now_wall)


def _severity(text: str) -> str:
    return "fatal" if text.lower() == "fatal" else "non-fatal"


def _fallen_off_bus(lines: list[str], xids: list[XidEvent], *,
                    now_wall: float | None) -> list[XidEvent]:
    """The driver's lost-GPU message with no Xid line, as Xid 79 events: one per bus, and none
    where an Xid 79 line already names that bus (the same loss, reported twice)."""
    from nodegate.probes.nvml import normalize_bus_id  # ``0000:b3:00.0`` = ``0000:b3:00``

    seen = {normalize_bus_id(e.bus_id) for e in xids if e.xid == 79}
    out = []
    for i, line in enumerate(lines):
        at = line.find("NVRM: The NVIDIA GPU ")
        if at < 0:
            continue
        match = compiled(FALLEN_GPU_RE).search(line[at:at + LINE_MAX])
        bus = _bus(match.group("bus")) if match else None
        if bus is None or normalize_bus_id(bus) in seen:
            continue
        used = _message_lines(line[at:at + LINE_MAX], lines[i + 1:i + 1 + FALLEN_LOOKAHEAD])
        if used is None:
            continue
        seen.add(normalize_bus_id(bus))
        when = line_time(line[:LINE_MAX], now_wall=now_wall)
        sample = " / ".join(part[:LINE_MAX].strip() for part in lines[i:i + 1 + used])
        out.append(XidEvent(
            bus_id=bus, xid=79, seconds=when.seconds, pid=None, process=None,
            message="GPU has fallen off the bus and is not responding to commands "
                    "(driver message without an Xid line)",
            line=sample[:500], stamp=when.stamp, epoch=when.epoch, origin="fallen-off-bus",
        ))
    return out


def _message_lines(first: str, following: list[str]) -> int | None:
    """How many lines after ``first`` the lost-GPU message runs on to its "fallen off the
    bus"; None when it does not say so before another GPU's message starts."""
    if FALLEN_TEXT in first:
        return 0
    for n, line in enumerate(following, start=1):
        head = line[:LINE_MAX]
        if "NVRM: The NVIDIA GPU " in head:
            return None
        if FALLEN_TEXT in head:
            return n
    return None


def parse_sxids(lines: list[str], *, now_wall: float | None = None) -> list[SXidEvent]:
    """NVSwitch SXid lines, with the severity the driver printed in them; one whose switch,
    code or bus cannot be read is kept with ``sxid`` None and the reason in ``unparsed``."""
    events = []
    for line in lines:
        sxid_at = line.find(": SXid (")
        at = line.rfind("nvidia-nvswitch", max(0, sxid_at - 40), max(sxid_at, 0))
        match = (compiled(SXID_RE).match(line[at:at + LINE_MAX])
                 if sxid_at >= 0 and at >= 0 else None)
        if match is None:
            continue
        when = line_time(line[:LINE_MAX], now_wall=now_wall)
        switch = match.group("switch")
        number = int(switch) if compiled(SWITCH_RE).fullmatch(switch) else None
        code = _code(match.group("code"))
        bus = _bus(match.group("bus"))
        unparsed = _unparsed(code, bus, "SXid") or (
            None if number is not None else "NVSwitch number is not 1-4 ASCII digits")
        rest = match.group("rest") or ""
        sev = compiled(SEVERITY_RE, re.IGNORECASE).match(rest)
        events.append(SXidEvent(
            switch=number,
            bus_id=bus or "unknown",
            sxid=code if unparsed is None else None,
            severity=sev.group("sev").lower() if sev else None,
            seconds=when.seconds,
            message=(rest[sev.end():] if sev else rest).strip()[:500],
            line=line.strip()[:500],
            stamp=when.stamp,
            epoch=when.epoch,
            unparsed=unparsed,
        ))
    return events


_E = TypeVar("_E", XidEvent, SXidEvent)


def within_window(events: list[_E], window_s: float | None, now_s: float | None, *,
                  now_wall: float | None = None) -> list[_E]:
    """Events in the last ``window_s`` seconds (all of them when None).

    ``now_s`` is the uptime when the log is this boot's (journalctl, dmesg), None for a
    file. An event is outside only when its own time proves it: seconds since boot against
    the uptime, or its wall-clock instant against ``now_wall`` (default: now). An event with
    no time, or a stamp from before this boot began (the clock was wrong when it was
    written), is inside every window.
    """
    if window_s is None:
        return events
    wall = _time.time() if now_wall is None else now_wall
    return [e for e in events if _inside(e, window_s, now_s, wall)]


def _inside(event: XidEvent | SXidEvent, window_s: float, now_s: float | None,
            wall: float) -> bool:
    if event.seconds is not None and now_s is not None:
        return event.seconds >= now_s - window_s
    if event.epoch is not None:
        if now_s is not None and event.epoch < wall - now_s - BOOT_SLACK_S:
            return True  # stamped before this boot: that clock cannot be trusted
        return event.epoch >= wall - window_s
    return True
