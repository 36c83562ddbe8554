"""The standard/acceptance load phases, as the battery sees them.

A thin adapter over ``nodegate.battery.load_levels`` (torch; imported only here, never on the
``nodegate health`` path) that hands the plugin and ``nodegate validate`` one outcome.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from nodegate.battery.registry import phases
from nodegate.errors import CannotRunError
from nodegate.load.outcome import LoadOutcome
from nodegate.profiles import Profile
from nodegate.progress import Progress
from nodegate.vocabulary import LOAD_LEVELS

#: The phase checks a skipped load run reports, one per phase the level would run (from the
#: ``<phase>_completed`` declarations, ``nodegate.judge.load_checks``).
PHASES = {level: phases(level) for level in LOAD_LEVELS}


def foreign_holders() -> dict[str, str]:
    """GPUs other processes compute on: the load phases skip rather than collide with them."""
    from nodegate.probes.nvml import read_board

    try:
        board = read_board(with_nvlink_counters=False)
    except CannotRunError:
        return {}  # no NVML (CPU runs): nothing can hold a GPU
    return {gpu.entity: ", ".join(f"pid {p.pid} ({p.name})" for p in gpu.processes)
            for gpu in board.gpus if gpu.processes}


def skipped(level: str, holders: dict[str, str]) -> LoadOutcome:
    """The phases do not run (never collide with a user's job); each reports ERROR, not SKIP,
    so a node whose load level could not run is not joined as if it had passed."""
    from nodegate.judge.common import make
    from nodegate.results import Severity, Verdict

    reason = "GPUs held by other processes: " + "; ".join(
        f"{entity} by {who}" for entity, who in sorted(holders.items()))
    return LoadOutcome(
        results=[make(f"{phase}_completed", "node", Verdict.ERROR, reason=reason,
                      severity=Severity.CRITICAL, holders=holders)
                 for phase in PHASES.get(level, ())],
        backend="none (skipped)")


def run_load_group(profile: Profile, level: str, duration_scale: float = 1.0, *,
                   workers: int | None = None,
                   progress: Progress | Callable[[str], None] | None = None
                   ) -> LoadOutcome:
    holders = foreign_holders()
    if holders:
        return skipped(level, holders)
    try:
        # imported by name: torch (and so this package) is an optional extra
        levels: Any = importlib.import_module("nodegate.battery.load_levels")
    except ImportError as exc:
        raise CannotRunError(
            f"the load checks need torch (pip install 'nodegate[torch]'): {exc}"
        ) from None
    outcome = levels.run(profile.data, level, duration_scale=duration_scale, workers=workers,
                        progress=progress)
    # the report's series are {entity: {metric: [[t, v], ...]}}; the suite's own bookkeeping
    # (phase windows, sample rate: keys starting with "_") stays out of it
    telemetry = {k: v for k, v in dict(outcome.series).items() if not k.startswith("_")}
    series = {"load": telemetry} if telemetry else {}
    return LoadOutcome(results=list(outcome.results), series=series,
                            matrices=dict(outcome.matrices), backend=str(outcome.backend),
                            phases=list(getattr(outcome, "phases", [])))
