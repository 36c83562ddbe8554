"""Credentials by reference: ``env:NAME`` or ``file:/path`` (mode 0600), never literals.

Site data and poller configs name where a secret lives; this module fetches it at the last
moment and registers it with ``nodegate.redaction``, whose ``redact`` (re-exported here)
scrubs every known secret from text before it reaches an operator.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from nodegate.errors import ConfigError
from nodegate.fileio import read_text
from nodegate.redaction import redact, remember_secret

__all__ = ["SecretRef", "check_private_mode", "parse_ref", "read_secret_file", "redact",
           "remember_secret"]


@dataclass(frozen=True)
class SecretRef:
    """Where a secret lives: ``env`` (variable name) or ``file`` (path to a 0600 file)."""

    kind: str
    where: str

    def __str__(self) -> str:
        return f"{self.kind}:{self.where}"

    def resolve(self, *, key: str | None = None) -> str:
        """Fetch the secret; a missing variable or a group/world-readable file is a ConfigError."""
        if self.kind == "env":
            value = os.environ.get(self.where)
            if value is None or value == "":
                raise ConfigError(f"environment variable {self.where} is not set", key=key)
        else:
            value = read_secret_file(Path(self.where), key=key)
        remember_secret(value)
        return value


def parse_ref(text: str, *, key: str | None = None, file: str | None = None) -> SecretRef:
    """Parse ``env:NAME`` / ``file:PATH``; anything else is treated as a literal and refused."""
    kind, sep, where = text.partition(":")
    if sep and kind in ("env", "file") and where:
        if kind == "env" and not where.replace("_", "").isalnum():
            raise ConfigError(f"bad environment variable name {where!r}", key=key, file=file)
        return SecretRef(kind, where)
    raise ConfigError(
        "a credential must be a reference (env:VARIABLE or file:/path/0600-file), "
        "not a literal value",
        key=key,
        file=file,
    )


def read_secret_file(path: Path, *, key: str | None = None) -> str:
    """Read a one-line secret file that only its owner may read (0600 or 0400)."""
    try:
        info = path.stat()
    except OSError as exc:
        raise ConfigError(f"cannot read secret file: {exc.strerror}", file=str(path),
                          key=key) from exc
    check_private_mode(path, info.st_mode, key=key)
    value = read_text(path, kind="credential").strip()
    if not value:
        raise ConfigError("secret file is empty", file=str(path), key=key)
    return value


def check_private_mode(path: Path, mode: int, *, key: str | None = None) -> None:
    """Refuse a file group or others can read or write: a secret there is already leaked."""
    if stat.S_IMODE(mode) & 0o077:
        raise ConfigError(
            f"mode {stat.S_IMODE(mode):04o} is too open; chmod 600 it", file=str(path), key=key
        )
