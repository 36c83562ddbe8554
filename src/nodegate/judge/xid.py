"""Xid classification and the kernel-log check.

Classes follow NVIDIA's Xid catalog: hardware-critical Xids mean the node must not take work
(FAIL, severity hardware); application-level ones are usually a user's bug (WARN). Events are
collapsed per (GPU, Xid) with a count, first and last time, and the boot id they belong to.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodegate.judge.common import make
from nodegate.probes.kernel_log import XidEvent
from nodegate.probes.nvml import normalize_bus_id
from nodegate.results import CheckResult, Severity, Verdict

HARDWARE_CRITICAL: dict[int, str] = {
    48: "double-bit ECC error",
    56: "display engine error",
    57: "error programming video memory interface",
    58: "unstable video memory interface detected",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    68: "NVDEC0 exception / video processor exception",
    69: "graphics engine class error",
    73: "NVENC2 error",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    80: "corrupted data sent to GPU",
    81: "VGA subsystem error",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "ECC unrecovered error",
}
APPLICATION: dict[int, str] = {
    13: "graphics engine exception (usually an application bug)",
    31: "GPU memory page fault (usually an application bug)",
    43: "GPU stopped processing (application reset the channel)",
    45: "preemptive cleanup, due to previous errors",
}


@dataclass
class XidGroup:
    bus_id: str
    xid: int
    count: int
    first_s: float | None
    last_s: float | None
    sample: str
    processes: list[str]


def classify(xid: int) -> tuple[str, str]:
    if xid in HARDWARE_CRITICAL:
        return "hardware", HARDWARE_CRITICAL[xid]
    if xid in APPLICATION:
        return "application", APPLICATION[xid]
    return "unclassified", "not in nodegate's Xid table"


def collapse(events: list[XidEvent]) -> list[XidGroup]:
    groups: dict[tuple[str, int], XidGroup] = {}
    for event in events:
        key = (normalize_bus_id(event.bus_id), event.xid)
        group = groups.get(key)
        if group is None:
            group = groups[key] = XidGroup(key[0], event.xid, 0, event.seconds, event.seconds,
                                           event.line, [])
        group.count += 1
        group.last_s = event.seconds if event.seconds is not None else group.last_s
        if event.process and event.process not in group.processes:
            group.processes.append(event.process)
    return list(groups.values())


def judge_xids(events: list[XidEvent], gpu_bus_ids: dict[str, str], *,
               boot_id: str | None, source: str, window: str,
               unknown_bus_gpus: list[str] | None = None) -> list[CheckResult]:
    """One result per GPU (PASS when clean) plus one per Xid on a bus no GPU claims.

    A GPU that fell off the bus often cannot report its own bus id any more; when exactly
    one such GPU and exactly one unclaimed bus exist, the Xid is attributed to that GPU.
    """
    by_bus: dict[str, list[XidGroup]] = {}
    for group in collapse(events):
        by_bus.setdefault(group.bus_id, []).append(group)
    out = []
    known = {normalize_bus_id(bus): entity for entity, bus in gpu_bus_ids.items()}
    for bus, entity in sorted(known.items(), key=lambda kv: _entity_order(kv[1])):
        out.append(_judge_groups(entity, by_bus.pop(bus, []), boot_id, source, window))
    unknown = list(unknown_bus_gpus or [])
    if len(unknown) == 1 and len(by_bus) == 1:
        bus, groups = by_bus.popitem()
        result = _judge_groups(unknown[0], groups, boot_id, source, window)
        result.evidence["bus_id"] = bus
        result.evidence["attribution"] = "inferred: the only GPU whose bus id NVML cannot read"
        out.append(result)
        unknown = []
    for entity in unknown:
        out.append(_judge_groups(entity, [], boot_id, source, window))
    for bus, groups in sorted(by_bus.items()):
        out.append(_judge_groups(f"pci:{bus}", groups, boot_id, source, window))
    return out


def _entity_order(entity: str) -> tuple[int, str]:
    digits = "".join(ch for ch in entity if ch.isdigit())
    return (int(digits) if digits else 0, entity)


def _judge_groups(entity: str, groups: list[XidGroup], boot_id: str | None, source: str,
                  window: str) -> CheckResult:
    verdict, severity = Verdict.PASS, Severity.INFO
    events = []
    for group in groups:
        klass, meaning = classify(group.xid)
        if klass == "hardware":
            verdict, severity = Verdict.FAIL, Severity.HARDWARE
        elif verdict != Verdict.FAIL:
            verdict, severity = Verdict.WARN, Severity.WARNING
        events.append({"xid": group.xid, "class": klass, "meaning": meaning,
                       "count": group.count, "first_s": group.first_s, "last_s": group.last_s,
                       "processes": group.processes, "sample": group.sample})
    measured = ",".join(str(g.xid) for g in groups) or "none"
    return make("xid_events", entity, verdict, measured=measured,
                threshold="no hardware-critical Xid", severity=severity, events=events or None,
                boot_id=boot_id, log_source=source, window=window)
