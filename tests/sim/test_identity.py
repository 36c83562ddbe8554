"""Card identity read through the simulator -> nvidia-ml-py -> our probe, into the report.

A board without an InfoROM serial or a board part number (NVML_ERROR_NOT_SUPPORTED) has those
fields absent from its identity, never empty or invented.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from nodegate.sim import scenario
from tests.conftest import run_cli

NvmlRun = Callable[..., Any]

READ = """
from nodegate.probes.nvml import _read_board
board = _read_board(n, with_nvlink_counters=False)
out["ids"] = board.identities()
out["unsupported"] = {g.entity: g.unsupported for g in board.gpus}
"""


def test_h100_board_identity_is_the_scenarios(nvml: NvmlRun) -> None:
    got = nvml("h100-hgx", READ)
    board = scenario.load("h100-hgx")
    assert len(got["ids"]) == 8
    for index, gpu in enumerate(board["gpus"]):
        ident = got["ids"][f"gpu{index}"]
        assert ident["serial"] == gpu["serial"] and ident["uuid"] == gpu["uuid"]
        assert ident["board_part_number"] == "692-2G520-0200-000"
        assert ident["vbios"] == gpu["vbios_version"]
        assert ident["pci_bus_id"].endswith(gpu["pci_bus_id"][-7:])  # 00000000:18:00.0


def test_not_supported_fields_are_absent(nvml: NvmlRun, tmp_path: Path) -> None:
    data = yaml.safe_load(scenario.find("h200-single").read_text())
    data["gpu"]["board_part_number"] = ""
    data["gpus"][0]["serial"] = ""
    path = tmp_path / "no-inforom-serial.yaml"
    path.write_text(yaml.safe_dump(data))
    got = nvml(str(path), READ)
    assert set(got["ids"]["gpu0"]) == {"uuid", "pci_bus_id", "vbios"}
    assert {"serial", "board_part_number"} <= set(got["unsupported"]["gpu0"])


def test_health_report_and_junit_carry_identity(tmp_path: Path) -> None:
    result = run_cli("sim", "run", "h100-hgx", "--", "nodegate", "health", "--profile",
                     "xe9680-h100", "--checks", "gpu", "--report-dir", str(tmp_path),
                     "--no-textfile", "--quiet",
                     env={"NODEGATE_LOCK_FILE": str(tmp_path / "lock")})
    assert result.returncode in (0, 1), result.stderr
    report = json.loads((tmp_path / "quick-latest.json").read_text())
    serial = scenario.load("h100-hgx")["gpus"][3]["serial"]
    assert report["gpus"]["gpu3"]["serial"] == serial
    junit = next(tmp_path.glob("*.xml"))
    cases = ET.parse(junit).getroot().iter("testcase")
    props = {c.get("name"): {p.get("name"): p.get("value") for p in c.iter("property")}
             for c in cases}
    assert props["pcie_link[gpu3]"]["serial"] == serial
