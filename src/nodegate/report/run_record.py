"""The report's ``run`` record: what a battery run actually did, so a gate can tell a full
run from a narrowed, shortened or fault-injected one (a level label alone proves nothing)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from nodegate.profiles import Profile


def run_record(groups: Iterable[str], profile: Profile, level: str,
               duration_scale: float | None = None) -> dict[str, Any]:
    """``{groups, duration_scale, seams, profile_digest}`` for ``nodegate.report.build``;
    ``duration_scale`` only when a load level ran (``level`` above quick, ``load`` asked)."""
    from nodegate.load import seams  # plain os.environ reads; no torch behind it

    groups = list(groups)
    record: dict[str, Any] = {"groups": groups, "seams": seams.active(),
                              "profile_digest": profile.digest()}
    if duration_scale is not None and level != "quick" and "load" in groups:
        record["duration_scale"] = float(duration_scale)
    return record
