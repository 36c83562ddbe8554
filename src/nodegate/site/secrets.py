"""Secrets by reference only: ``<name>_env`` (an environment variable) or ``<name>_file``.

A literal password, community or token in a site file is a ConfigError, and so is a URL
carrying credentials: site files live in git, and whatever is in git ends up in logs.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from nodegate.errors import ConfigError

SECRET_KEY = re.compile(
    r"(^|_)(password|passwd|community|secret|token|api_key|auth_key|priv_key|passphrase)$"
)
REFERENCE_SUFFIXES = ("_env", "_file")


def find_literal_secrets(data: Any, prefix: str = "") -> list[str]:
    """Dotted keys holding a literal secret (or a URL with credentials) anywhere in ``data``."""
    found: list[str] = []
    if isinstance(data, Mapping):
        for key, value in data.items():
            dotted = f"{prefix}.{key}" if prefix else str(key)
            name = str(key).lower()
            if SECRET_KEY.search(name) and not name.endswith(REFERENCE_SUFFIXES):
                if value not in (None, ""):
                    found.append(dotted)
                continue
            if isinstance(value, str) and _url_has_credentials(value):
                found.append(dotted)
                continue
            found.extend(find_literal_secrets(value, dotted))
    elif isinstance(data, list):
        for index, item in enumerate(data):
            found.extend(find_literal_secrets(item, f"{prefix}[{index}]"))
    return found


def _url_has_credentials(value: str) -> bool:
    if "://" not in value:
        return False
    try:
        parts = urlsplit(value)
    except ValueError:
        return False
    return parts.username is not None or parts.password is not None


def reject_literal_secrets(data: Any, *, file: str, host: str | None = None) -> None:
    found = find_literal_secrets(data)
    if found:
        key = found[0]
        leaf = key.rsplit(".", 1)[-1]
        raise ConfigError(
            f"literal secret in a site file; reference it instead ({leaf}_env: VAR or "
            f"{leaf}_file: /path, mode 0600), and keep credentials out of URLs",
            file=file, host=host, key=key,
        )


def resolve_secret(
    section: Mapping[str, Any], name: str, *, where: str, host: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> str | None:
    """The secret ``name`` of ``section`` from its ``_env`` or ``_file`` reference, or None."""
    env = os.environ if environ is None else environ
    var = section.get(f"{name}_env")
    if var:
        if var not in env:
            raise ConfigError(
                f"environment variable {var} is not set", file=where, host=host,
                key=f"{name}_env",
            )
        return env[var]
    path_value = section.get(f"{name}_file")
    if path_value:
        path = Path(str(path_value))
        try:
            mode = path.stat().st_mode
        except OSError:
            raise ConfigError(
                f"secret file {path} cannot be read", file=where, host=host, key=f"{name}_file"
            ) from None
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ConfigError(
                f"secret file {path} is readable by others (mode {stat.S_IMODE(mode):04o}); "
                "chmod 600 it", file=where, host=host, key=f"{name}_file",
            )
        return path.read_text(encoding="utf-8").strip()
    return None
