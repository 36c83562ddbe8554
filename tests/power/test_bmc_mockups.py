"""The BMC reader against DMTF's published mockups (tests/power/data/mockups, see its README),
served by the project's emulator from a static tree on 127.0.0.1, and against edited copies of
them: nulls where lists belong, a chassis with only the modern resources, an absent PSU, a
redundancy group that is UnavailableOffline, two node power figures that disagree."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from nodegate.judge import power as checks
from nodegate.power.bmc import parse_bmc_url, read_bmc
from nodegate.power.readings import DeviceReading
from nodegate.profiles import resolve_profile
from nodegate.results import Verdict
from tests.power.helpers import BMC_PASSWORD, HERE

MOCKUPS = HERE / "data" / "mockups"
RACK = "public-rackmount1"
MODERN = "public-liquid-cooled-server"
C = "Chassis/1U"


@pytest.fixture(autouse=True)
def _password_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BMC_PW", BMC_PASSWORD)


@contextmanager
def _served(root: Path) -> Iterator[int]:
    from nodegate_lab.bmc_emulator import BmcState, serve

    server = serve(("127.0.0.1", 0), BmcState(mockup_dir=root), "root", BMC_PASSWORD)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def _read(root: Path) -> DeviceReading:
    with _served(root) as port:
        target = parse_bmc_url(f"http://root@127.0.0.1:{port}", password="env:BMC_PW",
                               insecure=True)
        return read_bmc("bmc", target)


Edit = Callable[[dict[str, Any]], None]


def _copy(tmp_path: Path, name: str, edits: dict[str, Edit] | None = None) -> Path:
    """A private copy of a mockup with ``edits`` (resource path -> in-place change) applied."""
    root = tmp_path / name
    shutil.copytree(MOCKUPS / name, root)
    for rel, edit in (edits or {}).items():
        file = root / rel / "index.json"
        body = json.loads(file.read_text())
        edit(body)
        file.write_text(json.dumps(body, indent=4))
    return root


def _set(**values: Any) -> Edit:
    return lambda body: body.update(values)


def _drop(*keys: str) -> Edit:
    def edit(body: dict[str, Any]) -> None:
        for key in keys:
            body.pop(key, None)
    return edit


PROFILE: dict[str, Any] = {
    "power": {"psu_count": 1, "psu_redundant": True, "psu_watts": 400},
    "thresholds": {
        "inlet_temp_max_c": {"max": 35, "unit": "C", "source": "policy: test"},
        "bmc_power_source_spread_max": {"max": 0.05, "unit": "ratio", "source": "policy: 5 %"},
    },
}


def test_public_rackmount1_as_published() -> None:
    dev = _read(MOCKUPS / RACK)
    assert dev.up, dev.error
    assert dev.value("node", "power") == 374.0
    assert [(s["watts"], s["source"].split("/1U/")[-1]) for s in dev.info["power_sources"]] == [
        (374.0, "EnvironmentMetrics#PowerWatts"), (374.0, "Sensors/TotalPower"),
        (344.0, "Power#/PowerControl/0")]
    # IntakeTemp has no ReadingType; its ReadingUnits "Cel" makes it a temperature (Sensor schema)
    inlet = dev.find("inlet", "temperature")
    assert inlet is not None and inlet.value == 24.8 and inlet.source.endswith("Sensors/IntakeTemp")
    fans = [(r.label, r.value, r.unit) for r in dev.readings if r.quantity == "speed"]
    assert fans == [("Fan Bay 1", 2200.0, "RPM"), ("Fan Bay 2", 2400.0, "RPM"),
                    ("Fan for CPU 1", 1490.0, "RPM"), ("Fan for CPU 2", 1490.0, "RPM")]
    psus = {p["id"]: p for p in dev.info["psus"]}
    assert psus["Bay1"]["health"] == "Warning" and psus["Bay1"]["present"]
    assert psus["Bay2"] == {**psus["Bay2"], "present": False, "health": "Absent",
                            "state": "Absent"}
    assert dev.value("psu2", "health") == "Absent"
    assert dev.info["redundancy"]["state"] == "UnavailableOffline"
    assert dev.info["redundancy"]["health"] == "OK"


def test_disagreeing_power_sources_warn_on_public_rackmount1() -> None:
    """374 W (EnvironmentMetrics) vs 344 W (legacy PowerControl): 8 % apart, over the
    platform profile's 5 % policy -> WARN naming both sources."""
    dev = _read(MOCKUPS / RACK)
    profile = resolve_profile("xe9680-h100").data
    result = checks.check_power_sources_agree(dev.info["power_sources"], profile)
    assert result.verdict is Verdict.WARN
    assert result.measured == pytest.approx(30 / 374, abs=1e-4)
    assert result.threshold["source"].startswith("policy:")
    assert sorted(result.evidence["sources"].values()) == [344.0, 374.0, 374.0]


@pytest.mark.parametrize("drop_sensors", [False, True], ids=["sensors", "thermalmetrics-only"])
def test_modern_only_chassis_gives_inlet_and_fans(tmp_path: Path, drop_sensors: bool) -> None:
    root = _copy(tmp_path, MODERN, {C: _drop("Sensors")} if drop_sensors else None)
    dev = _read(root)
    assert dev.up, dev.error
    inlet = dev.find("inlet", "temperature")
    assert inlet is not None and inlet.value == 24.8
    assert ("ThermalMetrics" in inlet.source) == drop_sensors
    fans = [r for r in dev.readings if r.quantity == "speed"]
    assert [(f.label, f.value, f.unit) for f in fans] == [
        ("Fan Bay 1", 2200.0, "RPM"), ("Fan Bay 2", 2400.0, "RPM")]
    assert all("ThermalSubsystem/Fans/" in f.source for f in fans)
    assert dev.value("node", "power") == 374.0
    verdict = checks.check_inlet_temp(24.8, PROFILE).verdict
    assert verdict is Verdict.PASS


def test_absent_psu_is_absent_not_failed(tmp_path: Path) -> None:
    """Bay2 is an empty bay: not healthy, not failed. With Bay1 healthy a one-PSU profile
    passes; a two-PSU profile fails on the absent bay, and says so."""
    root = _copy(tmp_path, MODERN, {f"{C}/PowerSubsystem/PowerSupplies/Bay1":
                                    _set(Status={"State": "Enabled", "Health": "OK"})})
    dev = _read(root)
    one = checks.check_psu_count(dev.info["psus"], PROFILE)
    assert one.verdict is Verdict.PASS
    assert one.evidence == {"present": 1, "absent": ["Bay2"], "not_ok": []}
    two = checks.check_psu_count(dev.info["psus"], {"power": {"psu_count": 2}})
    assert two.verdict is Verdict.FAIL and two.measured == 1
    assert two.evidence["absent"] == ["Bay2"] and two.evidence["not_ok"] == []


def test_unavailable_offline_redundancy_is_not_redundant(tmp_path: Path) -> None:
    """public-rackmount1's PSU redundancy group: Health OK but State UnavailableOffline. Even
    with enough healthy PSUs (edited: Bay2 present and OK) the BMC's State says no."""
    ok = _set(Status={"State": "Enabled", "Health": "OK"})
    root = _copy(tmp_path, RACK, {f"{C}/PowerSubsystem/PowerSupplies/Bay1": ok,
                                  f"{C}/PowerSubsystem/PowerSupplies/Bay2": ok})
    dev = _read(root)
    result = checks.check_psu_redundancy(dev.info["psus"], dev.info["redundancy"], PROFILE)
    assert result.measured == 2 and result.threshold["min"] == 2
    assert result.verdict is Verdict.FAIL
    assert result.evidence["bmc_redundancy_state"] == "UnavailableOffline"


NULL_LISTS = {
    "legacy-Redundancy": (f"{C}/Power", "Redundancy"),
    "PowerSupplyRedundancy": (f"{C}/PowerSubsystem", "PowerSupplyRedundancy"),
    "legacy-PowerSupplies": (f"{C}/Power", "PowerSupplies"),
    "legacy-PowerControl": (f"{C}/Power", "PowerControl"),
    "legacy-Temperatures": (f"{C}/Thermal", "Temperatures"),
    "legacy-Fans": (f"{C}/Thermal", "Fans"),
    "TemperatureReadingsCelsius": (f"{C}/ThermalSubsystem/ThermalMetrics",
                                   "TemperatureReadingsCelsius"),
    "Sensors-Members": (f"{C}/Sensors", "Members"),
    "Chassis-Members": ("Chassis", "Members"),
}


@pytest.mark.parametrize("where", list(NULL_LISTS), ids=list(NULL_LISTS))
def test_a_null_list_never_marks_the_bmc_down(tmp_path: Path, where: str) -> None:
    resource, key = NULL_LISTS[where]
    edits: dict[str, Edit] = {resource: _set(**{key: None})}
    if where == "legacy-Redundancy":  # make the legacy Redundancy the one that is read
        edits[C] = _drop("PowerSubsystem")
    dev = _read(_copy(tmp_path, RACK, edits))
    if where == "Chassis-Members":  # nothing to read at all: down, with a reason, no crash
        assert not dev.up and "no Chassis" in (dev.error or "")
        return
    assert dev.up, dev.error
    assert dev.value("node", "power") == 374.0
    assert dev.value("inlet", "temperature") in (24.8, 25.0)
    if where == "legacy-Redundancy":
        assert dev.info["redundancy"] == {}
        assert [p["id"] for p in dev.info["psus"]] == ["0"]


def test_everything_null_at_once_still_reads(tmp_path: Path) -> None:
    keys_by_resource: dict[str, list[str]] = {}
    for resource, key in NULL_LISTS.values():
        if resource != "Chassis":
            keys_by_resource.setdefault(resource, []).append(key)
    edits: dict[str, Edit] = {res: _set(**dict.fromkeys(keys))
                              for res, keys in keys_by_resource.items()}
    edits[f"{C}/EnvironmentMetrics"] = _set(PowerWatts=None)
    dev = _read(_copy(tmp_path, RACK, edits))
    assert dev.up, dev.error
    assert dev.find("node", "power") is None  # every power figure gone: none invented
    inlet = dev.find("inlet", "temperature")
    assert inlet is not None and inlet.source.endswith("TemperatureSummaryCelsius/Intake")


def test_static_tree_stays_inside_its_folder() -> None:
    from nodegate_lab.bmc_emulator import _static_resource

    assert _static_resource(MOCKUPS / RACK, "/redfish/v1")["Id"] == "RootService"  # type: ignore[index]
    assert _static_resource(MOCKUPS / RACK, "/redfish/v1/Chassis/../../../README.md") is None
    assert _static_resource(MOCKUPS / RACK, "/etc/passwd") is None
    assert _static_resource(MOCKUPS / RACK, "/redfish/v1/NoSuchThing") is None


def test_emulator_cli_refuses_a_folder_that_is_no_mockup(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "nodegate_lab.bmc_emulator", "--listen", "127.0.0.1:0",
         "--mockup", str(tmp_path), "--password-env", "EMU_PW"],
        env={"EMU_PW": BMC_PASSWORD, "PATH": "/usr/bin:/bin",
             "PYTHONPATH": ":".join(sys.path)},
        capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert "--mockup" in done.stderr and "index.json" in done.stderr
    assert "Traceback" not in done.stderr
