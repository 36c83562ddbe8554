"""The words every layer shares, defined once: verdicts and how they rank, severities, levels
and how deep each goes, check groups and subjects, load dtypes.

A leaf: it imports nothing of ours, so probes, the judge, reports, the fleet view, the gate and
the control side can all use it without an upward import (tests/foundation/test_layers.py).
"""

from __future__ import annotations

import enum


class Word(str, enum.Enum):
    """A word whose ``str()`` and f-string are its value, as 3.11's ``StrEnum`` (3.10 is
    supported): a group, subject or threshold key reads the same in a message as in a file."""

    def __str__(self) -> str:
        return str(self.value)


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

class Group(Word):
    """What ``--checks`` selects: the part of the node a check reads (and so what it costs)."""

    GPU = "gpu"
    LOG = "log"
    HOST = "host"
    NETWORK = "network"
    POWER = "power"
    LOAD = "load"


#: Check groups: the quick level's, and the load group the deeper levels add.
QUICK_GROUPS: tuple[str, ...] = tuple(g.value for g in Group if g is not Group.LOAD)
LOAD_GROUPS: tuple[str, ...] = (Group.LOAD.value,)
ALL_GROUPS: tuple[str, ...] = QUICK_GROUPS + LOAD_GROUPS


class Subject(Word):
    """What one check examines, finer than its group: the checks of one subject are declared
    together beside their judge, and ``validation/<group>/test_<subject>.py`` holds their
    pytest items."""

    IDENTITY = "identity"
    MEMORY = "memory"
    MODES = "modes"
    PCIE = "pcie"
    THERMAL_POWER = "thermal_power"
    NVLINK = "nvlink"
    XID = "xid"
    DRIVERS = "drivers"
    PLATFORM = "platform"
    NVME = "nvme"
    RAILS = "rails"
    COMPUTE = "compute"
    BANDWIDTH = "bandwidth"
    BURNIN = "burnin"
    FSDP = "fsdp"
    SOAK = "soak"
    HBM_PATTERNS = "hbm_patterns"
    INTEGRITY = "integrity"
    COMPUTE_DTYPES = "compute_dtypes"
    PCIE_LOAD = "pcie_load"
    STORAGE = "storage"
    POWER = "power"

#: GEMM dtypes a profile's ``load.dtypes`` may name.
DTYPES: tuple[str, ...] = ("bf16", "fp16", "tf32", "fp8", "fp4", "fp64")
