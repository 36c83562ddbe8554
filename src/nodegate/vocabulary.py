"""The words every layer shares, defined once: verdicts and how they rank, severities, levels
and how deep each goes, check groups, load dtypes.

A leaf: it imports nothing of ours, so probes, the judge, reports, the fleet view, the gate and
the control side can all use it without an upward import (tests/foundation/test_layers.py).
"""

from __future__ import annotations

import enum


class Verdict(str, enum.Enum):
    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"
    SKIP = "SKIP"
    ERROR = "ERROR"


class Severity(str, enum.Enum):
    """How bad a non-passing verdict is for the node's future."""

    INFO = "info"  # informational, never blocks
    WARNING = "warning"  # degraded, operator should look
    CRITICAL = "critical"  # node must not take work
    HARDWARE = "hardware"  # hardware fault: RMA/field-service candidate


#: Which verdict is worse, for picking "the worst" of several (a node's, an entity's).
VERDICT_RANK: dict[Verdict, int] = {
    Verdict.PASS: 0,
    Verdict.SKIP: 1,
    Verdict.WARN: 2,
    Verdict.ERROR: 3,
    Verdict.FAIL: 4,
}
#: The same ranks by the verdicts' report strings (JSON readers that never build enums).
VERDICT_RANK_BY_NAME: dict[str, int] = {v.value: rank for v, rank in VERDICT_RANK.items()}
#: Report order of the ``counts`` keys and the summary footer: worst first.
VERDICT_ORDER: tuple[Verdict, ...] = tuple(sorted(VERDICT_RANK, key=VERDICT_RANK.__getitem__,
                                                  reverse=True))
#: Verdicts that keep a node out of service (docs/verdicts.md), as report strings.
FAILING: tuple[str, ...] = (Verdict.FAIL.value, Verdict.ERROR.value)


class Level(str, enum.Enum):
    """How deep the run went: cron health check, standard gate, or full acceptance burn-in."""

    QUICK = "quick"
    STANDARD = "standard"
    ACCEPTANCE = "acceptance"


#: Levels in depth order; a check runs at its own level and every level above it.
LEVELS: tuple[str, ...] = tuple(level.value for level in Level)
LEVEL_RANK: dict[str, int] = {level: rank for rank, level in enumerate(LEVELS)}
#: The levels that put load on the GPUs.
LOAD_LEVELS: tuple[str, ...] = LEVELS[1:]

#: Check groups: the quick level's, and the load group the deeper levels add.
QUICK_GROUPS: tuple[str, ...] = ("gpu", "log", "host", "network", "power")
LOAD_GROUPS: tuple[str, ...] = ("load",)
ALL_GROUPS: tuple[str, ...] = QUICK_GROUPS + LOAD_GROUPS

#: GEMM dtypes a profile's ``load.dtypes`` may name.
DTYPES: tuple[str, ...] = ("bf16", "fp16", "tf32", "fp8", "fp64")
