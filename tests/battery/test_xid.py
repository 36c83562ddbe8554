"""Xid parsing on the exact line formats the driver writes, classification and collapsing."""

from __future__ import annotations

from nodegate.judge.xid import classify, judge_xids
from nodegate.probes.kernel_log import parse_xids, within_window
from nodegate.results import Severity, Verdict

LINES = [
    # 470+ drivers: PCI domain, pid= and name= fields
    "[ 8123.456789] NVRM: Xid (PCI:0000:18:00): 79, pid=2210, name=python3, GPU has fallen off the bus.",
    # journalctl -k -o short-monotonic
    "[ 9001.000001] gpu-b01 kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=2210, name=python3, GPU has fallen off the bus.",
    # older drivers: no PCI: prefix, no pid/name
    "[  512.000000] NVRM: Xid (0000:3b:00): 13, Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0)",
    # no domain in the bus id
    "[  600.100000] NVRM: Xid (PCI:3b:00): 31, pid='<unknown>', name=<unknown>, Ch 00000010, intr 10000000. MMU Fault",
    "[  700.0] NVRM: Xid (PCI:0000:9a:00): 48, pid=991, name=train, An uncorrectable double bit error (DBE) has been detected on GPU",
    "[  701.0] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error",
    "[  702.0] usb 1-1: new high-speed USB device number 2",
]


def test_parse_formats() -> None:
    events = parse_xids(LINES)
    assert [e.xid for e in events] == [79, 79, 13, 31, 48]  # SXid lines are not GPU Xids
    first = events[0]
    assert (first.bus_id, first.pid, first.process, first.seconds) == (
        "0000:18:00", "2210", "python3", 8123.456789)
    assert first.message == "GPU has fallen off the bus."
    assert events[2].pid is None and events[2].bus_id == "0000:3b:00"
    assert events[3].bus_id == "3b:00"
    assert events[3].message.startswith("Ch 00000010")


def test_classes_follow_the_catalogue() -> None:
    assert classify(79)[0] == "hardware"  # RESTART_BM
    assert classify(13)[0] == "application"  # RESTART_APP
    assert classify(999)[0] == "unclassified"  # not in the catalogue: WARN, never PASS
    # NVIDIA buckets these RESET_GPU / RESTART_BM / CONTACT_SUPPORT / workflows ending in a reset
    for xid in (48, 56, 57, 58, 62, 64, 73, 74, 79, 81, 95, 119, 120, 140):
        assert classify(xid)[0] == "hardware", xid
    # the old hand-written table called these hardware; the catalogue says RESTART_APP (68, 69,
    # 80, 94) or IGNORE (63 remap event, 92 SBE rate: the memory checks judge those counters)
    for xid in (68, 69, 80, 94):
        assert classify(xid)[0] == "application", xid
    for xid in (63, 92, 43):
        assert classify(xid)[0] == "informational", xid
    for xid in (13, 31, 45):
        assert classify(xid)[0] == "application", xid


def test_judge_collapses_duplicates_and_maps_to_gpus() -> None:
    bus = {"gpu0": "00000000:18:00.0", "gpu1": "00000000:3B:00.0", "gpu2": "00000000:9A:00.0",
           "gpu3": "00000000:DB:00.0"}
    results = {r.entity: r for r in judge_xids(parse_xids(LINES), bus, boot_id="b-1",
                                                 source="file", window="boot")}
    gpu0 = results["gpu0"]
    assert gpu0.verdict == Verdict.FAIL and gpu0.severity == Severity.HARDWARE
    assert gpu0.evidence["events"][0]["count"] == 2  # two lines, one collapsed event
    assert gpu0.evidence["boot_id"] == "b-1"
    assert results["gpu1"].verdict == Verdict.WARN  # 13 and 31: application level
    assert results["gpu1"].measured == "13,31"
    assert results["gpu2"].verdict == Verdict.FAIL
    assert results["gpu3"].verdict == Verdict.PASS


def test_unmapped_bus_is_reported() -> None:
    results = judge_xids(parse_xids(LINES[:1]), {}, boot_id=None, source="f", window="boot")
    assert [r.entity for r in results] == ["pci:0000:18:00"]
    assert results[0].verdict == Verdict.FAIL


def test_window() -> None:
    events = parse_xids(LINES)
    recent = within_window(events, 3600.0, 9500.0)
    assert [e.xid for e in recent] == [79, 79]
    assert within_window(events, None, 9500.0) == events
