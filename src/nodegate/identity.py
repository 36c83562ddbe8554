"""Who a node is: its machine id, its host name and its Slurm name, as one identity.

A host is often ``gpu-b01.dc1.example.net`` to ``uname -n`` and ``gpu-b01`` to Slurm. A report
named after one and judged by the other was "no report for node gpu-b01" and a sick node
stayed in service, so a report carries all three (``node``: the Slurm name where one is known,
labels ``host`` and ``slurm_node``; ``machine_id`` from ``report.outputs.number``), and the
gate on a node matches its own reports by machine id whatever the names.

Names come from outside (the kernel's host name, ``--node-name``, the environment) and may
hold bytes that are not text or characters that are not printable; ``clean_name`` replaces
them (the report says so) rather than let the JSON writer end the run with no report.
Standard library only: the cron health check imports this.
"""

from __future__ import annotations

import os
import unicodedata
from typing import NamedTuple

#: What stands for each byte or character that is not printable text.
REPLACEMENT = "?"
#: The longest name kept (a host name is at most 64 bytes, a Slurm name shorter).
MAX_NAME = 255


def clean_name(raw: str | bytes) -> tuple[str, bool]:
    """``raw`` as printable text and whether anything was replaced: bytes that are not
    UTF-8 (surrogate escapes of argv or uname), control and format characters (ANSI escape,
    newline, bidi overrides) and separators other than the plain space become ``?``;
    surrounding space is dropped. Empty stays empty."""
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "surrogateescape")
    out = []
    changed = False
    for char in raw[:MAX_NAME]:
        category = unicodedata.category(char)
        if 0xDC80 <= ord(char) <= 0xDCFF or (category[0] in ("C", "Z") and char != " "):
            out.append(REPLACEMENT)
            changed = True
        else:
            out.append(char)
    return "".join(out).strip(), changed or len(raw) > MAX_NAME


class Identity(NamedTuple):
    """The names a report carries; ``notes`` say what was replaced or where names differ."""

    node: str
    host: str
    slurm: str | None
    notes: tuple[str, ...]

    def labels(self) -> dict[str, str]:
        out = {"host": self.host}
        if self.slurm:
            out["slurm_node"] = self.slurm
        return out


def env_name(name: str) -> str | None:
    """An environment variable naming a node; empty is unset."""
    value = os.environ.get(name)
    return value if value else None


def node_identity(node_name: str | None = None) -> Identity:
    """This node's identity for a report: the Slurm name from ``node_name`` (``--node-name``,
    the agent's knob), ``$NODEGATE_NODE_NAME`` or ``$SLURMD_NODENAME``; the host name from
    uname (``socket.gethostname()`` without importing socket: ~3 ms of every cron run)."""
    notes = []
    host, changed = clean_name(os.uname().nodename)
    if changed:
        notes.append(f"host name has bytes that are not printable text; written as {host!r}")
    host = host or "unknown-host"
    raw = node_name or env_name("NODEGATE_NODE_NAME") or env_name("SLURMD_NODENAME")
    slurm = None
    if raw is not None:
        slurm, changed = clean_name(raw)
        if changed:
            notes.append(f"node name has bytes that are not printable text; written as "
                         f"{slurm!r}")
        slurm = slurm or None
    return Identity(node=slurm or host, host=host, slurm=slurm, notes=tuple(notes))


def escape(text: object) -> str:
    """A name from outside, safe to print in a terminal or a text table: every character
    that is not printable (ESC, newline, carriage return, bidi overrides) as ``\\xNN`` /
    ``\\uNNNN``, so a name can neither move the cursor nor forge a row."""
    value = str(text)
    if value.isprintable():
        return value
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
                   for c in value)
