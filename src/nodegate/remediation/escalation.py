"""Escalation memory: remediations counted per GPU *serial* within a window.

Why the serial and not the index: cards move (a swap, a re-enumeration after a BIOS change
renumbers ``gpu3`` as ``gpu5``), and the vendor replaces a card, not a slot. A GPU whose
serial the board does not report is counted by its UUID, then by its entity, and the
reason says so. Past the profile's limit (``remediation.max_per_gpu`` within
``remediation.window_h``), or on an RMA-class finding, the node stays drained with the reason
``nodegate: RMA gpuN serial S`` (one line, Slurm's reason field).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nodegate.cluster.reasons import RMA_REASON, clean_reason
from nodegate.errors import ConfigError
from nodegate.remediation.state import ActionRecord

#: Defaults when the profile's ``remediation`` section leaves a key out.
DEFAULT_WINDOW_H = 168.0
DEFAULT_MAX_PER_GPU = 1


@dataclass(frozen=True)
class Policy:
    """The profile's ``remediation`` section, read once."""

    enabled: bool = False
    window_h: float = DEFAULT_WINDOW_H
    max_per_gpu: int = DEFAULT_MAX_PER_GPU
    gpu_reset: bool = True

    @classmethod
    def from_profile(cls, profile: Mapping[str, Any]) -> Policy:
        """The section, every number within the schema's bounds (profiles/schema.py): a
        profile that skipped the schema (``--enable`` on a hand-made one) is refused here,
        exit 2 naming the key, never an OverflowError."""
        section = profile.get("remediation") or {}
        return cls(enabled=bool(section.get("enabled", False)),
                   window_h=_bounded(section, "window_h", DEFAULT_WINDOW_H, MAX_WINDOW_H),
                   max_per_gpu=int(_bounded(section, "max_per_gpu", DEFAULT_MAX_PER_GPU,
                                            MAX_PER_GPU, integer=True)),
                   gpu_reset=bool(section.get("gpu_reset", True)))


#: The schema's maxima (profiles/schema.py, ``remediation``).
MAX_WINDOW_H = 87600.0
MAX_PER_GPU = 1000


def _bounded(section: Mapping[str, Any], key: str, default: float, most: float, *,
             integer: bool = False) -> float:
    value = section.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            (integer and not isinstance(value, int)) or not math.isfinite(value) or \
            not (0 <= value <= most) or (key == "window_h" and value == 0):
        raise ConfigError(f"remediation.{key} must be a number in (0, {most:g}]"
                          if key == "window_h" else
                          f"remediation.{key} must be an integer in [0, {most:g}]",
                          key=f"remediation.{key}")
    return float(value)


def card_key(entity: str, identity: Mapping[str, str]) -> str:
    """What a card is known by: its serial, else its UUID, else (last resort) its entity."""
    return identity.get("serial") or identity.get("uuid") or entity


def count_recent(history: Sequence[ActionRecord], key: str, now: dt.datetime,
                 window_h: float) -> int:
    """Actions on the card ``key`` (a serial) that started within the window and ran (done,
    or unknown after a killed run); one that failed to run remediated nothing: the ladder
    goes on to the next rung instead."""
    start = now - dt.timedelta(hours=window_h)
    return sum(1 for action in history
               if action.outcome in ("done", "unknown") and action.started_at >= start
               and key in action.serials.values())


def over_limit(targets: Sequence[str], identities: Mapping[str, Mapping[str, str]],
               history: Sequence[ActionRecord], now: dt.datetime,
               policy: Policy) -> list[tuple[str, str, int]]:
    """(entity, card key, count) for each target whose card already had ``max_per_gpu``
    remediations within the window: one more would be past the limit."""
    out = []
    for entity in targets:
        key = card_key(entity, identities.get(entity, {}))
        count = count_recent(history, key, now, policy.window_h)
        if count >= policy.max_per_gpu:
            out.append((entity, key, count))
    return out


def rma_reason(entity: str | None, identity: Mapping[str, str], why: str = "") -> str:
    """``nodegate: RMA gpu3 serial 1654922001234 (...)``, clipped as Slurm stores it."""
    if entity is None:
        return clean_reason(f"{RMA_REASON} node" + (f" ({why})" if why else ""))
    serial = identity.get("serial")
    ident = f"serial {serial}" if serial else (
        f"uuid {identity['uuid']}" if identity.get("uuid") else "serial unknown")
    return clean_reason(f"{RMA_REASON} {entity} {ident}" + (f" ({why})" if why else ""))
