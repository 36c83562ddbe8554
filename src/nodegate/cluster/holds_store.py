"""The holds record: every drain nodegate made (``Record``) and every comment mark it wrote
(``Mark``), in ``holds.json`` on the machine that made the call (``cluster.holds`` decides with
it). Why a file of its own: a drain is nodegate's only where this record says so, so losing it
must be loud (a ``StoreError``, exit 2), never a fresh start that hands nodegate's holds to
a person or a person's to nodegate.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import enum
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodegate.cluster.scheduler import NodeState
from nodegate.errors import ConfigError
from nodegate.fileio import atomic_write_text, read_text
from nodegate.flock import exclusive

SCHEMA = "nodegate.holds/1"
HOLDS_FILE = "holds.json"
LOCK_FILE = "holds.lock"
DEFAULT_HOLDS_DIR = Path("/var/lib/nodegate/holds")
#: A record of a few hundred nodes is a few hundred KiB; past this the file is not ours.
MAX_BYTES = 4 * 1024 * 1024


def default_holds_dir() -> Path:
    """``$NODEGATE_HOLDS_DIR`` or /var/lib/nodegate/holds (survives reboots)."""
    return Path(os.environ.get("NODEGATE_HOLDS_DIR", str(DEFAULT_HOLDS_DIR)))


class Kind(str, enum.Enum):
    """A hold's kind; the value is what the record carries."""

    NONE = "none"  # not drained, not down
    HEALTH = "health"  # a quick (periodic health) failure
    STANDARD = "standard"  # a standard join/re-qualification hold (remediation's too)
    MAINTENANCE = "maintenance"  # deploy/drain.py: out for a change
    UPGRADE = "upgrade"  # deploy/upgrade_driver.py, deploy/rolling_upgrade.py
    INITIAL = "initial"  # a new node, drained until it is validated (slurm_controller)
    ACCEPTANCE = "acceptance"
    SUITE = "suite"  # multinode, netload, cluster-check (``Hold.suite`` says which)
    PERSON = "person"  # anything not in the record: an administrator's, Slurm's own
    RMA = "rma"  # remediation gave a card up



#: The kinds nodegate itself writes (a record naming another is not ours to read).
OWN_KINDS = frozenset(Kind) - {Kind.NONE, Kind.PERSON}


@dataclass(frozen=True)
class Record:
    """One drain nodegate made: what it wrote and why."""

    node: str
    reason: str
    kind: Kind
    suite: str | None = None
    comment: str | None = None
    evidence: str | None = None  # the report id (or ``remediation``/``deploy``)
    made_at: dt.datetime | None = None  # wall clock, UTC
    boot_id: str | None = None  # the boot it was made in, and the boot-relative time:
    boottime_s: float | None = None  # "newer than the hold" survives a wall-clock step
    #: the reason's time as Slurm showed it right after the drain: a person who re-drains
    #: the node later with the same text gets another time, so the drain is theirs
    slurm_time: dt.datetime | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "reason": self.reason, "kind": self.kind.value,
                "suite": self.suite, "comment": self.comment, "evidence": self.evidence,
                "made_at": self.made_at.isoformat() if self.made_at else None,
                "boot_id": self.boot_id, "boottime_s": self.boottime_s,
                "slurm_time": self.slurm_time.isoformat() if self.slurm_time else None}

    def shown(self, state: NodeState) -> bool:
        """Slurm still shows this drain: drained, the very reason, and (where both carry
        one) the same reason time."""
        if not state.drained or state.reason != self.reason:
            return False
        return self.slurm_time is None or state.reason_time is None or \
            state.reason_time == self.slurm_time

    @classmethod
    def from_dict(cls, data: Any) -> Record:
        if not isinstance(data, dict):
            raise ValueError("a hold must be a mapping")
        kind = Kind(data.get("kind"))
        if kind not in OWN_KINDS:
            raise ValueError(f"kind {kind.value!r} is never recorded")
        for key in ("node", "reason"):
            if not isinstance(data.get(key), str) or not data[key]:
                raise ValueError(f"{key} must be a non-empty string")
        made = data.get("made_at")
        shown = data.get("slurm_time")
        boottime = data.get("boottime_s")
        if boottime is not None and not isinstance(boottime, (int, float)):
            raise ValueError("boottime_s must be a number")
        return cls(node=data["node"], reason=data["reason"], kind=kind,
                   suite=_str_or_none(data.get("suite")),
                   comment=_str_or_none(data.get("comment")),
                   evidence=_str_or_none(data.get("evidence")),
                   made_at=dt.datetime.fromisoformat(made) if made else None,
                   boot_id=_str_or_none(data.get("boot_id")),
                   boottime_s=float(boottime) if boottime is not None else None,
                   slurm_time=dt.datetime.fromisoformat(shown) if shown else None)


def _str_or_none(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a string")
    return value


class StoreError(ConfigError):
    """The record cannot be read: exit 2 naming the file, never a fresh start (a forgotten
    record would make nodegate's own holds a person's, and a person's never ours)."""


class HoldStore:
    """``holds.json`` and its lock in one folder. Every change is a locked read-modify-write
    through ``fileio.atomic_write_text``: a reader never sees half a file."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory if directory is not None else default_holds_dir()
        self.path = self.directory / HOLDS_FILE
        self.lock_path = self.directory / LOCK_FILE

    def check(self) -> None:
        """Before acting: the folder is a folder (exit 2 naming it otherwise)."""
        if os.path.lexists(self.directory) and not self.directory.is_dir():
            raise StoreError("the holds record folder is not a folder",
                             file=str(self.directory), key="--holds-dir")
        self.load()

    def load(self) -> dict[str, Record]:
        return self._read()[0]

    def _read(self) -> tuple[dict[str, Record], dict[str, Mark]]:
        if not os.path.lexists(self.path):
            return {}, {}
        text = read_text(self.path, kind="config", limit=MAX_BYTES)
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or data.get("schema") != SCHEMA:
                raise ValueError(f"not a {SCHEMA} document")
            holds, marks = data.get("holds"), data.get("marks", {})
            if not isinstance(holds, dict) or not isinstance(marks, dict):
                raise ValueError("holds and marks must be mappings")
            records = {str(node): Record.from_dict(entry) for node, entry in holds.items()}
            written = {str(node): Mark.from_dict(entry) for node, entry in marks.items()}
        except (ValueError, TypeError) as exc:
            raise StoreError(f"not a valid holds record ({exc}); read it and fix or remove it "
                             "by hand: it names the drains nodegate may lift",
                             file=str(self.path)) from None
        return {n: r for n, r in records.items() if r.node == n}, written

    def get(self, node: str) -> Record | None:
        return self.load().get(node)

    def mark(self, node: str) -> Mark | None:
        return self._read()[1].get(node)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[tuple[dict[str, Record], dict[str, Mark]]]:
        self.check()
        with exclusive(self.lock_path, what="holds record lock", wait_s=30.0,
                       busy=lambda pid: f"another nodegate (pid {pid}) holds "
                       f"{self.lock_path}"):
            records, marks = self._read()
            yield records, marks
            body = {"schema": SCHEMA,
                    "holds": {n: r.to_dict() for n, r in sorted(records.items())},
                    "marks": {n: m.to_dict() for n, m in sorted(marks.items())}}
            atomic_write_text(self.path, json.dumps(body, indent=1) + "\n")

    def put(self, record: Record) -> None:
        with self._locked() as (records, _):
            records[record.node] = record

    def forget(self, node: str) -> None:
        if self.get(node) is None:
            return
        with self._locked() as (records, _):
            records.pop(node, None)

    def put_mark(self, node: str, mark: Mark) -> None:
        with self._locked() as (_, marks):
            marks[node] = mark

    def forget_mark(self, node: str) -> None:
        if self.mark(node) is None:
            return
        with self._locked() as (_, marks):
            marks.pop(node, None)


@dataclass(frozen=True)
class Mark:
    """A comment mark nodegate wrote (the drain budget's): ``text`` is its own part, ``base``
    the comment that was there before it (a person's, kept beside it)."""

    text: str
    base: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "base": self.base}

    @classmethod
    def from_dict(cls, data: Any) -> Mark:
        if not isinstance(data, dict) or not isinstance(data.get("text"), str):
            raise ValueError("a mark must be a mapping with a text")
        return cls(text=data["text"], base=_str_or_none(data.get("base")))

    def written(self) -> str:
        """The whole comment nodegate writes: the person's, then ours beside it."""
        return f"{self.base} | {self.text}" if self.base else self.text

    def without(self, comment: str | None) -> str | bool | None:
        """``comment`` with our part taken out (None: nothing left); False when our part is
        not in it (someone rewrote it: theirs now, left alone)."""
        if comment is None:
            return False
        if comment == self.written():
            return self.base
        if comment == self.text:
            return None
        for joined in (f" | {self.text}", f"{self.text} | "):
            if joined in comment:
                return comment.replace(joined, "", 1) or None
        return False
