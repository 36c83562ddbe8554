"""The power path's checks (BMC / PDU), declared once (``nodegate.judge.declare``): PSUs and
inlet at any level, draw under load at acceptance. Each has its own judge function in
``nodegate.judge.power``."""

from __future__ import annotations

from nodegate.judge.declare import Check, check
from nodegate.profiles.threshold_keys import Key
from nodegate.vocabulary import Group, Level, Subject

POWER = "nodegate.judge.power:"


def _power(name: str, level: Level, meaning: str, judge: str, *keys: Key) -> Check:
    return check(name, meaning, POWER + judge, *keys, subject=Subject.POWER, group=Group.POWER,
                 level=level)


CHECKS: tuple[Check, ...] = (
    _power("psu_count", Level.QUICK, "healthy PSUs as the profile says", "check_psu_count"),
    _power("psu_redundancy", Level.QUICK, "node survives losing a PSU", "check_psu_redundancy"),
    _power("inlet_temp", Level.QUICK, "chassis inlet temperature", "check_inlet_temp",
           Key.INLET_TEMP_MAX_C),
    _power("bmc_power_sources", Level.QUICK, "one BMC's node power figures agree with each other",
           "check_power_sources_agree", Key.BMC_POWER_SOURCE_SPREAD_MAX),
    _power("psu_budget", Level.ACCEPTANCE, "draw under load within non-redundant PSUs",
           "check_psu_budget", Key.PSU_BUDGET_FRACTION_MAX),
    _power("circuit_load", Level.ACCEPTANCE, "draw under load within 80% of circuits",
           "check_circuit_load", Key.CIRCUIT_LOAD_FRACTION_MAX),
    _power("bmc_gpu_power", Level.ACCEPTANCE, "BMC node power >= NVML GPU sum",
           "check_bmc_vs_gpu_power", Key.BMC_TO_GPU_POWER_RATIO_MIN),
)
