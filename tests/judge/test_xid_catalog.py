"""NVIDIA's Xid catalogue as data, Xid 154's recovery action, NVSwitch SXids, profile overrides.

Kernel lines are in the formats real nodes write: plain dmesg, ``dmesg --ctime``, journalctl
``short-iso`` and ``short-monotonic``, with ``pid='<unknown>'`` where the driver prints it.
"""

from __future__ import annotations

from pathlib import Path

import pynvml
import pytest

from nodegate.errors import ConfigError
from nodegate.judge.xid import (
    ACTION_VERDICT,
    CATALOG_FILE,
    RECOVERY_ACTIONS,
    describe,
    judge_sxids,
    judge_xids,
    load_catalog,
    profile_overrides,
)
from nodegate.probes.kernel_log import parse_sxids, parse_xids
from nodegate.results import CheckResult, Severity, Verdict

BUS = {"gpu0": "00000000:18:00.0", "gpu1": "00000000:2A:00.0"}

#: the table nodegate carried before the catalogue (judge/xid.py HARDWARE_CRITICAL + APPLICATION)
OLD_TABLE = (48, 56, 57, 58, 62, 63, 64, 68, 69, 73, 74, 79, 80, 81, 92, 94, 95, 119, 120, 140,
             13, 31, 43, 45)


def _judge(lines: list[str], overrides: dict[int, str] | None = None) -> dict[str, CheckResult]:
    results = judge_xids(parse_xids(lines), BUS, boot_id="b-2", source="file", window="boot",
                         overrides=overrides)
    return {r.entity: r for r in results}


def test_every_code_loads_with_an_action() -> None:
    catalog = load_catalog()
    assert catalog.source.startswith("https://docs.nvidia.com/deploy/xid-errors/")
    assert catalog.date
    # NVIDIA's catalogue 1-172, and 185 (HBM sparing) from the R620 release notes
    assert sorted(catalog.entries) == [*range(1, 173), 185]
    for code, info in catalog.entries.items():
        assert info.action in ACTION_VERDICT or info.action == "from_line", code
        assert info.mnemonic and info.meaning, code
    # what NVIDIA gives no bucket for stays unspecified (WARN), never silently PASS
    assert {c for c, i in catalog.entries.items() if i.immediate is None} == {
        *range(162, 173), 185}


def test_the_table_covers_the_old_hand_written_one() -> None:
    assert set(OLD_TABLE) <= set(load_catalog().entries)


@pytest.mark.parametrize("xid", [109, 110, 136, 143, *range(144, 151)])
def test_hopper_and_nvlink_xids_fail_with_the_catalogue_action(xid: int) -> None:
    line = (f"[Tue Mar  5 10:00:0{xid % 10} 2024] NVRM: Xid (PCI:0000:18:00): {xid}, "
            "pid='<unknown>', name=<unknown>, Link 03 error")
    gpu0 = _judge([line])["gpu0"]
    assert gpu0.verdict == Verdict.FAIL and gpu0.severity == Severity.HARDWARE
    event = gpu0.evidence["events"][0]
    assert event["action"] == "reset_gpu"
    assert event["immediate"] in ("RESET_GPU", "WORKFLOW_NVLINK5_ERR")
    assert event["mnemonic"] == load_catalog().entries[xid].mnemonic
    assert event["first_time"] == f"Tue Mar  5 10:00:0{xid % 10} 2024"  # dmesg --ctime


@pytest.mark.parametrize(("value", "text", "action"), [
    (pynvml.NVML_GPU_RECOVERY_ACTION_GPU_RESET, "GPU Reset Required", "reset_gpu"),
    (pynvml.NVML_GPU_RECOVERY_ACTION_NODE_REBOOT, "Node Reboot Required", "reboot_node"),
    (pynvml.NVML_GPU_RECOVERY_ACTION_NODE_REBOOT, "OS Reboot", "reboot_node"),
    (pynvml.NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET, "Drain and Reset", "reset_gpu"),
])
def test_xid_154_fails_with_the_recovery_action_of_its_line(value: int, text: str,
                                                            action: str) -> None:
    line = ("2024-03-05T10:00:00+0000 gpu-b01 kernel: NVRM: Xid (PCI:0000:2a:00): 154, "
            f"GPU recovery action changed from 0x0 (None) to 0x{value:x} ({text})")
    gpu1 = _judge([line])["gpu1"]
    assert gpu1.verdict == Verdict.FAIL and gpu1.severity == Severity.HARDWARE
    event = gpu1.evidence["events"][0]
    assert event["recovery_action"] == f"0x{value:x} ({text})"
    assert event["recovery_action_from"] == "None"
    assert (event["immediate"], event["action"]) == ("XID_154", action)


def test_xid_154_back_to_none_passes_and_an_unreadable_one_warns() -> None:
    back = ("[ 900.1] NVRM: Xid (PCI:0000:18:00): 154, GPU recovery action changed from "
            f"0x{pynvml.NVML_GPU_RECOVERY_ACTION_GPU_RESET:x} (GPU Reset Required) to 0x0 (None)")
    assert _judge([back])["gpu0"].verdict == Verdict.PASS
    odd = "[ 900.2] NVRM: Xid (PCI:0000:18:00): 154, something else entirely"
    assert _judge([odd])["gpu0"].verdict == Verdict.WARN


def test_recovery_action_values_are_nvml_h_values() -> None:
    assert RECOVERY_ACTIONS[pynvml.NVML_GPU_RECOVERY_ACTION_NONE] == "none"
    assert RECOVERY_ACTIONS[pynvml.NVML_GPU_RECOVERY_ACTION_GPU_RESET] == "reset_gpu"
    assert RECOVERY_ACTIONS[pynvml.NVML_GPU_RECOVERY_ACTION_NODE_REBOOT] == "reboot_node"
    assert RECOVERY_ACTIONS[pynvml.NVML_GPU_RECOVERY_ACTION_DRAIN_P2P] == "reset_gpu"


def test_unknown_xid_warns_with_a_note() -> None:
    gpu0 = _judge(["[ 5.0] NVRM: Xid (PCI:0000:18:00): 999, pid=1, name=x, new"])["gpu0"]
    assert gpu0.verdict == Verdict.WARN
    assert "not in NVIDIA's Xid catalogue" in gpu0.evidence["events"][0]["meaning"]


def test_profile_override_ignores_13_and_escalates_31() -> None:
    lines = ["[ 10.0] NVRM: Xid (PCI:0000:18:00): 13, pid=5, name=t, Graphics SM Warp Exception",
             "[ 11.0] NVRM: Xid (PCI:0000:2a:00): 31, pid=5, name=t, Ch 00000010, MMU Fault"]
    assert _judge(lines)["gpu0"].verdict == Verdict.WARN
    over = profile_overrides({"overrides": {"13": "ignore", 31: "escalate"}})
    judged = _judge(lines, overrides=over)
    assert judged["gpu0"].verdict == Verdict.PASS
    assert judged["gpu0"].evidence["events"][0]["override"] == "ignore"
    assert judged["gpu1"].verdict == Verdict.FAIL
    assert judged["gpu1"].severity == Severity.HARDWARE


def test_profile_schema_takes_xid_overrides() -> None:
    from nodegate.profiles.loader import _validate
    from nodegate.profiles.schema import layer_schema

    _validate({"xid": {"overrides": {13: "ignore", "31": "escalate"}}}, layer_schema(), file="p")
    with pytest.raises(ConfigError):
        _validate({"xid": {"overrides": {13: "drop"}}}, layer_schema(), file="p")


SXID_LOG = [
    # dmesg: a fatal SXid and the driver's follow-up data line, then a non-fatal one
    "[131453.740743] nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 20034, Fatal, Link 30 LTSSM Fault Up",
    "[131453.740758] nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 20034, Data {0x50610002, 0x10100030}",
    "[Tue Mar  5 10:00:00 2024] nvidia-nvswitch3: SXid (PCI:0000:86:00.0): 12028, Non-fatal, "
    "Link 40 egress non-posted PRIV error (First)",
]


def test_sxid_lines_parse() -> None:
    events = parse_sxids(SXID_LOG)
    assert [(e.switch, e.sxid, e.severity) for e in events] == [
        (2, 20034, "fatal"), (2, 20034, None), (3, 12028, "non-fatal")]
    assert events[2].stamp == "Tue Mar  5 10:00:00 2024"
    assert events[2].message.startswith("Link 40 egress")
    assert parse_xids(SXID_LOG) == []


def test_fatal_sxid_fails_the_switch_non_fatal_warns() -> None:
    results = {r.entity: r for r in judge_sxids(parse_sxids(SXID_LOG), boot_id="b",
                                                  source="file", window="boot")}
    fatal = results["nvswitch2"]
    assert fatal.verdict == Verdict.FAIL and fatal.severity == Severity.HARDWARE
    event = fatal.evidence["events"][0]
    assert (event["sxid"], event["severity"], event["action"], event["count"]) == (
        20034, "fatal", "reboot_node", 2)
    assert results["nvswitch3"].verdict == Verdict.WARN


def test_a_broken_catalogue_names_the_key(tmp_path: Path) -> None:
    bad = tmp_path / "xid.yaml"
    bad.write_text("buckets: {RESET_GPU: {action: reset_gpu}}\nxids:\n  7: {immediate: NOPE}\n")
    with pytest.raises(ConfigError) as info:
        load_catalog(bad)
    assert info.value.key == "xids.7.immediate"
    assert CATALOG_FILE.name == "xid_catalog.yaml"


def test_describe_keeps_nvidia_buckets() -> None:
    event = describe(48, "An uncorrectable double bit error")
    assert (event["immediate"], event["action"], event["class"]) == (
        "WORKFLOW_XID_48", "reset_gpu", "hardware")
