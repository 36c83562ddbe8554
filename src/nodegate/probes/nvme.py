"""NVMe devices as nvme-cli reports them: ``nvme list``, ``id-ctrl`` and ``smart-log``, JSON.

Only nvme-cli's JSON output is read (``-o json``), never its text. Field names follow the
NVMe base specification's SMART / Health Information log (log page 02h) as nvme-cli spells
them; they differ between releases and between nvme-cli and smartctl, so each field has its
known spellings (``avail_spare``/``available_spare``, ...). Two shapes are handled:

* nvme-cli 1.x and 2.x print ``critical_warning`` as a number; 2.x with ``--verbose`` prints
  an object whose ``value`` holds the byte (nvme-print-json.c, ``json_smart_log``).
* 128-bit counters (``media_errors``, ``unsafe_shutdowns``, ...) are JSON numbers in both,
  but may be written as decimal strings; both are read.

``temperature`` is the composite temperature in Kelvin (NVMe base spec, SMART log bytes
2:1); nvme-cli's text output subtracts 273, its JSON does not. Celsius here is K - 273, as
nvme-cli and the Linux nvme hwmon driver compute it.

A device that cannot be read (gone from the bus, a command error, a timeout) is kept with its
``problem`` (SMART log) or ``ident_problem`` (id-ctrl): the judge makes ERROR only the checks
that need what could not be read, on that device; the other devices are still judged. A field
missing from a log it could read (no ``critical_warning``, no ``media_errors``) is None and
fails only its own check. Numbers are ASCII digits, at most 40 (a 128-bit counter has 39),
never negative: anything else is a field that could not be read.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nodegate.errors import CannotRunError

#: Kelvin to Celsius as nvme-cli and the kernel's nvme hwmon driver convert (integer 273).
KELVIN_OFFSET = 273
#: critical_warning bits (NVMe base spec, SMART / Health log byte 0).
CRITICAL_WARNING_BITS: dict[int, str] = {
    0x01: "available spare below its threshold",
    0x02: "temperature outside its threshold",
    0x04: "NVM subsystem reliability degraded (media or internal errors)",
    0x08: "media placed in read-only mode",
    0x10: "volatile memory backup device failed",
    0x20: "persistent memory region read-only or unreliable",
}
DEFAULT_TIMEOUT_S = 30.0
#: The largest value a SMART counter can hold (128-bit) and its digits as text.
COUNTER_MAX = 2**128 - 1
_DIGITS = re.compile(r"[0-9]{1,40}")

Runner = Callable[[list[str], float], "subprocess.CompletedProcess[str]"]


class ToolMissing(CannotRunError):
    """A node-side tool is not installed: exit 3, naming the package that provides it."""

    def __init__(self, tool: str, package: str, where: str = "") -> None:
        super().__init__(f"{tool} not found{where}: install the {package} package "
                         f"(the nvme role installs nvme-cli and fio)", key=package)
        self.tool = tool
        self.package = package


class ToolFailed(Exception):
    """A command ran and failed, or printed no JSON: the device it was about is unreadable."""


def local_runner(argv: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` on this machine, output captured, never raising on a non-zero exit."""
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                          check=False)


def run_json(run: Runner, argv: list[str], *, package: str,
             timeout_s: float = DEFAULT_TIMEOUT_S) -> Any:
    """The JSON document ``argv`` prints. Raises ToolMissing when the tool is absent (exit 3)
    and ToolFailed when it fails, times out or prints no JSON."""
    try:
        proc = run(argv, timeout_s)
    except FileNotFoundError:
        raise ToolMissing(argv[0], package) from None
    except subprocess.TimeoutExpired:
        raise ToolFailed(f"{' '.join(argv)}: no answer within {timeout_s:g} s") from None
    if proc.returncode == 127:  # a shell (ssh) that did not find the command
        raise ToolMissing(argv[0], package, " (exit 127)")
    if proc.returncode != 0:
        # nvme-cli says why first, then prints its usage: keep the head, not the tail
        said = [ln.strip() for ln in (proc.stderr or proc.stdout or "").splitlines()
                if ln.strip()][:2]
        raise ToolFailed(f"{' '.join(argv)}: exit {proc.returncode}: "
                         f"{' | '.join(said)[:200] or '(no output)'}")
    return parse_json_text(proc.stdout, what=" ".join(argv))


def parse_json_text(text: str, *, what: str) -> Any:
    """The first JSON object in ``text``: tools print banners or warnings before it (dcgmi,
    fio with several output formats)."""
    start = text.find("{")
    if start < 0:
        raise ToolFailed(f"{what}: no JSON in its output: {_tail(text)}")
    try:
        doc, _ = json.JSONDecoder().raw_decode(text[start:])
    except ValueError as exc:
        raise ToolFailed(f"{what}: output is not JSON ({exc}): {_tail(text)}") from None
    return doc


def _tail(text: str, limit: int = 200) -> str:
    line = " | ".join(s.strip() for s in (text or "").strip().splitlines()[-3:])
    return line[-limit:] or "(no output)"


# --- parsed records ------------------------------------------------------------------------


@dataclass(frozen=True)
class SmartLog:
    """The SMART / Health Information log fields the judge reads (NVMe base spec 02h)."""

    critical_warning: int | None  # None: the log did not carry it (fails its own check only)
    temperature_k: int | None
    available_spare: int | None  # %
    spare_threshold: int | None  # %
    percentage_used: int | None  # % of rated endurance; may exceed 100
    media_errors: int | None
    unsafe_shutdowns: int | None
    power_on_hours: int | None = None
    error_log_entries: int | None = None

    @property
    def temperature_c(self) -> int | None:
        return None if self.temperature_k is None else self.temperature_k - KELVIN_OFFSET

    def warnings(self) -> list[str]:
        """The critical_warning bits set, in words (unknown bits by value)."""
        if self.critical_warning is None:
            return []
        out = [text for bit, text in CRITICAL_WARNING_BITS.items() if self.critical_warning & bit]
        unknown = self.critical_warning & ~sum(CRITICAL_WARNING_BITS)
        if unknown:
            out.append(f"reserved bits 0x{unknown:02x}")
        return out


@dataclass(frozen=True)
class Namespace:
    path: str  # /dev/nvme0n1
    controller: str  # nvme0
    model: str
    serial: str
    firmware: str
    size_bytes: int | None


@dataclass
class NvmeDevice:
    """One controller: identity, its namespaces, its SMART log (or why it could not be read)."""

    controller: str  # nvme0: the name in its namespaces' block devices (see read_devices)
    path: str = ""  # what nvme-cli is pointed at: the first namespace's block device
    model: str = ""
    serial: str = ""
    firmware: str = ""
    wctemp_k: int | None = None  # warning composite temperature threshold (id-ctrl)
    namespaces: list[Namespace] = field(default_factory=list)
    smart: SmartLog | None = None
    problem: str | None = None  # why the SMART log could not be read
    ident_problem: str | None = None  # why id-ctrl could not be read (firmware, wctemp)


# --- field readers -------------------------------------------------------------------------

_SMART_FIELDS: dict[str, tuple[str, ...]] = {
    "critical_warning": ("critical_warning",),
    "temperature_k": ("temperature", "composite_temperature"),
    "available_spare": ("avail_spare", "available_spare"),
    "spare_threshold": ("spare_thresh", "available_spare_threshold"),
    "percentage_used": ("percent_used", "percentage_used"),
    "media_errors": ("media_errors", "media_and_data_integrity_errors"),
    "unsafe_shutdowns": ("unsafe_shutdowns",),
    "power_on_hours": ("power_on_hours",),
    "error_log_entries": ("num_err_log_entries", "error_information_log_entries"),
}


def _int(value: Any) -> int | None:
    """A counter as nvme-cli writes it: a number or a decimal string (128-bit counters).
    None when it is not one: negative, above 128 bits, not ASCII digits, too long."""
    number: int | None = None
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str):
        text = value.strip().replace(",", "")
        number = int(text) if _DIGITS.fullmatch(text) else None
    return number if number is not None and 0 <= number <= COUNTER_MAX else None


def _field(doc: Mapping[str, Any], names: tuple[str, ...]) -> Any:
    for name in names:
        if name in doc:
            return doc[name]
    return None


def parse_smart_log(doc: Any, *, what: str = "smart-log") -> SmartLog:
    """A SmartLog from ``nvme smart-log -o json`` (1.x or 2.x, plain or ``--verbose``)."""
    if not isinstance(doc, Mapping):
        raise ToolFailed(f"{what}: expected a JSON object, got {type(doc).__name__}")
    values: dict[str, int | None] = {}
    for attr, names in _SMART_FIELDS.items():
        raw = _field(doc, names)
        if isinstance(raw, Mapping) and "value" in raw:  # 2.x --verbose critical_warning
            raw = raw["value"]
        values[attr] = _int(raw)
    warning = values.pop("critical_warning")
    if warning is not None and warning > 0xFF:  # one byte (NVMe base spec): not a reading
        warning = None
    return SmartLog(critical_warning=warning, **values)


def parse_id_ctrl(doc: Any) -> dict[str, Any]:
    """Model, serial, firmware and the warning temperature (Kelvin) from ``id-ctrl -o json``;
    nvme-cli pads the strings with spaces, as the controller returns them."""
    if not isinstance(doc, Mapping):
        raise ToolFailed(f"id-ctrl: expected a JSON object, got {type(doc).__name__}")
    wctemp = _int(doc.get("wctemp"))
    return {"model": str(doc.get("mn", "")).strip(), "serial": str(doc.get("sn", "")).strip(),
            "firmware": str(doc.get("fr", "")).strip(),
            "wctemp_k": wctemp if wctemp else None}  # 0: the controller reports none


def controller_of(path: str) -> str:
    """``/dev/nvme3n1`` -> ``nvme3`` (multipath ``nvme0c1n1`` -> ``nvme0``)."""
    name = path.rsplit("/", 1)[-1]
    digits = ""
    for ch in name[4:] if name.startswith("nvme") else "":
        if ch not in "0123456789":
            break
        digits += ch
    return f"nvme{digits}" if digits else name


def parse_list(doc: Any) -> list[Namespace]:
    """Namespaces from ``nvme list -o json``: the flat ``Devices`` list of nvme-cli 1.x and
    2.x, and the ``Subsystems > Controllers > Namespaces`` tree of 2.x ``--verbose``."""
    if not isinstance(doc, Mapping):
        raise ToolFailed("nvme list: expected a JSON object")
    out: list[Namespace] = []
    for dev in _maps(doc.get("Devices")):
        if "DevicePath" in dev:
            path = str(dev["DevicePath"])
            out.append(Namespace(path=path, controller=controller_of(path),
                                 model=str(dev.get("ModelNumber", "")).strip(),
                                 serial=str(dev.get("SerialNumber", "")).strip(),
                                 firmware=str(dev.get("Firmware", "")).strip(),
                                 size_bytes=_int(dev.get("PhysicalSize"))))
            continue
        for subsystem in _maps(dev.get("Subsystems")):
            for ctrl in _maps(subsystem.get("Controllers")):
                name = str(ctrl.get("Controller", ""))
                for ns in _maps(ctrl.get("Namespaces")):
                    path = f"/dev/{ns.get('NameSpace', '')}"
                    size = _int(ns.get("PhysicalSize"))
                    if size is None:
                        lbas, sector = _int(ns.get("MaximumLBA")), _int(ns.get("SectorSize"))
                        size = lbas * sector if lbas is not None and sector else None
                    out.append(Namespace(path=path, controller=name or controller_of(path),
                                         model=str(ctrl.get("ModelNumber", "")).strip(),
                                         serial=str(ctrl.get("SerialNumber", "")).strip(),
                                         firmware=str(ctrl.get("Firmware", "")).strip(),
                                         size_bytes=size))
    return out


def _maps(value: Any) -> list[Mapping[str, Any]]:
    """The objects of a JSON list; anything else in it (or no list) is left out."""
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


# --- the probe -----------------------------------------------------------------------------


def read_devices(run: Runner = local_runner, *,
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> list[NvmeDevice]:
    """Every NVMe controller nvme-cli lists, with identity and SMART log.

    Commands go to a namespace's block device, never ``/dev/nvmeN``: with native NVMe
    multipath (Debian's and most distributions' kernels) ``nvmeXnY`` numbers the subsystem,
    not the controller, so after a controller is re-probed ``/dev/nvme1n2`` can belong to
    ``/dev/nvme2`` and ``/dev/nvme1`` need not exist (seen on the md VM after a PCI remove
    and rescan). A device is named by its block devices' ``nvmeX``, as ``nvme list`` shows it.

    Raises ToolMissing (exit 3) without nvme-cli and ToolFailed when ``nvme list`` itself
    fails (nothing can be said about any device). A controller whose ``id-ctrl`` fails
    carries ``ident_problem``, one whose ``smart-log`` fails ``problem``: each is read on
    its own, so one failing never hides what the other says."""
    namespaces = parse_list(run_json(run, ["nvme", "list", "-o", "json"], package="nvme-cli",
                                     timeout_s=timeout_s))
    devices: dict[str, NvmeDevice] = {}
    for ns in namespaces:
        dev = devices.setdefault(ns.controller, NvmeDevice(
            controller=ns.controller, path=ns.path, model=ns.model, serial=ns.serial,
            firmware=ns.firmware))
        dev.namespaces.append(ns)
    for dev in devices.values():
        try:
            ident = parse_id_ctrl(run_json(run, ["nvme", "id-ctrl", dev.path, "-o", "json"],
                                           package="nvme-cli", timeout_s=timeout_s))
            dev.model = ident.get("model") or dev.model
            dev.serial = ident.get("serial") or dev.serial
            dev.firmware = ident.get("firmware") or dev.firmware
            dev.wctemp_k = ident.get("wctemp_k")
        except ToolFailed as exc:
            dev.ident_problem = str(exc)
        if dev.ident_problem and "no answer within" in dev.ident_problem:
            dev.problem = dev.ident_problem  # a hung device: do not wait for it twice
            continue
        try:
            dev.smart = parse_smart_log(
                run_json(run, ["nvme", "smart-log", dev.path, "-o", "json"],
                         package="nvme-cli", timeout_s=timeout_s),
                what=f"nvme smart-log {dev.path}")
        except ToolFailed as exc:
            dev.problem = str(exc)
    return sorted(devices.values(), key=lambda d: _natural(d.controller))


def _natural(name: str) -> tuple[str, int]:
    digits = "".join(ch for ch in name if ch in "0123456789")[:9]
    return name.rstrip("0123456789"), int(digits) if digits else -1
