"""PDU readers for four MIBs, every figure scaled by the units its MIB declares.

Models and their MIB (OIDs and units from the vendors' published MIB modules):

* ``apc-rpdu2`` -- APC PowerNet-MIB rPDU2 (1.3.6.1.4.1.318.1.1.26): device power and apparent
  power in hundredths of kW/kVA, energy in tenths of kWh, phase/bank current in tenths of A,
  phase voltage in V, power factor in hundredths, outlet power in W.
* ``raritan-pdu2`` -- Raritan PDU2-MIB (1.3.6.1.4.1.13742.6): unsigned sensor values scaled
  by each sensor's ``*SensorDecimalDigits``; energy in Wh.
* ``servertech-sentry4`` -- Sentry4-MIB (1.3.6.1.4.1.1718.4): current in hundredths of A,
  voltage in tenths of V, power in W, cord energy in tenths of kWh, outlet energy in Wh.
* ``vertiv-geist`` -- GEIST-V5-MIB (1.3.6.1.4.1.21239.5.2): voltage in tenths of V, current
  in hundredths of A, power in W, energy in Wh.

A negative raw value (the MIBs' "not available") is dropped rather than reported.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from nodegate.errors import ConfigError
from nodegate.power.credentials import redact
from nodegate.power.readings import DeviceReading
from nodegate.power.snmp import SnmpError, SnmpSession, SnmpTarget

Rows = dict[tuple[int, ...], int | str | None]


@dataclass(frozen=True)
class Column:
    """One MIB column: which quantity it holds and how to turn the raw integer into ``unit``."""

    quantity: str
    column: int
    scale: float
    unit: str


@dataclass(frozen=True)
class Table:
    """A MIB table read by one walk; ``entity`` is formatted with the row's last index."""

    base: str
    entity: str
    columns: tuple[Column, ...]
    name_column: int | None = None


def _scaled(raw: int | str | None, scale: float) -> float | None:
    if not isinstance(raw, int) or raw < 0:
        return None
    return round(raw * scale, 6)


def _by_row(rows: Rows) -> dict[tuple[int, ...], dict[int, int | str | None]]:
    out: dict[tuple[int, ...], dict[int, int | str | None]] = {}
    for suffix, value in rows.items():
        if len(suffix) < 2:
            continue
        out.setdefault(suffix[1:], {})[suffix[0]] = value
    return out


def _entity(fmt: str, index: tuple[int, ...]) -> str:
    # Daisy-chained units (first index > 1 on a multi-index table) get a unit prefix.
    entity = fmt.format(i=index[-1])
    if len(index) > 1 and index[0] > 1:
        entity = f"unit{index[0]}.{entity}"
    return entity


async def _read_tables(session: SnmpSession, dev: DeviceReading, tables: tuple[Table, ...]) -> None:
    for table in tables:
        rows = _by_row(await session.walk(table.base))
        for index, cols in sorted(rows.items()):
            entity = _entity(table.entity, index)
            label = ""
            if table.name_column is not None and isinstance(cols.get(table.name_column), str):
                label = str(cols[table.name_column])
            for col in table.columns:
                source = f"{table.base}.{col.column}." + ".".join(map(str, index))
                dev.add(entity, col.quantity, _scaled(cols.get(col.column), col.scale), col.unit,
                        source=source, label=label)


def _sum_into_device(dev: DeviceReading, prefix: str, quantity: str, unit: str) -> None:
    """Device-level total when the MIB only has per-inlet/cord figures."""
    if dev.find("device", quantity) is not None:
        return
    parts = [r for r in dev.readings if r.entity.startswith(prefix) and "." not in r.entity
             and r.quantity == quantity and isinstance(r.value, float)]
    if parts:
        total = round(sum(float(r.value) for r in parts), 6)
        dev.add("device", quantity, total, unit,
                source="sum of " + ", ".join(r.entity for r in parts))


# --- APC PowerNet-MIB rPDU2 --------------------------------------------------------------
APC = "1.3.6.1.4.1.318.1.1.26"
APC_TABLES = (
    Table(f"{APC}.4.3.1", "device", (
        Column("power", 5, 10.0, "W"),  # rPDU2DeviceStatusPower, hundredths of kW
        Column("peak_power", 6, 10.0, "W"),  # rPDU2DeviceStatusPeakPower
        Column("energy", 9, 0.1, "kWh"),  # rPDU2DeviceStatusEnergy, tenths of kWh
        Column("apparent_power", 16, 10.0, "VA"),  # rPDU2DeviceStatusApparentPower
        Column("power_factor", 17, 0.01, "ratio"),  # rPDU2DeviceStatusPowerFactor
    )),
    Table(f"{APC}.6.3.1", "phase{i}", (
        Column("current", 5, 0.1, "A"),  # rPDU2PhaseStatusCurrent, tenths of A
        Column("voltage", 6, 1.0, "V"),  # rPDU2PhaseStatusVoltage, V
        Column("power", 7, 10.0, "W"),  # rPDU2PhaseStatusPower, hundredths of kW
        Column("apparent_power", 8, 10.0, "VA"),
        Column("power_factor", 9, 0.01, "ratio"),
    )),
    Table(f"{APC}.8.3.1", "bank{i}", (
        Column("current", 5, 0.1, "A"),  # rPDU2BankStatusCurrent, tenths of A
    )),
    Table(f"{APC}.9.4.3.1", "outlet{i}", (
        Column("current", 6, 0.1, "A"),  # rPDU2OutletMeteredStatusCurrent, tenths of A
        Column("power", 7, 1.0, "W"),  # rPDU2OutletMeteredStatusPower, W
        Column("energy", 11, 0.1, "kWh"),  # rPDU2OutletMeteredStatusEnergy, tenths of kWh
    ), name_column=3),
)


async def _read_apc(session: SnmpSession, dev: DeviceReading) -> None:
    ident = _by_row(await session.walk(f"{APC}.2.1")).get((1,), {})
    dev.info.update({k: ident[c] for k, c in (("name", 3), ("model", 8), ("serial", 9))
                     if isinstance(ident.get(c), str)})
    await _read_tables(session, dev, APC_TABLES)


# --- Raritan PDU2-MIB ---------------------------------------------------------------------
RARITAN = "1.3.6.1.4.1.13742.6"
#: SensorTypeEnumeration -> (quantity, unit, extra scale applied after the decimal digits).
RARITAN_SENSORS: dict[int, tuple[str, str, float]] = {
    1: ("current", "A", 1.0),  # rmsCurrent
    4: ("voltage", "V", 1.0),  # rmsVoltage
    5: ("power", "W", 1.0),  # activePower
    6: ("apparent_power", "VA", 1.0),  # apparentPower
    7: ("power_factor", "ratio", 1.0),  # powerFactor
    8: ("energy", "kWh", 0.001),  # activeEnergy, Wh in the MIB
    23: ("frequency", "Hz", 1.0),  # frequency
}


def _digits_scale(digits: int | str | None) -> float:
    return 10.0 ** -digits if isinstance(digits, int) and 0 <= digits <= 6 else 1.0


def _emit_raritan(dev: DeviceReading, rows: Rows, digits: Rows, fallback: Rows, base: str, *,
                  entity_of: Callable[[tuple[int, ...]], str],
                  label_of: Callable[[tuple[int, ...]], str]) -> None:
    """Add one sensor table's readings: a value is an integer with its decimal digits in a
    sibling table, and only the sensor types in ``RARITAN_SENSORS`` are read."""
    for index, raw in sorted(rows.items()):
        sensor = RARITAN_SENSORS.get(index[-1])
        if sensor is None or not isinstance(raw, int):
            continue
        quantity, unit, extra = sensor
        dig = digits.get(index)
        if dig is None:  # pole digits absent on some firmware: the inlet's own digits
            dig = fallback.get((*index[:2], index[-1]))
        value = round(raw * _digits_scale(dig) * extra, 6)
        dev.add(entity_of(index), quantity, value, unit,
                source=f"{base}." + ".".join(map(str, index)), label=label_of(index))


def _inlet_entity(i: tuple[int, ...]) -> str:
    return f"inlet{i[1]}"


def _outlet_entity(i: tuple[int, ...]) -> str:
    return f"outlet{i[1]}"


def _no_label(i: tuple[int, ...]) -> str:
    return ""


def _pole_entity(n_inlets: int) -> Callable[[tuple[int, ...]], str]:
    """Poles are the device's phases on a one-inlet PDU, else named under their inlet."""
    def entity(i: tuple[int, ...]) -> str:
        return f"phase{i[2]}" if n_inlets <= 1 else f"inlet{i[1]}.phase{i[2]}"
    return entity


def _outlet_label(names: Rows) -> Callable[[tuple[int, ...]], str]:
    """The outlet's configured name, or none."""
    def label(i: tuple[int, ...]) -> str:
        name = names.get(i[:2])
        return name if isinstance(name, str) else ""
    return label


async def _read_raritan(session: SnmpSession, dev: DeviceReading) -> None:
    model = await session.get([f"{RARITAN}.3.2.1.1.3.1"])  # pduModel.1
    if isinstance(model.get(f"{RARITAN}.3.2.1.1.3.1"), str):
        dev.info["model"] = model[f"{RARITAN}.3.2.1.1.3.1"]
    # (value table, decimal-digits table, entity builder)
    inlet_digits = await session.walk(f"{RARITAN}.3.3.4.1.7")  # inletSensorDecimalDigits
    pole_digits = await session.walk(f"{RARITAN}.3.3.6.1.7")  # inletPoleSensorDecimalDigits
    outlet_digits = await session.walk(f"{RARITAN}.3.5.4.1.7")  # outletSensorDecimalDigits
    outlet_names = await session.walk(f"{RARITAN}.3.5.3.1.3")  # outletName
    inlets = await session.walk(f"{RARITAN}.5.2.3.1.4")  # measurementsInletSensorValue
    poles = await session.walk(f"{RARITAN}.5.2.4.1.4")  # measurementsInletPoleSensorValue
    outlets = await session.walk(f"{RARITAN}.5.4.3.1.4")  # measurementsOutletSensorValue
    n_inlets = len({k[:2] for k in inlets})
    _emit_raritan(dev, inlets, inlet_digits, inlet_digits, f"{RARITAN}.5.2.3.1.4",
                  entity_of=_inlet_entity, label_of=_no_label)
    _emit_raritan(dev, poles, pole_digits, inlet_digits, f"{RARITAN}.5.2.4.1.4",
                  entity_of=_pole_entity(n_inlets), label_of=_no_label)
    _emit_raritan(dev, outlets, outlet_digits, outlet_digits, f"{RARITAN}.5.4.3.1.4",
                  entity_of=_outlet_entity, label_of=_outlet_label(outlet_names))
    _sum_into_device(dev, "inlet", "power", "W")
    _sum_into_device(dev, "inlet", "energy", "kWh")


# --- ServerTech Sentry4-MIB -----------------------------------------------------------------
SENTRY4 = "1.3.6.1.4.1.1718.4.1"
SENTRY4_TABLES = (
    Table(f"{SENTRY4}.3.3.1", "cord{i}", (  # st4InputCordMonitorTable (unit, cord)
        Column("power", 3, 1.0, "W"),  # st4InputCordActivePower, W
        Column("apparent_power", 5, 1.0, "VA"),  # st4InputCordApparentPower, VA
        Column("power_factor", 8, 0.01, "ratio"),  # st4InputCordPowerFactor, hundredths
        Column("energy", 10, 0.1, "kWh"),  # st4InputCordEnergy, tenths of kWh
    )),
    Table(f"{SENTRY4}.4.3.1", "line{i}", (  # st4LineMonitorTable (unit, cord, line)
        Column("current", 3, 0.01, "A"),  # st4LineCurrent, hundredths of A
    )),
    Table(f"{SENTRY4}.5.3.1", "phase{i}", (  # st4PhaseMonitorTable (unit, cord, phase)
        Column("voltage", 3, 0.1, "V"),  # st4PhaseVoltage, tenths of V
        Column("current", 6, 0.01, "A"),  # st4PhaseCurrent, hundredths of A
        Column("power", 8, 1.0, "W"),  # st4PhaseActivePower, W
    )),
    Table(f"{SENTRY4}.8.3.1", "outlet{i}", (  # st4OutletMonitorTable (unit, cord, outlet)
        Column("current", 3, 0.01, "A"),  # st4OutletCurrent, hundredths of A
        Column("voltage", 6, 0.1, "V"),  # st4OutletVoltage, tenths of V
        Column("power", 7, 1.0, "W"),  # st4OutletActivePower, W
        Column("energy", 14, 0.001, "kWh"),  # st4OutletEnergy, Wh
    )),
)


async def _read_sentry4(session: SnmpSession, dev: DeviceReading) -> None:
    await _read_tables(session, dev, SENTRY4_TABLES)
    names = _by_row(await session.walk(f"{SENTRY4}.8.2.1"))  # st4OutletConfigTable
    _label_outlets(dev, {f"outlet{i[-1]}": str(c.get(3) or c.get(2) or "") for i, c in
                         names.items()})
    _sum_into_device(dev, "cord", "power", "W")
    _sum_into_device(dev, "cord", "energy", "kWh")


def _label_outlets(dev: DeviceReading, labels: dict[str, str]) -> None:
    from dataclasses import replace

    dev.readings = [replace(r, label=labels.get(r.entity, r.label)) for r in dev.readings]


# --- Vertiv / Geist GEIST-V5-MIB ------------------------------------------------------------
GEIST = "1.3.6.1.4.1.21239.5.2.3"
GEIST_TABLES = (
    Table(f"{GEIST}.1.1", "total{i}", (  # totalTable
        Column("power", 9, 1.0, "W"),  # totalRealPower, W
        Column("apparent_power", 10, 1.0, "VA"),  # totalApparentPower, VA
        Column("energy", 12, 0.001, "kWh"),  # totalEnergy, Wh
    )),
    Table(f"{GEIST}.2.1", "phase{i}", (  # phaseTable
        Column("voltage", 4, 0.1, "V"),  # phaseVoltage, tenths of V
        Column("current", 8, 0.01, "A"),  # phaseCurrent, hundredths of A
        Column("power", 12, 1.0, "W"),  # phaseRealPower, W
        Column("energy", 15, 0.001, "kWh"),  # phaseEnergy, Wh
    ), name_column=2),
    Table(f"{GEIST}.6.1", "outlet{i}", (  # outletTable (metered)
        Column("voltage", 4, 0.1, "V"),
        Column("current", 8, 0.01, "A"),
        Column("power", 12, 1.0, "W"),
        Column("energy", 15, 0.001, "kWh"),
    ), name_column=2),
)


async def _read_geist(session: SnmpSession, dev: DeviceReading) -> None:
    await _read_tables(session, dev, GEIST_TABLES)
    _sum_into_device(dev, "total", "power", "W")
    _sum_into_device(dev, "total", "energy", "kWh")


MODELS: dict[str, Callable[[SnmpSession, DeviceReading], Awaitable[None]]] = {
    "apc-rpdu2": _read_apc,
    "raritan-pdu2": _read_raritan,
    "servertech-sentry4": _read_sentry4,
    "vertiv-geist": _read_geist,
}


def check_model(model: str, *, key: str | None = None, file: str | None = None) -> None:
    if model not in MODELS:
        raise ConfigError(f"unknown PDU model {model!r}; one of {', '.join(MODELS)}",
                          key=key, file=file)


async def read_pdu(name: str, target: SnmpTarget, model: str) -> DeviceReading:
    """Read one PDU. Never raises for a device problem: a down device comes back ``up=False``."""
    check_model(model)
    dev = DeviceReading(name=name, kind="pdu", model=model, address=target.display)
    start = time.monotonic()
    # The per-request budget bounds each PDU; the overall budget bounds a PDU that answers
    # slowly to every one of many requests.
    budget = target.timeout_s * (target.retries + 1) * 8 + 5
    try:
        async with SnmpSession(target) as session:
            await asyncio.wait_for(MODELS[model](session, dev), timeout=budget)
        if not dev.readings:
            raise SnmpError(f"{target.display} answered but exposes no {model} readings "
                            "(wrong model or community view?)")
    except (SnmpError, asyncio.TimeoutError, OSError) as exc:
        dev.up = False
        dev.error = redact(str(exc) or type(exc).__name__)
        dev.readings = []
    dev.elapsed_s = time.monotonic() - start
    return dev
