"""The standard/acceptance load phases, as the battery sees them.

A thin adapter over ``nodegate.load.suite`` (torch; imported only here, never on the
``nodegate health`` path) that hands the plugin and ``nodegate validate`` one outcome.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nodegate.errors import CannotRunError
from nodegate.profiles import Profile
from nodegate.results import CheckResult


@dataclass
class LoadGroupOutcome:
    results: list[CheckResult]
    series: dict[str, Any] = field(default_factory=dict)
    matrices: dict[str, Any] = field(default_factory=dict)
    backend: str = "unknown"
    phases: list[Any] = field(default_factory=list)


def run_load_group(profile: Profile, level: str, duration_scale: float = 1.0, *,
                   workers: int | None = None,
                   progress: Callable[[str], None] | None = None) -> LoadGroupOutcome:
    try:
        # imported by name: torch (and so this package) is an optional extra
        suite: Any = importlib.import_module("nodegate.load.levels")
    except ImportError as exc:
        raise CannotRunError(
            f"the load checks need torch (pip install 'nodegate[torch]'): {exc}"
        ) from None
    outcome = suite.run(profile.data, level, duration_scale=duration_scale, workers=workers,
                        progress=progress)
    # the report's series are {entity: {metric: [[t, v], ...]}}; the suite's own bookkeeping
    # (phase windows, sample rate: keys starting with "_") stays out of it
    telemetry = {k: v for k, v in dict(outcome.series).items() if not k.startswith("_")}
    series = {"load": telemetry} if telemetry else {}
    return LoadGroupOutcome(results=list(outcome.results), series=series,
                            matrices=dict(outcome.matrices), backend=str(outcome.backend),
                            phases=list(getattr(outcome, "phases", [])))
