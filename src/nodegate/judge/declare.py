"""One check, declared once, as data: the type every subject's declarations use.

A subject's checks are declared beside their judge (``judge/<judge>_checks.py``, a light
module: no probe, no torch, so the cron path can read the catalogue without importing the
judges). Everything else is built from these declarations: the battery's catalogue
(``nodegate.battery.registry``), the engine's dispatch by group and level, the pytest items in
``validation/`` and ``docs/checks.md`` (``python -m nodegate.battery.registry --doc``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from nodegate import records
from nodegate.profiles.threshold_keys import Feature, Key, has_feature
from nodegate.vocabulary import LEVELS, Group, Level, Subject


@records.frozen_record
class Check:
    """A check: what it is called, what it examines, where and when it runs, what it means,
    which profile thresholds and features it needs, and the judge function that emits it.

    ``judge`` is ``module:function``, imported only when asked (``judge_function``): one
    judge function often emits several checks (``nodegate.judge.gpu:judge_board`` emits every
    GPU check), and each of them names that function. ``thresholds`` must be in the profile
    wherever the check runs; ``fallback`` keys are read when set and otherwise replaced by a
    documented figure (the drive's own limit, the datasheet x drives, a shared margin).
    """

    name: str
    subject: Subject
    group: Group
    level: Level  # the lowest level that judges it: it runs there and at every level above
    meaning: str
    judge: str
    thresholds: tuple[Key, ...] = ()
    fallback: tuple[Key, ...] = ()
    requires: tuple[Feature, ...] = ()
    phase: str | None = None  # a load phase whose completion this check reports
    dtype: str | None = None  # a GEMM dtype: the check runs where the profile runs that dtype

    @property
    def levels(self) -> tuple[Level, ...]:
        """Every level this check runs at."""
        return tuple(Level(name) for name in LEVELS[LEVELS.index(self.level.value):])

    def applies(self, profile_data: Mapping[str, Any], level: Level) -> bool:
        """Whether this check runs at ``level`` on a node of this profile: the level is one of
        its own, the profile has every feature it requires and runs its GEMM dtype."""
        if level not in self.levels:
            return False
        if self.dtype is not None:
            load = profile_data.get("load") or {}
            dtypes = [*load.get("dtypes", ()),
                      *(load.get("acceptance_dtypes", ()) if level is Level.ACCEPTANCE else ())]
            if self.dtype not in dtypes:
                return False
        return all(has_feature(profile_data, feature) for feature in self.requires)

    def needs(self, profile_data: Mapping[str, Any], level: Level) -> tuple[Key, ...]:
        """The threshold keys the profile must supply for this check at ``level``."""
        return self.thresholds if self.applies(profile_data, level) else ()

    def judge_function(self) -> Callable[..., Any]:
        """The judge function itself (imports its module: never on the catalogue's path)."""
        module, _, name = self.judge.partition(":")
        func: Callable[..., Any] = getattr(importlib.import_module(module), name)
        return func


def check(name: str, meaning: str, judge: str, *thresholds: Key, subject: Subject,
          group: Group, level: Level, fallback: tuple[Key, ...] = (),
          requires: tuple[Feature, ...] = (), phase: str | None = None,
          dtype: str | None = None) -> Check:
    """A declaration in one line per check (the keys it reads follow its judge)."""
    return Check(name, subject, group, level, meaning, judge, thresholds, fallback, requires,
                 phase, dtype)
