"""A field that could not be read fails only the checks that need it (real nvme-cli JSON).

The SMART log feeds the SMART checks; id-ctrl feeds the firmware check (and the drive's own
warning temperature); ``nvme list`` feeds the namespace sizes. One missing SMART key, one
unreadable number or one failing command must never turn an unrelated check into ERROR.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from nodegate.judge.storage import SMART_CHECKS, judge_devices
from nodegate.probes import nvme
from nodegate.results import CheckResult, Verdict
from tests.storage.test_storage import FakeNode, by, proc, profile, text

SMART = json.loads(text("qemu-nvme-cli-2.3-smart-log.json"))
IDENT = json.loads(text("qemu-nvme-cli-2.3-id-ctrl.json"))
#: SMART log key (nvme-cli 2.3 spelling) -> the checks that need it
NEEDS: dict[str, set[str]] = {
    "critical_warning": {"nvme_critical_warning"},
    "temperature": {"nvme_temperature"},
    "avail_spare": {"nvme_spare"},
    "spare_thresh": {"nvme_spare"},
    "percent_used": {"nvme_wear"},
    "media_errors": {"nvme_media_errors"},
    "unsafe_shutdowns": {"nvme_unsafe_shutdowns"},
}


def _node(smart: Any, ident: Any = IDENT, *, smart_rc: int = 0,
          ident_rc: int = 0) -> FakeNode:
    node = FakeNode(text("qemu-nvme-cli-2.3-list.json"),
                    {p: json.dumps(smart) for p in ("/dev/nvme0n1", "/dev/nvme1n1")},
                    {p: json.dumps(ident) for p in ("/dev/nvme0n1", "/dev/nvme1n1")})
    failing = {"smart-log": smart_rc, "id-ctrl": ident_rc}

    def run(argv: list[str], timeout_s: float) -> Any:
        if argv[1] in failing and failing[argv[1]] and argv[2] == "/dev/nvme0n1":
            return proc(argv, rc=failing[argv[1]], err="NVMe status: INTERNAL(0x6)")
        return node(argv, timeout_s)

    return run  # type: ignore[return-value]


def _judge(run: Any, **kw: Any) -> list[CheckResult]:
    return judge_devices(nvme.read_devices(run), profile(**kw))


def _errors(results: list[CheckResult], entity: str) -> set[str]:
    return {r.check for r in results if r.entity == entity and r.verdict == Verdict.ERROR}


@pytest.mark.parametrize("key", sorted(NEEDS))
def test_a_missing_smart_key_fails_only_the_checks_that_need_it(key: str) -> None:
    smart = {k: v for k, v in SMART.items() if k != key}
    results = _judge(_node(smart), thresholds={"nvme_temperature_max_c": {
        "max": 70, "unit": "C", "source": "policy: test"}})
    assert _errors(results, "nvme0") == NEEDS[key]
    assert by(results, "nvme_firmware")["nvme0"].verdict == Verdict.PASS
    assert {r.verdict for r in results if r.entity.endswith("n1")} == {Verdict.PASS}


def test_the_real_p4510_log_without_critical_warning_keeps_its_firmware_check() -> None:
    """The issue's case: dell/csi-baremetal's P4510 capture less ``critical_warning``."""
    smart = json.loads(text("nvme-cli-1.x-smart-log-p4510-partial.json"))
    del smart["critical_warning"]
    node = FakeNode(text("nvme-cli-1.x-list-p4510.json"), {"/dev/nvme9n1": json.dumps(smart)},
                    {"/dev/nvme9n1": text("nvme-cli-1.x-id-ctrl-p4510-partial.json")})
    results = _judge(node)
    assert by(results, "nvme_critical_warning")["nvme9"].verdict == Verdict.ERROR
    firmware = by(results, "nvme_firmware")["nvme9"]
    assert (firmware.verdict, firmware.measured) == (Verdict.PASS, "VDV1DP21")
    assert by(results, "nvme_spare")["nvme9"].verdict == Verdict.PASS
    assert by(results, "nvme_namespace_size")["nvme9n1"].verdict == Verdict.PASS


def test_a_failing_smart_log_leaves_firmware_and_namespaces_judged() -> None:
    results = _judge(_node(SMART, smart_rc=1))
    assert _errors(results, "nvme0") == set(SMART_CHECKS)
    assert by(results, "nvme_firmware")["nvme0"].verdict == Verdict.PASS
    assert by(results, "nvme_namespace_size")["nvme0n1"].verdict == Verdict.PASS
    assert _errors(results, "nvme1") == set()


def test_a_failing_id_ctrl_fails_the_firmware_check_not_the_smart_ones() -> None:
    results = _judge(_node(SMART, ident_rc=1))
    assert _errors(results, "nvme0") == {"nvme_firmware", "nvme_temperature"}
    assert "INTERNAL" in by(results, "nvme_firmware")["nvme0"].evidence["reason"]
    limited = _judge(_node(SMART, ident_rc=1), thresholds={"nvme_temperature_max_c": {
        "max": 70, "unit": "C", "source": "policy: test"}})
    assert _errors(limited, "nvme0") == {"nvme_firmware"}  # the profile gives the limit
    assert by(results, "nvme_firmware")["nvme1"].verdict == Verdict.PASS


def test_id_ctrl_without_fr_takes_the_firmware_from_nvme_list() -> None:
    ident = {k: v for k, v in IDENT.items() if k != "fr"}
    results = _judge(_node(SMART, ident))
    assert by(results, "nvme_firmware")["nvme0"].measured == "7.2.22"
    assert _errors(results, "nvme0") == set()


@pytest.mark.parametrize(("key", "value"), [
    ("media_errors", "7" * 5000),
    ("media_errors", "\u0661\u0662"),
    ("media_errors", "\uff17"),
    ("media_errors", -3),
    ("media_errors", str(2**128)),
    ("unsafe_shutdowns", 1.5),
    ("percent_used", True),
    ("critical_warning", 256),
    ("critical_warning", {"value": "x"}),
    ("temperature", None),
])
def test_a_number_that_does_not_read_fails_its_own_check_only(key: str, value: Any) -> None:
    results = _judge(_node({**SMART, key: value}), thresholds={"nvme_temperature_max_c": {
        "max": 70, "unit": "C", "source": "policy: test"}})
    assert _errors(results, "nvme0") == NEEDS[key]


def test_a_list_with_wrong_shapes_is_read_not_crashed_on() -> None:
    doc = {"Devices": [{"Subsystems": [None, {"Controllers": "x"}, {"Controllers": [
        {"Controller": "nvme0", "Namespaces": [1, {"NameSpace": "nvme0n1",
                                                   "PhysicalSize": "\u0661"}]}]}]}, "x"]}
    (ns,) = nvme.parse_list(doc)
    assert (ns.path, ns.size_bytes) == ("/dev/nvme0n1", None)
    assert nvme.controller_of("/dev/nvme\u00b2n1") == "nvme\u00b2n1"
