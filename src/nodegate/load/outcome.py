"""What a load run hands back: the one outcome type of the load levels and of the battery's
load group (no torch behind it, so the battery can name it without the optional extra)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nodegate.results import CheckResult


@dataclass
class LoadOutcome:
    """Judged results, the telemetry series and matrices for the report, the backend
    (``cuda/nccl``, ``cpu/gloo``, or why nothing ran), each phase's record, the resolved load
    config and the fault seams set."""

    results: list[CheckResult]
    series: dict[str, Any] = field(default_factory=dict)
    matrices: dict[str, Any] = field(default_factory=dict)
    backend: str = "unknown"
    phases: list[dict[str, Any]] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    seams: dict[str, str] = field(default_factory=dict)
