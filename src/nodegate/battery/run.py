"""One battery run: quick checks, then the load level, under the node's battery lock.

``nodegate validate`` and the pytest plugin both call ``run_battery``, so the two front ends
measure the same things in the same order and can only differ in how they show the results.
Which checks belong to which level comes from ``nodegate.battery.registry`` alone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodegate.battery.engine import QuickOptions, run_quick
from nodegate.battery.registry import level_of, require_thresholds
from nodegate.battery_lock import BatteryLock
from nodegate.probes.nvml import DEFAULT_DEADLINE_S
from nodegate.profiles import Profile
from nodegate.progress import Progress
from nodegate.results import CheckResult
from nodegate.vocabulary import LEVEL_RANK, QUICK_GROUPS


@dataclass
class BatteryRun:
    """What one run measured and judged, with what a report needs besides the results."""

    results: list[CheckResult]
    started_at: float
    duration_s: float
    notes: list[str] = field(default_factory=list)
    boot_id: str | None = None
    series: dict[str, Any] = field(default_factory=dict)
    matrices: dict[str, Any] = field(default_factory=dict)
    backend: str = "nvml"
    #: entity -> identity of each GPU read by the quick checks (the report's ``gpus``)
    gpus: dict[str, dict[str, str]] = field(default_factory=dict)


def _power_sampler(level: str, groups: tuple[str, ...]) -> Any:
    """A power sampler for the load phase, when this node has power wiring installed."""
    if level != "acceptance" or "power" not in groups:
        return None
    from nodegate.battery.power import PowerSampler, load_wiring

    wiring = load_wiring()
    if wiring is None:
        return None
    return PowerSampler(wiring).start()


def above_level(results: list[CheckResult], level: str) -> list[str]:
    """Checks in ``results`` that the registry places above ``level`` (a wiring defect)."""
    rank = LEVEL_RANK[level]
    return sorted({r.check for r in results if LEVEL_RANK[level_of(r.check)] > rank})


def run_battery(profile: Profile, level: str, groups: tuple[str, ...], *,
                xid_window_s: float | None = None, duration_scale: float = 1.0,
                nvml_deadline_s: float = DEFAULT_DEADLINE_S,
                workers: int | None = None, progress: Progress | None = None,
                report_dir: Path | None = None) -> BatteryRun:
    """Run ``groups`` at ``level`` on this node; raises CannotRunError if another run holds
    the battery lock."""
    quick = tuple(g for g in groups if g in QUICK_GROUPS)
    require_thresholds(profile, level, groups)  # a profile error before the lock is taken
    with BatteryLock():
        started = time.time()
        t0 = time.monotonic()
        run = BatteryRun(results=[], started_at=started, duration_s=0.0)
        if quick:
            if progress is not None:
                progress.line(f"quick checks: {','.join(quick)}")
            outcome = run_quick(profile, QuickOptions(groups=quick, xid_window_s=xid_window_s,
                                                       report_dir=report_dir,
                                                       nvml_deadline_s=nvml_deadline_s))
            run.results += outcome.results
            run.notes += outcome.notes
            run.boot_id = outcome.boot_id
            run.gpus = outcome.board.identities() if outcome.board is not None else {}
            nvml_down = outcome.nvml_down
        else:
            nvml_down = None
        if nvml_down is not None and "load" in groups:
            # the quick phase already holds the node's ERROR; a load on GPUs NVML cannot
            # see would only fail later without a report
            run.notes.append(f"load checks not run: NVML unavailable ({nvml_down})")
        elif level != "quick" and "load" in groups:
            from nodegate.battery.storage import preflight

            preflight(profile, level)
            _run_load(run, profile, level, groups, duration_scale=duration_scale,
                      workers=workers, progress=progress)
            _run_storage(run, profile, level, progress)
        run.duration_s = time.monotonic() - t0
    wrong = above_level(run.results, level)
    if wrong:  # the registry and the engine disagree: say so rather than judge silently
        run.notes.append(f"checks above level {level} per the registry: {', '.join(wrong)}")
    return run


def _run_load(run: BatteryRun, profile: Profile, level: str, groups: tuple[str, ...], *,
              duration_scale: float, workers: int | None, progress: Progress | None) -> None:
    from nodegate.battery.load import run_load_group

    if progress is not None:
        progress.line(f"load checks, level {level}, duration scale {duration_scale}")
    sampler = _power_sampler(level, groups)
    try:
        load = run_load_group(profile, level, duration_scale, workers=workers,
                              progress=progress)
    finally:
        if progress is not None:
            progress.clear()
        if sampler is not None:
            sampler.stop()
    run.results += load.results
    if sampler is not None:
        from nodegate.battery.power import judge_under_load

        run.results += judge_under_load(sampler, profile)
    run.series, run.matrices, run.backend = load.series, load.matrices, load.backend


def _run_storage(run: BatteryRun, profile: Profile, level: str,
                 progress: Progress | None) -> None:
    """fio on the NVMe array and DCGM's diagnostic, as the profile asks (battery.storage)."""
    from nodegate.battery.storage import run_dcgm, run_fio

    if progress is not None:
        progress.line(f"storage and DCGM checks, level {level}")
    run.results += run_fio(profile)
    run.results += run_dcgm(profile, level)
