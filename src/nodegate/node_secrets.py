"""The node's own credential values, read where output leaves for someone else (the RMA
bundle): what ``nodegate.redaction.redact_collected`` must mask in text another program
wrote, which this process never read and so never remembered.

Sources: every ``*.env`` file in the nodegate configuration folder (the power poller's
EnvironmentFile: ``NODEGATE_BMC_PASSWORD=...``), each assignment whose name is a credential
key (``secret_refs.is_secret_key``); every file there whose name is one (``bmc-password``,
``pdu.community``): its first line; and this process's environment's credential variables.
Each file through the one reader (a FIFO is skipped, a large file too): a file that cannot
be read is named in ``problems``, never a reason to write the bundle without filtering.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from nodegate.errors import ConfigError
from nodegate.fileio import read_text
from nodegate.paths import config_dir
from nodegate.secret_refs import is_secret_key


class NodeSecrets(NamedTuple):
    values: frozenset[str]
    problems: tuple[str, ...]


def _assignments(text: str) -> list[tuple[str, str]]:
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.removeprefix("export ").partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        out.append((key.strip(), value))
    return out


def _secret_name(name: str) -> bool:
    stem = name.split(".", 1)[0] if not name.startswith(".") else name
    words = stem.replace("-", "_").replace(".", "_")
    return is_secret_key(words) or name.endswith((".community", ".password", ".secret",
                                                  ".token"))


def node_secrets(folder: Path | None = None) -> NodeSecrets:
    """Every credential value the node keeps for nodegate (see the module docstring)."""
    folder = folder or config_dir()
    values: set[str] = set()
    problems: list[str] = []
    for key, value in os.environ.items():
        if is_secret_key(key) and value:
            values.add(value)
    try:
        entries = sorted(folder.iterdir()) if folder.is_dir() else []
    except OSError as exc:
        entries = []
        problems.append(f"{folder}: {exc.strerror or exc}")
    for path in entries:
        is_env = path.name.endswith(".env")
        if not is_env and not _secret_name(path.name):
            continue
        try:
            text = read_text(path, kind="credential")
        except ConfigError as exc:
            if "directory" not in exc.message:
                problems.append(f"{path}: {exc.message}")
            continue
        if is_env:
            values.update(v for k, v in _assignments(text) if v and is_secret_key(k))
        else:
            first = text.strip().splitlines()[0].strip() if text.strip() else ""
            if first:
                values.add(first)
    return NodeSecrets(frozenset(values), tuple(problems))
