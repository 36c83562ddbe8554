"""Xid and NVSwitch SXid judging, from NVIDIA's published Xid catalogue.

The catalogue is data (``xid_catalog.yaml``, loaded once, only when the log holds an event):
each code carries NVIDIA's resolution bucket, which maps to a recovery action, and the action
decides the verdict (``ACTION_VERDICT``). A code the table lacks is WARN, never PASS. Xid 154
names its action in the line itself. NVLink5 Xids (144-150) state in the line whether they
are fatal: a bucket marked ``severity_in_line`` keeps its action for a fatal line (and for one
that states nothing), while a non-fatal one is WARN, never a drain on its own: its count and
rate stay in the evidence. A profile may ``ignore`` or ``escalate`` single codes.

Events are collapsed per (GPU, Xid) with a count, first and last time and the boot id; a
hardware event already seen on the same bus in an earlier boot (from the node's previous
reports) is marked recurrent: a reset or reboot did not clear it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import field
from functools import lru_cache
from pathlib import Path
from typing import Any

from nodegate import records
from nodegate.errors import ConfigError
from nodegate.judge.common import make
from nodegate.probes.kernel_log import SXidEvent, XidEvent
from nodegate.probes.nvml import normalize_bus_id
from nodegate.results import CheckResult, Severity, Verdict

CATALOG_FILE = Path(__file__).with_name("xid_catalog.yaml")

#: Recovery action -> (verdict, severity, class written into the evidence).
ACTION_VERDICT: dict[str, tuple[Verdict, Severity, str]] = {
    "none": (Verdict.PASS, Severity.INFO, "informational"),
    "application": (Verdict.WARN, Severity.WARNING, "application"),
    "software": (Verdict.WARN, Severity.WARNING, "software"),
    "unspecified": (Verdict.WARN, Severity.WARNING, "unspecified"),
    "unknown": (Verdict.WARN, Severity.WARNING, "unclassified"),
    "reset_gpu": (Verdict.FAIL, Severity.HARDWARE, "hardware"),
    "reboot_node": (Verdict.FAIL, Severity.HARDWARE, "hardware"),
    "inspect_hardware": (Verdict.FAIL, Severity.HARDWARE, "hardware"),
}
#: Actions a bucket may map to in the YAML (``from_line``: Xid 154 names its own).
BUCKET_ACTIONS = frozenset(ACTION_VERDICT) - {"unknown", "unspecified"} | {"from_line"}

#: Xid 154's new recovery action, by the value nvml.h gives ``nvmlDeviceGpuRecoveryAction_t``
#: (nvidia-ml-py NVML_GPU_RECOVERY_ACTION_*: NONE 0, GPU_RESET 1, NODE_REBOOT 2, DRAIN_P2P 3,
#: DRAIN_AND_RESET 4; 5 differs between header versions (RECOVER_IMEX_DOMAIN / GPU_RESET_BUS),
#: BUS_RESET 6, SYSTEM_REBOOT 7). Draining is part of getting to a reset: the node takes no work.
RECOVERY_ACTIONS: dict[int, str] = {0: "none", 1: "reset_gpu", 2: "reboot_node", 3: "reset_gpu",
                                    4: "reset_gpu", 5: "reset_gpu", 6: "reset_gpu",
                                    7: "reboot_node"}
# NVRM: Xid (PCI:0000:02:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node
# Reboot Required)   (older drivers word the names differently: "PF FLR", "OS Reboot")
RECOVERY_RE = re.compile(r"recovery action changed from (?P<old>0x[0-9a-fA-F]+)\s*"
                         r"(?:\((?P<old_text>[^)]*)\))?\s*to (?P<new>0x[0-9a-fA-F]+)\s*"
                         r"(?:\((?P<new_text>[^)]*)\))?")

OVERRIDES = ("ignore", "escalate")
#: Newest reports read for recurrence; only read when this run found a hardware event.
HISTORY_REPORTS = 8


@records.frozen_record
class XidInfo:
    code: int
    mnemonic: str
    meaning: str
    immediate: str | None  # NVIDIA's resolution bucket (immediate action); None: not given
    investigatory: str | None
    action: str
    severity_in_line: bool = False  # the line says Fatal / Nonfatal (NVLink5 Xids 144-150)


@records.frozen_record
class Catalog:
    source: str
    date: str
    entries: dict[int, XidInfo]


@lru_cache(maxsize=4)
def load_catalog(path: Path = CATALOG_FILE) -> Catalog:
    """The Xid table; a malformed file is a ConfigError naming the code and key."""
    from nodegate.yamlio import load_yaml

    data = load_yaml(path)
    if not isinstance(data, dict) or not isinstance(data.get("xids"), dict):
        raise ConfigError("an Xid catalogue needs a 'xids' mapping", file=str(path))
    buckets = data.get("buckets") or {}
    actions: dict[str, str] = {}
    stated: set[str] = set()
    for bucket, spec in buckets.items():
        action = spec.get("action") if isinstance(spec, dict) else None
        if action not in BUCKET_ACTIONS:
            raise ConfigError(f"unknown action {action!r}", file=str(path),
                              key=f"buckets.{bucket}.action")
        actions[str(bucket)] = str(action)
        if spec.get("severity_in_line") is True:
            stated.add(str(bucket))
    entries = {}
    for code, row in data["xids"].items():
        key = f"xids.{code}"
        if not isinstance(code, int) or not isinstance(row, dict):
            raise ConfigError("an entry is 'CODE: {mnemonic, meaning, immediate}'",
                              file=str(path), key=key)
        immediate = row.get("immediate")
        if immediate is not None and immediate not in actions:
            raise ConfigError(f"bucket {immediate!r} is not in 'buckets'", file=str(path),
                              key=f"{key}.immediate")
        entries[code] = XidInfo(code, str(row.get("mnemonic", "")), str(row.get("meaning", "")),
                                immediate, row.get("investigatory"),
                                actions[immediate] if immediate else "unspecified",
                                immediate in stated)
    return Catalog(str(data.get("source", "")), str(data.get("catalogue_date", "")), entries)


def classify(xid: int) -> tuple[str, str]:
    """(class, meaning) of an Xid by the catalogue alone (Xid 154 needs its line: ``describe``)."""
    event = describe(xid, "")
    return event["class"], event["meaning"]


def describe(xid: int | None, message: str) -> dict[str, Any]:
    """The catalogue's view of one Xid line: action, class, meaning, NVIDIA's buckets. A line
    whose code could not be read (None) is judged like a code the table lacks: WARN."""
    if xid is None:
        return {"action": "unknown", "class": ACTION_VERDICT["unknown"][2],
                "meaning": "Xid line not readable: its code or bus id is malformed"}
    info = load_catalog().entries.get(xid)
    if info is None:
        out: dict[str, Any] = {"action": "unknown", "meaning": "not in NVIDIA's Xid catalogue "
                               f"as of {load_catalog().date}"}
    else:
        out = {"action": info.action, "meaning": info.meaning, "mnemonic": info.mnemonic,
               "immediate": info.immediate, "investigatory": info.investigatory}
    if out["action"] == "from_line":
        out.update(_recovery_action(message))
    out["class"] = ACTION_VERDICT[out["action"]][2]
    return out


def _recovery_action(message: str) -> dict[str, Any]:
    """Xid 154: the action the line names; unreadable is WARN, not a guess."""
    match = RECOVERY_RE.search(message)
    if match is None:
        return {"action": "unspecified", "recovery_action": None}
    new = int(match.group("new"), 16)
    text = f"{match.group('new')} ({match.group('new_text')})" if match.group("new_text") \
        else match.group("new")
    return {"action": RECOVERY_ACTIONS.get(new, "unspecified"), "recovery_action": text,
            "recovery_action_from": match.group("old_text") or match.group("old")}


def profile_overrides(section: Mapping[str, Any]) -> dict[int, str]:
    """``xid: {overrides: {13: ignore}}`` as ints (keys arrive as str from resolved JSON)."""
    raw = section.get("overrides") or {}
    return {int(code): str(how) for code, how in raw.items()}


@records.record
class XidGroup:
    bus_id: str
    xid: int | None  # None: the lines' code or bus could not be read
    count: int
    first_s: float | None
    last_s: float | None
    sample: str
    processes: list[str]
    messages: list[str]
    first_time: str | None = None  # wall clock, where the log format carries it
    last_time: str | None = None
    severities: list[str] = field(default_factory=list)  # as the lines state them
    origins: list[str] = field(default_factory=list)  # ``fallen-off-bus``: no Xid line


def collapse(events: list[XidEvent]) -> list[XidGroup]:
    groups: dict[tuple[str, int], XidGroup] = {}
    for event in events:
        bus = _bus_key(event)
        key = (bus, -1 if event.xid is None else event.xid)
        group = groups.get(key)
        if group is None:
            group = groups[key] = XidGroup(bus, event.xid, 0, event.seconds, event.seconds,
                                           event.line, [], [], event.stamp)
        group.count += 1
        group.last_time = event.stamp or group.last_time
        group.last_s = event.seconds if event.seconds is not None else group.last_s
        if event.process and event.process not in group.processes:
            group.processes.append(event.process)
        if event.severity and event.severity not in group.severities:
            group.severities.append(event.severity)
        if event.origin and event.origin not in group.origins:
            group.origins.append(event.origin)
        group.messages.append(event.message)
    return list(groups.values())


History = Callable[[], list[dict[str, Any]]]


def judge_xids(events: list[XidEvent], gpu_bus_ids: dict[str, str], *,
               boot_id: str | None, source: str, window: str,
               unknown_bus_gpus: list[str] | None = None,
               overrides: Mapping[int, str] | None = None,
               history: History | None = None) -> list[CheckResult]:
    """One result per GPU (PASS when clean) plus one per Xid on a bus no GPU claims.

    A GPU that fell off the bus often cannot report its own bus id any more; when exactly
    one such GPU and exactly one unclaimed bus exist, the Xid is attributed to that GPU.
    ``history`` reads the node's previous reports; it is called only if a hardware Xid is seen.
    """
    by_bus: dict[str, list[XidGroup]] = {}
    for group in collapse(events):
        by_bus.setdefault(group.bus_id, []).append(group)
    judged: list[tuple[str, list[dict[str, Any]], str | None]] = []
    known = {normalize_bus_id(bus): entity for entity, bus in gpu_bus_ids.items()}
    for bus, entity in sorted(known.items(), key=lambda kv: _entity_order(kv[1])):
        judged.append((entity, _xid_events(by_bus.pop(bus, []), overrides or {}), None))
    unknown = list(unknown_bus_gpus or [])
    if len(unknown) == 1 and len(by_bus) == 1 and "unknown" not in by_bus:
        bus, groups = by_bus.popitem()
        judged.append((unknown[0], _xid_events(groups, overrides or {}), bus))
        unknown = []
    for entity in unknown:
        judged.append((entity, [], None))
    for bus, groups in sorted(by_bus.items()):
        judged.append((f"pci:{bus}", _xid_events(groups, overrides or {}), None))
    _mark_recurrent([e for _, evs, _ in judged for e in evs], "xid", boot_id, history)
    out = []
    for entity, evs, inferred_bus in judged:
        result = _result(entity, evs, "xid", boot_id=boot_id, source=source, window=window)
        if inferred_bus is not None:
            result.evidence["bus_id"] = inferred_bus
            result.evidence["attribution"] = "inferred: the only GPU whose bus id NVML cannot read"
        out.append(result)
    return out


def judge_sxids(events: list[SXidEvent], *, boot_id: str | None, source: str, window: str,
                history: History | None = None) -> list[CheckResult]:
    """One result per NVSwitch that logged an SXid (entity ``nvswitchN``).

    The driver prints each SXid as ``Fatal`` or ``Non-fatal``; NVIDIA's Fabric Manager User
    Guide ("NVSwitch SXid errors") says a fatal SXid needs the GPUs and NVSwitches reset (the
    node rebooted, in bare-metal mode) while non-fatal ones do not stop running jobs. So fatal
    FAILs (hardware), non-fatal WARNs, and a group with no stated severity WARNs too.
    """
    groups: dict[tuple[int, int], list[SXidEvent]] = {}
    for event in events:  # -1: a switch number or code that could not be read
        key = (-1 if event.switch is None else event.switch,
               -1 if event.sxid is None else event.sxid)
        groups.setdefault(key, []).append(event)
    per_switch: dict[int, list[dict[str, Any]]] = {}
    for (switch, code), lines in sorted(groups.items()):
        severities = {e.severity for e in lines if e.severity}
        if code < 0 or lines[0].unparsed:
            action, klass = "unknown", "unclassified"
        elif "fatal" in severities:
            action, klass = "reboot_node", "hardware"
        elif severities:
            action, klass = "none", "non-fatal"
        else:
            action, klass = "unspecified", "unspecified"
        stated = next((e for e in lines if e.severity), lines[0])
        per_switch.setdefault(switch, []).append(_no_nones({
            "sxid": code if code >= 0 else None, "unparsed": True if lines[0].unparsed else None,
            "class": klass, "action": action,
            "severity": "fatal" if "fatal" in severities else (
                "non-fatal" if severities else None),
            "bus_id": _bus_key(lines[0]), "count": len(lines),
            "first_s": lines[0].seconds, "last_s": lines[-1].seconds,
            "first_time": lines[0].stamp, "last_time": lines[-1].stamp,
            "meaning": stated.message, "sample": stated.line,
        }))
    _mark_recurrent([e for evs in per_switch.values() for e in evs], "sxid", boot_id, history)
    return [_result(f"nvswitch{switch if switch >= 0 else '-unknown'}", evs, "sxid",
                    boot_id=boot_id, source=source, window=window)
            for switch, evs in sorted(per_switch.items())]


def _bus_key(event: XidEvent | SXidEvent) -> str:
    """The canonical bus id; the parser only passes on ids it has checked, or ``unknown``."""
    return "unknown" if event.bus_id == "unknown" else normalize_bus_id(event.bus_id)


def _xid_events(groups: list[XidGroup], overrides: Mapping[int, str]) -> list[dict[str, Any]]:
    out = []
    for group in groups:
        message = next((m for m in group.messages if RECOVERY_RE.search(m)), group.messages[0])
        event = describe(group.xid, message)
        if group.xid is None:
            event["unparsed"] = True
        if group.xid is not None:
            event.update(_stated_severity(group))
        event.update(xid=group.xid, bus_id=group.bus_id, count=group.count,
                     first_s=group.first_s, last_s=group.last_s, first_time=group.first_time,
                     last_time=group.last_time, processes=group.processes,
                     sample=group.sample, rate_per_h=_rate_per_h(group),
                     origin=", ".join(group.origins) or None)
        how = overrides.get(group.xid) if group.xid is not None else None
        if how is not None:
            event["override"] = how
        out.append(_no_nones(event))
    return out


def _stated_severity(group: XidGroup) -> dict[str, Any]:
    """The severity NVLink5 lines state (fatal wins within a group). A code whose bucket is
    ``severity_in_line`` and whose lines all say non-fatal is WARN (class ``non-fatal``): it
    does not drain the node on its own. Fatal, or nothing stated, keeps the bucket's action."""
    info = load_catalog().entries.get(group.xid) if group.xid is not None else None
    if not group.severities:
        return {}
    severity = "fatal" if "fatal" in group.severities else "non-fatal"
    if info is None or not info.severity_in_line or severity == "fatal":
        return {"severity": severity}
    return {"severity": severity, "action": "none", "class": "non-fatal"}


def _rate_per_h(group: XidGroup) -> float | None:
    """Events per hour over the span the group's own times cover (None: one event, or no
    times): what a fleet watches for non-fatal NVLink5 events, whose trend matters."""
    if group.count < 2 or group.first_s is None or group.last_s is None:
        return None
    span_h = (group.last_s - group.first_s) / 3600.0
    return round(group.count / span_h, 3) if span_h > 0 else None


def _no_nones(event: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in event.items() if v is not None}


def _verdict_of(event: dict[str, Any]) -> tuple[Verdict, Severity]:
    if event.get("override") == "ignore":
        return Verdict.PASS, Severity.INFO
    if event.get("override") == "escalate" or event.get("recurrent"):
        return Verdict.FAIL, Severity.HARDWARE
    if event.get("class") == "non-fatal":  # a non-fatal SXid or NVLink5 Xid
        return Verdict.WARN, Severity.WARNING
    verdict, severity, _ = ACTION_VERDICT[event["action"]]
    return verdict, severity


def _result(entity: str, events: list[dict[str, Any]], kind: str, *, boot_id: str | None,
            source: str, window: str) -> CheckResult:
    verdict, severity = Verdict.PASS, Severity.INFO
    for event in events:
        v, s = _verdict_of(event)
        if v == Verdict.FAIL or (v == Verdict.WARN and verdict == Verdict.PASS):
            verdict, severity = v, s
    measured = ",".join(str(e.get(kind, "unreadable")) for e in events) or "none"
    recurrent = [e for e in events if e.get("recurrent")]
    hint = None
    if any(kind not in e for e in events):
        hint = ("a kernel-log line names an Xid/SXid whose code or bus id is not readable "
                "(see sample): read it by hand")
    if recurrent:
        hint = (f"{kind.upper() if kind == 'sxid' else 'Xid'} "
                f"{', '.join(str(e[kind]) for e in recurrent)} came back after a reboot: "
                "a reset does not clear it, inspect the hardware")
    return make("xid_events", entity, verdict, measured=measured,
                threshold="no Xid whose catalogued action is reset, reboot or inspection",
                severity=severity, events=events or None, boot_id=boot_id, log_source=source,
                window=window, hint=hint)


def _is_hardware(event: dict[str, Any]) -> bool:
    return event.get("override") != "ignore" and (
        event.get("class") == "hardware" or event.get("override") == "escalate")


def _mark_recurrent(events: list[dict[str, Any]], kind: str, boot_id: str | None,
                    history: History | None) -> None:
    """Mark hardware events whose (bus, code) a report of another boot already holds."""
    hardware = [e for e in events if _is_hardware(e) and kind in e]
    if not hardware or history is None or boot_id is None:
        return
    seen = previous_boots(history(), kind)
    for event in hardware:
        boots = [b for b in seen.get((event.get("bus_id", ""), event[kind]), []) if b != boot_id]
        if boots:
            event["recurrent"] = True
            event["boots"] = [*boots, boot_id]


def previous_boots(reports: list[dict[str, Any]], kind: str = "xid"
                   ) -> dict[tuple[str, int], list[str]]:
    """(bus id, code) -> boot ids in which earlier reports (newest first) saw it as a
    hardware event.

    An event already marked recurrent carries its own ``boots``, so the chain survives even
    when the newest reports all belong to the current boot.
    """
    out: dict[tuple[str, int], list[str]] = {}
    for report in reversed(reports):  # oldest first, so ``boots`` reads old -> new
        boot = report.get("boot_id") if isinstance(report, dict) else None
        for result in _list(report.get("results") if isinstance(report, dict) else None):
            if not isinstance(result, dict) or result.get("check") != "xid_events":
                continue
            evidence = result.get("evidence")
            for event in _list(evidence.get("events") if isinstance(evidence, dict) else None):
                code = event.get(kind) if isinstance(event, dict) else None
                # an earlier report is data, not trusted: a code that is not a plain int
                # (edited, corrupt, from a hostile line) is skipped, never a crash
                if type(code) is not int or not _is_hardware(event):
                    continue
                boots = out.setdefault((str(event.get("bus_id", "")), code), [])
                for b in [*_list(event.get("boots")), boot]:
                    if isinstance(b, str) and b not in boots:
                        boots.append(b)
    return out


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _entity_order(entity: str) -> tuple[int, str]:
    digits = "".join(ch for ch in entity if ch.isdigit())
    return (int(digits) if digits else 0, entity)
