"""The catalogue of checks, built from their declarations (``nodegate.judge.declare``).

Each subject declares its checks once, beside its judge; this module only lists those
declaration modules (explicitly: no register-on-import) and indexes them. Both front ends read
group and level from here, ``validation/`` generates one pytest item per check from here, and
``python -m nodegate.battery.registry --doc docs/checks.md`` writes the catalogue's page.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from typing import Any

from nodegate.errors import ConfigError
from nodegate.judge import (
    gpu_checks,
    host_checks,
    load_checks,
    network_checks,
    power_checks,
    storage_checks,
    xid_checks,
)
from nodegate.judge.declare import Check
from nodegate.profiles.loader import Profile
from nodegate.profiles.threshold_keys import Key
from nodegate.vocabulary import LEVELS, Group, Level

#: Every declared check, in catalogue order (group by group, as the quick level runs them).
DECLARED: tuple[Check, ...] = (
    *gpu_checks.CHECKS, *xid_checks.CHECKS, *host_checks.CHECKS, *network_checks.CHECKS,
    *load_checks.CHECKS, *storage_checks.CHECKS, *power_checks.CHECKS,
)
#: name -> declaration (``group``, ``level`` and ``meaning`` as the old ``CheckInfo`` had).
CHECKS: dict[str, Check] = {c.name: c for c in DECLARED}
CheckInfo = Check  # the name callers knew the entries by


def level_of(check: str) -> str:
    """The lowest level that judges ``check`` (both front ends read it from here)."""
    info = CHECKS.get(check)
    return info.level.value if info is not None else Level.QUICK.value


def groups_at(level: Level) -> tuple[Group, ...]:
    """The groups with a check that runs at ``level``, in catalogue order."""
    return tuple(dict.fromkeys(c.group for c in DECLARED if level in c.levels))


def phases(level: str) -> tuple[str, ...]:
    """The load phases ``level`` runs, in run order (their ``<phase>_completed`` checks)."""
    return tuple(c.phase for c in DECLARED
                 if c.phase is not None and level in {lv.value for lv in c.levels})


def required_keys(profile_data: Mapping[str, Any], level: str,
                  groups: tuple[str, ...] | None = None) -> dict[Key, str]:
    """key -> the first check that needs it from this profile at ``level`` (in ``groups``,
    all when None): every one must be in the profile's thresholds."""
    wanted = Level(level)
    out: dict[Key, str] = {}
    for c in DECLARED:
        if groups is None or c.group in groups:
            for key in c.needs(profile_data, wanted):
                out.setdefault(key, c.name)
    return out


def read_keys() -> set[Key]:
    """Every threshold key some declared check reads (required or as a fallback)."""
    return {k for c in DECLARED for k in (*c.thresholds, *c.fallback)}


#: Keys read outside the node's battery -> the module that reads them: the fleet's trends,
#: the multi-node run and the rails' ib_write_bw (``nodegate multinode``), whose checks have
#: no level; there a missing key is their documented SKIP (the fabric is the site's).
READ_ELSEWHERE: dict[Key, str] = {
    Key.TREND_DRIFT_PCT_MAX: "nodegate.fleet.trends",
    **{key: "nodegate.judge.load" for key in (
        Key.MULTINODE_ALLREDUCE_BUSBW_GBPS_MIN, Key.MULTINODE_ALLGATHER_BUSBW_GBPS_MIN,
        Key.MULTINODE_REDUCESCATTER_BUSBW_GBPS_MIN, Key.MULTINODE_ALLTOALL_BUSBW_GBPS_MIN)},
    **{key: "nodegate.judge.network_load" for key in (
        Key.IB_WRITE_BW_GBPS_MIN, Key.IB_WRITE_BW_GDR_GBPS_MIN,
        Key.MULTINODE_IB_WRITE_BW_GBPS_MIN)},
}


def require_thresholds(profile: Profile, level: str, groups: Iterable[str]) -> None:
    """Refuse, before anything is measured, a profile that lacks a threshold a check running
    at ``level`` in ``groups`` needs: a profile error (exit 2) naming its file and the key,
    never a check that SKIPs for want of a number."""
    have = profile.data.get("thresholds") or {}
    missing = {key: check for key, check in required_keys(profile.data, level,
                                                            tuple(groups)).items()
               if key.value not in have}
    if not missing:
        return
    first = next(iter(missing))
    raise ConfigError(
        "missing threshold" + ("s " if len(missing) > 1 else " ") + "; ".join(
            f"{key.value} (needed by {check})" for key, check in missing.items())
        + f" at the {level} level: add it with a source to the profile or a layer below it",
        file=profile.file(), key=f"thresholds.{first.value}")


def render_doc() -> str:
    """``docs/checks.md``: the catalogue as a reader wants it, one table per group."""
    lines = ["# Checks", "",
             "Generated from the checks' declarations (`src/nodegate/judge/*_checks.py`) by",
             "`python -m nodegate.battery.registry --doc docs/checks.md`; do not edit by hand",
             "(`tests/battery/test_registry.py` fails when this page is stale).", "",
             "A check runs at its level and every deeper one "
             f"({' < '.join(LEVELS)}). A threshold in *italics* is read when the profile sets "
             "it and replaced by a documented figure otherwise. A check whose required feature "
             "the profile lacks does not apply: it is a SKIP naming the feature.", ""]
    for group in Group:
        lines += [f"## {group.value}", "",
                  "| check | level | subject | meaning | thresholds | requires | judge |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for c in DECLARED:
            if c.group is not group:
                continue
            keys = [f"`{k.value}`" for k in c.thresholds] + \
                [f"*`{k.value}`*" for k in c.fallback]
            needs = [f.value for f in c.requires] + ([f"dtype {c.dtype}"] if c.dtype else [])
            lines.append(f"| `{c.name}` | {c.level.value} | {c.subject.value} | "
                         f"{c.meaning.replace('|', '/')} | {', '.join(keys) or '-'} | "
                         f"{', '.join(needs) or '-'} | `{c.judge}` |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """``--doc PATH`` writes the page; ``--check PATH`` exits 1 when PATH is stale."""
    if len(argv) != 2 or argv[0] not in ("--doc", "--check"):
        print("usage: python -m nodegate.battery.registry --doc|--check docs/checks.md",
              file=sys.stderr)
        return 2
    from pathlib import Path

    path, text = Path(argv[1]), render_doc()
    if argv[0] == "--check":
        current = path.read_text(encoding="utf-8") if path.is_file() else ""
        if current != text:
            print(f"{path} is stale: run python -m nodegate.battery.registry --doc {path}",
                  file=sys.stderr)
            return 1
        return 0
    path.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
