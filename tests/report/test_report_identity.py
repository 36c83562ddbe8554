"""Which physical card each GPU entity was: the report's optional ``gpus`` map, its schema,
JUnit properties, and an old report without it still validating unchanged."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from nodegate.errors import ConfigError
from nodegate.probes.nvml import BoardSnapshot, GpuState
from nodegate.report import NodeReport, build, load, render_junit, to_json, validate
from tests.report.conftest import FINISH, START

OLD_REPORT = Path(__file__).parent / "data" / "old-report-before-gpus.json"

#: As an H100 HGX reports them (real formats: 13-digit serial, 692- part numbers).
GPU3 = {"serial": "1654922009382", "uuid": "GPU-5c6a4cbb-6fa7-1d2e-5d0e-ad7f2a5b9c13",
        "pci_bus_id": "00000000:9A:00.0", "vbios": "96.00.A5.00.01",
        "board_part_number": "692-2G520-0200-000"}


def _board() -> BoardSnapshot:
    gpu0 = GpuState(index=0, uuid="GPU-0", bus_id="00000000:18:00.0", vbios="96.00.A5.00.01")
    gpu3 = GpuState(index=3, uuid=GPU3["uuid"], serial=GPU3["serial"],
                    bus_id=GPU3["pci_bus_id"], vbios=GPU3["vbios"],
                    board_part_number=GPU3["board_part_number"])
    lost = GpuState(index=5, lost=True)  # nothing read: no entry at all
    return BoardSnapshot("570.133.20", "12.570.133.20", 12080, 3, [gpu0, gpu3, lost])


def test_identity_holds_only_what_nvml_gave() -> None:
    ids = _board().identities()
    assert ids == {"gpu0": {"uuid": "GPU-0", "pci_bus_id": "00000000:18:00.0",
                            "vbios": "96.00.A5.00.01"},
                   "gpu3": GPU3}
    assert GpuState(index=1, serial="  ", uuid="GPU-1").identity() == {"uuid": "GPU-1"}


def test_report_carries_gpus_before_digest_and_round_trips(report: NodeReport,
                                                           tmp_path: Path) -> None:
    with_ids = build(report.results, node=report.node, profile=report.profile,
                     level=report.level, started_at=START, finished_at=FINISH,
                     backend=report.backend, gpus=_board().identities())
    data = with_ids.to_dict()
    keys = list(data)
    # in the head the fleet reader reads, after the small keys, before the digest and bulk
    assert keys.index("counts") < keys.index("gpus") < keys.index("digest") < \
        keys.index("results")
    assert data["gpus"]["gpu3"] == GPU3 and "serial" not in data["gpus"]["gpu0"]
    validate(data)
    path = with_ids.write(tmp_path / "r.json")
    loaded = load(path)
    assert loaded.gpus == with_ids.gpus
    assert loaded.identity_of("gpu3.link5") == GPU3
    assert loaded.identity_of("gpu2-gpu3") == {} and loaded.identity_of("node") == {}
    assert to_json(loaded) == path.read_text()


def test_old_report_without_gpus_still_validates_byte_for_byte() -> None:
    """Written by the writer before this field existed: valid, no identities, and written
    back identically (a report without identities has no ``gpus`` key at all)."""
    text = OLD_REPORT.read_text()
    assert '"gpus"' not in text
    loaded = load(OLD_REPORT)
    assert loaded.gpus == {}
    assert to_json(loaded) == text


@pytest.mark.parametrize(("gpus", "key"), [
    ({"gpu0": {"serial": ""}}, "$.gpus.gpu0.serial"),            # empty is never written
    ({"gpu0": {"serial": "1654922009382", "colour": "green"}}, "$.gpus.gpu0.colour"),
    ({"gpu0": {"serial": 1654922009382}}, "$.gpus.gpu0.serial"),  # a string, as NVML gives
])
def test_schema_refuses_bad_identity(report: NodeReport, gpus: dict[str, object],
                                     key: str) -> None:
    data = json.loads(to_json(report))
    data["gpus"] = gpus
    with pytest.raises(ConfigError) as caught:
        validate(data)
    assert caught.value.key == key


def test_junit_testcases_of_a_gpu_carry_its_identity(report: NodeReport) -> None:
    with_ids = build(report.results, node=report.node, profile=report.profile,
                     level=report.level, started_at=START, finished_at=FINISH,
                     backend=report.backend, gpus={"gpu3": GPU3})
    root = ET.fromstring(render_junit(with_ids).split("\n", 1)[1])
    cases = {case.get("name"): case for case in root.iter("testcase")}
    failing = cases["nvlink_state[gpu3.link5]"]
    props = {p.get("name"): p.get("value") for p in failing.iter("property")}
    assert props == GPU3
    assert failing.find("failure") is not None
    assert cases["pcie_link[gpu3]"].find("properties") is not None
    for name in ("pcie_link[gpu2]", "gpu_count[node]", "p2p_bandwidth[gpu2-gpu3]"):
        assert cases[name].find("properties") is None  # no identity known: nothing invented
    # the old report renders as before: no testcase properties at all
    old = ET.fromstring(render_junit(load(OLD_REPORT)).split("\n", 1)[1])
    assert all(case.find("properties") is None for case in old.iter("testcase"))
