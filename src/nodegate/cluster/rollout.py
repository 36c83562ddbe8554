"""A rolling upgrade's plan and its summary: pure functions, no I/O.

Why batches are planned here and not by pyinfra's ``--serial``/``--limit``: a batch must hold
no more than ``max_unavailable`` nodes of any one Slurm partition, so a partition never loses
more nodes at once than its site allows, whatever the batch size.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nodegate.errors import ConfigError


def parse_count(value: object, key: str) -> int:
    """A whole number of nodes from a knob (``--data`` gives strings): ``2`` or ``"2"``, never
    ``2.5``, ``true`` or ``Infinity``, which ``int()`` would take or turn into a traceback."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ConfigError(f"must be a whole number, not {value!r}", key=key)
    text = str(value).strip()
    if not text.isascii() or not text.lstrip("-").isdigit():
        raise ConfigError(f"must be a whole number, not {value!r}", key=key)
    return int(text)


def parse_max_unavailable(value: object,
                          key: str = "rolling_max_unavailable") -> int | dict[str, int] | None:
    """``rolling_max_unavailable``: None, a count, or ``{partition: count, default: count}``
    (as a mapping or its JSON text)."""
    import json

    if value is None or isinstance(value, int | bool):
        return None if value is None else parse_count(value, key)
    if isinstance(value, str):
        text = value.strip()
        if not text.startswith("{"):
            return parse_count(text, key)
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"not a JSON object: {exc}", key=key) from exc
    if not isinstance(value, Mapping):
        raise ConfigError(f"must be a count or {{partition: count}}, not {value!r}",
                          key=key)
    return {str(part): parse_count(count, f"{key}.{part}") for part, count in value.items()}


def parse_seconds(value: object, key: str) -> float:
    """A finite, non-negative number of seconds (NaN would make a deadline never pass)."""
    import math

    try:
        if isinstance(value, bool):
            raise ValueError
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ConfigError(f"must be a number of seconds, not {value!r}", key=key) from None
    if not math.isfinite(seconds) or seconds < 0:
        raise ConfigError(f"must be a finite number of seconds >= 0, not {value!r}",
                          key=key)
    return seconds


@dataclass(frozen=True)
class Member:
    name: str
    partition: str


def limit_for(partition: str, batch: int,
              max_unavailable: int | Mapping[str, int] | None) -> int:
    """How many nodes of ``partition`` may be out at once: the site's number for it (or its
    ``default``), else the batch size."""
    if max_unavailable is None:
        return batch
    if isinstance(max_unavailable, Mapping):
        value = max_unavailable.get(partition, max_unavailable.get("default", batch))
    else:
        value = max_unavailable
    return int(value)


def plan_batches(members: Sequence[Member], batch: int,
                 max_unavailable: int | Mapping[str, int] | None = None) -> list[list[str]]:
    """Batches of at most ``batch`` nodes and at most ``max_unavailable`` per partition, in
    inventory order: each node goes into the first batch with room for it."""
    if batch < 1:
        raise ConfigError("must be at least 1", key="rolling_batch")
    out: list[list[Member]] = []
    for member in members:
        limit = limit_for(member.partition, batch, max_unavailable)
        if limit < 1:
            raise ConfigError(f"must be at least 1 (partition {member.partition!r})",
                              key="rolling_max_unavailable")
        for group in out:
            same = sum(1 for m in group if m.partition == member.partition)
            if len(group) < batch and same < limit:
                group.append(member)
                break
        else:
            out.append([member])
    return [[m.name for m in group] for group in out]


@dataclass(frozen=True)
class Standing:
    """Where one node stands at the end of the rollout."""

    name: str
    batch: int  # 1-based
    status: str  # upgraded | failed | skipped | untouched | unknown
    detail: str


def standings(batches: Sequence[Sequence[str]], outcomes: Mapping[str, str],
              failed: Mapping[str, str], skipped: set[str]) -> list[Standing]:
    """Each node's end state. ``failed``: host -> why (pyinfra failed it); the first batch with
    a failure stops the rollout, so every later batch is untouched."""
    stop: int | None = None
    for index, group in enumerate(batches):
        if any(name in failed for name in group):
            stop = index
            break
    out = []
    first_failed = next((n for n in batches[stop] if n in failed), None) if stop is not None \
        else None
    for index, group in enumerate(batches):
        for name in group:
            if name in failed:
                out.append(Standing(name, index + 1, "failed", failed[name]))
            elif name in skipped:
                out.append(Standing(name, index + 1, "skipped", outcomes.get(name, "")))
            elif stop is not None and index > stop:
                out.append(Standing(name, index + 1, "untouched",
                                    f"rollout stopped after {first_failed} failed"))
            elif name in outcomes and outcomes[name].startswith("at "):
                out.append(Standing(name, index + 1, "upgraded", outcomes[name]))
            else:
                out.append(Standing(name, index + 1, "unknown",
                                    outcomes.get(name, "no outcome recorded")))
    return out


def summary_text(target: str, rows: Sequence[Standing]) -> str:
    """The table printed at the end of the run."""
    width = max([len(r.name) for r in rows] + [4])
    lines = [f"rolling upgrade to {target}:",
             f"  {'node':<{width}}  batch  {'status':<9}  detail"]
    for r in rows:
        lines.append(f"  {r.name:<{width}}  {r.batch:>5}  {r.status:<9}  {r.detail}")
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.status] = counts.get(r.status, 0) + 1
    lines.append("  " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    return "\n".join(lines)
