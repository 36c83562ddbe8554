"""What a power reader returns: typed readings with units, per device, with up/down state.

A reader never raises for a device that does not answer: it returns ``DeviceReading(up=False,
error=...)`` so the poller and ``nodegate power read`` keep going with the other devices.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Value = float | int | str | bool


@dataclass(frozen=True)
class Reading:
    """One figure: ``entity`` (device, phase1, bank2, outlet7, psu1, fan3, inlet), a quantity
    (power, current, voltage, energy, ...), its value scaled into ``unit``, and the ``source``
    (OID or Redfish path) it came from, kept as evidence."""

    entity: str
    quantity: str
    value: Value
    unit: str
    source: str = ""
    label: str = ""


@dataclass
class DeviceReading:
    """Everything one read of one device produced, or why it produced nothing."""

    name: str
    kind: str  # "pdu" or "bmc"
    model: str
    address: str  # already redacted: safe to print, log and label metrics with
    up: bool = True
    error: str | None = None
    elapsed_s: float = 0.0
    readings: list[Reading] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    def add(
        self, entity: str, quantity: str, value: Value | None, unit: str, *, source: str = "",
        label: str = "",
    ) -> None:
        """Append a reading; ``None`` (the model does not expose it) is simply skipped."""
        if value is None:
            return
        self.readings.append(Reading(entity, quantity, value, unit, source, label))

    def find(self, entity: str, quantity: str) -> Reading | None:
        for reading in self.readings:
            if reading.entity == entity and reading.quantity == quantity:
                return reading
        return None

    def value(self, entity: str, quantity: str) -> Value | None:
        reading = self.find(entity, quantity)
        return None if reading is None else reading.value

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "model": self.model,
            "address": self.address,
            "up": self.up,
            "error": self.error,
            "elapsed_s": round(self.elapsed_s, 3),
            "info": self.info,
            "readings": [
                {
                    "entity": r.entity,
                    "quantity": r.quantity,
                    "value": r.value,
                    "unit": r.unit,
                    "source": r.source,
                    "label": r.label,
                }
                for r in self.readings
            ],
        }


def format_value(value: Value) -> str:
    """Print floats without float noise (1.2100000000000002) but keep significant digits."""
    if isinstance(value, bool) or not isinstance(value, float):
        return str(value)
    return f"{value:.3f}".rstrip("0").rstrip(".") if value != int(value) else f"{value:.1f}"


def render_table(devices: list[DeviceReading]) -> str:
    """A plain-text table, one line per reading, for ``nodegate power read``."""
    rows: list[tuple[str, str, str, str, str, str]] = []
    for dev in devices:
        if not dev.up:
            rows.append((dev.name, dev.model, "-", "up", "0", f"DOWN: {dev.error}"))
            continue
        for r in dev.readings:
            rows.append(
                (dev.name, dev.model, r.entity, r.quantity, format_value(r.value), r.unit)
            )
    header = ("DEVICE", "MODEL", "ENTITY", "QUANTITY", "VALUE", "UNIT")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(5)]
    lines = []
    for row in [header, *rows]:
        cells = [row[i].ljust(widths[i]) if i != 4 else row[i].rjust(widths[i]) for i in range(5)]
        lines.append("  ".join([*cells, row[5]]).rstrip())
    return "\n".join(lines)
