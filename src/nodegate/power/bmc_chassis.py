"""What one Redfish chassis says about node power, PSUs, redundancy, inlet and fans.

Read as BMCs really are: any property may be ``null``, missing or of the wrong shape, and a
BMC may offer only the legacy resources (``Power``/``Thermal``), only the modern ones
(``PowerSubsystem``, ``ThermalSubsystem``/``ThermalMetrics``/``Fans``, ``EnvironmentMetrics``,
``Sensors``) or both. A property that does not read is treated as absent, never as a reason to
mark the whole BMC down. Definitions followed: DMTF Redfish schemas (Resource ``Status.State``
enum, Sensor ``ReadingType``/``ReadingUnits``, PhysicalContext ``Intake``), as published in
DMTF/Redfish-Publications csdl/.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

from nodegate.power.readings import DeviceReading

# Sensor.ReadingType -> the ReadingUnits the DMTF Sensor schema requires for it. Used to
# recognise a sensor that omits ReadingType (DMTF's own mockups do: IntakeTemp, AmbientTemp).
# "%" is left out on purpose: Humidity and Percent share it.
_TYPE_BY_UNITS = {"Cel": "Temperature", "W": "Power", "RPM": "Rotational"}


class Fetcher(Protocol):
    """The two reads this module needs from a Redfish client."""

    def get_opt(self, link: Any) -> dict[str, Any] | None: ...

    def members(self, link: Any) -> list[dict[str, Any]]: ...


def num(value: Any) -> float | None:
    """A finite JSON number, else None (null, a string, a bool, NaN/Infinity all read as absent)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def as_list(value: Any) -> list[dict[str, Any]]:
    """The objects in a JSON array; null, missing, a non-array and non-object items read as
    nothing, so ``"Redundancy": null`` is simply "no redundancy information"."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def health(status: Any) -> str:
    return str(as_dict(status).get("Health") or "Unknown")


def state(status: Any) -> str:
    return str(as_dict(status).get("State") or "Unknown")


def sensor_type(sensor: dict[str, Any]) -> str:
    """``ReadingType``, or the type implied by ``ReadingUnits`` when the BMC left it out."""
    declared = sensor.get("ReadingType")
    if isinstance(declared, str) and declared:
        return declared
    return _TYPE_BY_UNITS.get(str(sensor.get("ReadingUnits") or ""), "")


def _inlet_rank(context: Any, name: Any) -> int | None:
    """0: PhysicalContext Intake; 1: named inlet/intake; 2: named ambient; None: not an inlet."""
    if context == "Intake":
        return 0
    lowered = str(name or "").lower()
    if "inlet" in lowered or "intake" in lowered:
        return 1
    if "ambient" in lowered and context in (None, "", "Chassis", "SystemBoard"):
        return 2
    return None


def _best(candidates: list[tuple[int, float | None, str]]) -> tuple[float | None, str]:
    """The best-ranked candidate that has a number (a disabled sensor without one is skipped)."""
    with_value = sorted((c for c in candidates if c[1] is not None), key=lambda c: c[0])
    return (with_value[0][1], with_value[0][2]) if with_value else (None, "")


def read_node_power(env: dict[str, Any] | None, sensors: list[dict[str, Any]],
                    legacy: dict[str, Any] | None) -> list[tuple[float, str]]:
    """Every node power figure the chassis offers, preferred first: EnvironmentMetrics
    PowerWatts, a chassis-level Sensors power reading, legacy PowerControl."""
    found: list[tuple[float, str]] = []
    if env:
        watts = num(as_dict(env.get("PowerWatts")).get("Reading"))
        if watts is not None:
            found.append((watts, f"{env.get('@odata.id')}#PowerWatts"))
    for s in sensors:
        watts = num(s.get("Reading"))
        if (sensor_type(s) == "Power" and watts is not None
                and s.get("PhysicalContext") in ("Chassis", None)):
            found.append((watts, str(s.get("@odata.id"))))
            break
    if legacy:
        for pc in as_list(legacy.get("PowerControl")):
            watts = num(pc.get("PowerConsumedWatts"))
            if watts is not None:
                found.append((watts, str(pc.get("@odata.id")
                                         or f"{legacy.get('@odata.id')}#PowerControl")))
                break
    return found


def _psu(pid: str, source: Any, status: Any, capacity: Any, input_w: Any) -> dict[str, Any]:
    psu_state = state(status)
    present = psu_state != "Absent"
    return {"id": pid, "source": str(source or ""), "present": present,
            # An absent bay has no health (DMTF: Status.Health is omitted); say so plainly.
            "health": health(status) if present else "Absent", "state": psu_state,
            "capacity_w": num(capacity), "input_w": num(input_w)}


def read_psus(client: Fetcher, subsystem: dict[str, Any] | None,
              legacy: dict[str, Any] | None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """PSUs and the first redundancy group, modern PowerSubsystem first."""
    psus: list[dict[str, Any]] = []
    redundancy: dict[str, Any] = {}
    if subsystem:
        for p in client.members(subsystem.get("PowerSupplies")):
            metrics = client.get_opt(p.get("Metrics")) or {}
            psus.append(_psu(str(p.get("Id") or p.get("MemberId") or len(psus) + 1),
                             p.get("@odata.id"), p.get("Status"), p.get("PowerCapacityWatts"),
                             as_dict(metrics.get("InputPowerWatts")).get("Reading")))
        for r in as_list(subsystem.get("PowerSupplyRedundancy"))[:1]:
            redundancy = _redundancy(r.get("RedundancyType"), r.get("MinNeededInGroup"),
                                     r.get("RedundancyGroup"), r.get("Status"),
                                     f"{subsystem.get('@odata.id')}#PowerSupplyRedundancy")
    if not psus and legacy:
        for i, p in enumerate(as_list(legacy.get("PowerSupplies"))):
            psus.append(_psu(str(p.get("MemberId") or i + 1), p.get("@odata.id"),
                             p.get("Status"), p.get("PowerCapacityWatts"),
                             p.get("PowerInputWatts")))
    if not redundancy and legacy:
        for r in as_list(legacy.get("Redundancy"))[:1]:
            redundancy = _redundancy(r.get("Mode"), r.get("MinNumNeeded"),
                                     r.get("RedundancySet"), r.get("Status"),
                                     f"{legacy.get('@odata.id')}#Redundancy")
    return psus, redundancy


def _redundancy(mode: Any, min_needed: Any, group: Any, status: Any,
                source: str) -> dict[str, Any]:
    return {"mode": mode,
            "min_needed": min_needed if isinstance(min_needed, int)
            and not isinstance(min_needed, bool) else None,
            "members": len(as_list(group)), "health": health(status), "state": state(status),
            "source": source}


def read_inlet(sensors: list[dict[str, Any]], metrics: dict[str, Any] | None,
               legacy: dict[str, Any] | None) -> tuple[float | None, str]:
    """Chassis inlet temperature: Sensors, then ThermalMetrics, then legacy Thermal."""
    cands: list[tuple[int, float | None, str]] = []
    for s in sensors:
        rank = _inlet_rank(s.get("PhysicalContext"), s.get("Name"))
        if sensor_type(s) == "Temperature" and rank is not None:
            cands.append((rank, num(s.get("Reading")), str(s.get("@odata.id"))))
    if metrics:
        mid = metrics.get("@odata.id")
        intake = as_dict(as_dict(metrics.get("TemperatureSummaryCelsius")).get("Intake"))
        cands.append((10, num(intake.get("Reading")), f"{mid}#TemperatureSummaryCelsius/Intake"))
        for i, t in enumerate(as_list(metrics.get("TemperatureReadingsCelsius"))):
            rank = _inlet_rank(t.get("PhysicalContext"), t.get("DeviceName") or t.get("Name"))
            if rank is not None:
                cands.append((11 + rank, num(t.get("Reading")),
                              f"{mid}#TemperatureReadingsCelsius/{i}"))
    if legacy:
        for t in as_list(legacy.get("Temperatures")):
            rank = _inlet_rank(t.get("PhysicalContext"), t.get("Name"))
            if rank is not None:
                cands.append((20 + rank, num(t.get("ReadingCelsius")),
                              f"{legacy.get('@odata.id')}#Temperatures/{t.get('MemberId')}"))
    return _best(cands)


Fan = tuple[str, float | None, str, str]  # label, value, unit, source


def read_fans(client: Fetcher, subsystem: dict[str, Any] | None,
              legacy: dict[str, Any] | None, sensors: list[dict[str, Any]]) -> list[Fan]:
    """Fans from ThermalSubsystem/Fans, else legacy Thermal.Fans, else fan Sensors."""
    fans: list[Fan] = []
    if subsystem:
        for f in client.members(subsystem.get("Fans")):
            if state(f.get("Status")) == "Absent":
                continue
            speed = as_dict(f.get("SpeedPercent"))
            rpm = num(speed.get("SpeedRPM"))
            value, unit = (rpm, "RPM") if rpm is not None else (num(speed.get("Reading")), "%")
            fans.append((str(f.get("Name") or f.get("Id") or ""), value, unit,
                         str(f.get("@odata.id"))))
    if not fans and legacy:
        for f in as_list(legacy.get("Fans")):
            unit = "RPM" if str(f.get("ReadingUnits") or "RPM").upper() == "RPM" else "%"
            fans.append((str(f.get("Name") or f.get("FanName") or ""), num(f.get("Reading")),
                         unit, f"{legacy.get('@odata.id')}#Fans/{f.get('MemberId')}"))
    if not fans:
        for s in sensors:
            kind = sensor_type(s)
            named_fan = s.get("PhysicalContext") == "Fan" or "fan" in str(s.get("Name", "")).lower()
            if kind == "Rotational" or (kind == "Percent" and named_fan):
                fans.append((str(s.get("Name") or ""), num(s.get("Reading")),
                             "RPM" if kind == "Rotational" else "%", str(s.get("@odata.id"))))
    return fans


def read_chassis(client: Fetcher, chassis: dict[str, Any], dev: DeviceReading) -> None:
    """Fill ``dev`` from one chassis; every linked resource is optional."""
    legacy_power = client.get_opt(chassis.get("Power"))
    subsystem = client.get_opt(chassis.get("PowerSubsystem"))
    env = client.get_opt(chassis.get("EnvironmentMetrics"))
    sensors = client.members(chassis.get("Sensors"))
    thermal = client.get_opt(chassis.get("Thermal"))
    thermal_sub = client.get_opt(chassis.get("ThermalSubsystem"))
    thermal_metrics = client.get_opt((thermal_sub or {}).get("ThermalMetrics"))

    sources = read_node_power(env, sensors, legacy_power)
    node_w, source = sources[0] if sources else (None, "")
    dev.add("node", "power", node_w, "W", source=source)
    dev.info["power_sources"] = [{"watts": w, "source": s} for w, s in sources]

    psus, redundancy = read_psus(client, subsystem, legacy_power)
    for n, p in enumerate(psus, start=1):
        entity = f"psu{n}"
        dev.add(entity, "health", p["health"], "", source=p["source"], label=p["id"])
        dev.add(entity, "capacity", p["capacity_w"], "W", source=p["source"], label=p["id"])
        dev.add(entity, "input_power", p["input_w"], "W", source=p["source"], label=p["id"])
    dev.info["psus"] = psus
    dev.info["redundancy"] = redundancy
    if redundancy:
        dev.add("psu", "redundancy_health", str(redundancy["health"]), "",
                source=redundancy["source"])
        dev.add("psu", "redundancy_state", str(redundancy["state"]), "",
                source=redundancy["source"])

    inlet, inlet_src = read_inlet(sensors, thermal_metrics, thermal)
    dev.add("inlet", "temperature", inlet, "C", source=inlet_src)
    for n, (label, value, unit, src) in enumerate(
            read_fans(client, thermal_sub, thermal, sensors), start=1):
        dev.add(f"fan{n}", "speed", value, unit, source=src, label=label)
