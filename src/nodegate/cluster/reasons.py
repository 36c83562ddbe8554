"""The words of nodegate's drain reasons: which reason is a hold of which kind.

Its own module below ``gate``, ``holds`` and ``slurm``, which all read it, so that none of them
imports another to parse a reason."""

from __future__ import annotations

import re

from nodegate.errors import ConfigError
from nodegate.vocabulary import Level

#: Slurm keeps a reason of about this many characters; longer ones are cut here, so an
#: idempotence check compares like with like.
MAX_REASON = 200

REASON_PREFIX = "nodegate:"
UPGRADE_REASON = f"{REASON_PREFIX} upgrade"
#: Remediation's verdict on a card no reset cures (``remediation.escalation.rma_reason``).
RMA_REASON = f"{REASON_PREFIX} RMA"


_HOLD = re.compile(r"^nodegate: (standard|acceptance) ")
#: A suite's drain: ``nodegate: multinode failed ...``, or the cluster check's
#: ``nodegate: cluster-check: ...`` (pairs.reason_for): a health pass never lifts either.
_SUITE_HOLD = re.compile(r"^nodegate: (multinode|netload|cluster-check)[ :]")


def is_nodegate_reason(reason: str | None) -> bool:
    return bool(reason) and str(reason).startswith(REASON_PREFIX)


def upgrade_reason(previous: str | None, target: str) -> str:
    """``nodegate: upgrade 570.133.20 -> 580.65.06``: the version it left stays in Slurm."""
    return f"{UPGRADE_REASON} {previous or 'none'} -> {target}"


def is_upgrade_hold(reason: str | None) -> bool:
    return bool(reason) and (str(reason) == UPGRADE_REASON
                             or str(reason).startswith(UPGRADE_REASON + " "))


def is_rma_hold(reason: str | None) -> bool:
    return bool(reason) and (str(reason) == RMA_REASON
                             or str(reason).startswith(RMA_REASON + " "))


def hold_level(reason: str | None) -> Level | None:
    """The level a gate hold requires to lift (None: not a hold)."""
    match = _HOLD.match(reason or "")
    return Level(match.group(1)) if match else None


def suite_hold(reason: str | None) -> str | None:
    """The suite a hold requires to lift (None: not a suite hold)."""
    match = _SUITE_HOLD.match(reason or "")
    return match.group(1) if match else None


def clean_reason(reason: str) -> str:
    """One line, trimmed, bounded: the form Slurm stores, so an idempotence check compares
    like with like."""
    text = " ".join(reason.split())
    if not text:
        raise ConfigError("a drain reason must not be empty")
    return text[:MAX_REASON]
