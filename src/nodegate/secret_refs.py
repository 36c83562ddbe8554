"""Secrets by reference only: ``<name>_env`` / ``<name>_file`` keys, or ``env:NAME`` /
``file:/path`` values.

A literal password, community, key or token in a site file, a poller config or imported Ansible
host vars is a ConfigError naming file, host and key, and so is a URL carrying credentials
(``user:pw@`` or a credential-looking query parameter such as ``?community=public``): those
files live in git, and whatever is in git ends up in logs. A secret file named by reference must
be private (0600 or stricter) when it exists here; one that does not exist here is the node's
(roles/pdu_monitor.py: the site's secret distribution puts it there), so it is checked at use.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from nodegate.errors import ConfigError
from nodegate.fileio import read_text

#: Credential-looking names: ``*password*``, ``*secret*``, ``*token*``, ``*passphrase*``
#: anywhere; ``*_pass``, ``*_pwd``, ``community``, ``api_key`` and the SNMPv3 keys as the name
#: or its last ``_`` part.
SECRET_KEY = re.compile(
    r"password|passwd|secret|token|passphrase"
    r"|(^|_)(pass|pwd|community|api_key|apikey|auth_key|priv_key|authkey|privkey)$"
)
REFERENCE_SUFFIXES = ("_env", "_file")
_REFERENCE_VALUE = re.compile(r"^(env:[A-Za-z_][A-Za-z0-9_]*|file:/\S+)$")

KeyPath = tuple[str | int, ...]


def is_secret_key(name: str) -> bool:
    """A key (or URL parameter) that holds a credential when it holds a literal value."""
    lowered = name.lower()
    return bool(SECRET_KEY.search(lowered)) and not lowered.endswith(REFERENCE_SUFFIXES)


def is_reference(value: Any) -> bool:
    """``env:NAME`` or ``file:/path``: where a secret lives, safe to keep in git and logs."""
    return isinstance(value, str) and bool(_REFERENCE_VALUE.match(value))


def _url_problem(value: str) -> str | None:
    """Why a URL string carries a credential, or None; never quotes the value."""
    if "://" not in value:
        return None
    scheme, _, rest = value.partition("://")
    netloc = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    userinfo, at, _host = netloc.rpartition("@")
    # a password is always a secret; an snmp:// user is the v2c community (an HTTP or SNMPv3
    # user name is not); parsed by hand so a broken IPv6 bracket cannot hide one
    if at and ":" in userinfo:
        return "password in the URL (user:password@)"
    if at and scheme.lower() == "snmp":
        return "literal SNMP community in the URL (community@)"
    query = value.split("?", 1)[1].split("#", 1)[0] if "?" in value else ""
    for name, param in parse_qsl(query, keep_blank_values=True):
        if is_secret_key(name) and param and not is_reference(param):
            return f"URL parameter {name} holds a literal value"
    return None


def _walk(data: Any, path: KeyPath) -> list[tuple[KeyPath, str]]:
    """(path, reason) for every literal secret under ``data``."""
    if isinstance(data, Mapping):
        return [hit for key, value in data.items()
                for hit in _walk_entry(str(key), value, (*path, str(key)))]
    if isinstance(data, list):
        return [hit for index, item in enumerate(data) for hit in _walk(item, (*path, index))]
    if isinstance(data, str) and path and isinstance(path[-1], int):
        problem = _url_problem(data)  # a URL inside a list
        if problem:
            return [(path, problem)]
    return []


def _walk_entry(key: str, value: Any, here: KeyPath) -> list[tuple[KeyPath, str]]:
    """One mapping entry: a secret-named key must hold a reference (or nothing); any other
    string is checked as a URL with credentials; containers are walked."""
    if is_secret_key(key):
        if value not in (None, "") and not is_reference(value):
            return [(here, "literal secret")]
        return []
    if isinstance(value, str):
        problem = _url_problem(value)
        return [(here, problem)] if problem else []
    return _walk(value, here)


def dotted(path: KeyPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _host_of(path: KeyPath, host: str | None) -> str | None:
    if host is None and len(path) >= 2 and path[0] == "hosts":
        return str(path[1])
    return host


def find_literal_secrets(data: Any, prefix: str = "") -> list[str]:
    """Dotted keys holding a literal secret (or a URL with credentials) anywhere in ``data``."""
    return [(f"{prefix}." if prefix else "") + dotted(path) for path, _ in _walk(data, ())]


def reject_literal_secrets(data: Any, *, file: str, host: str | None = None) -> None:
    """ConfigError on the first literal secret; then every referenced secret file's mode."""
    found = _walk(data, ())
    if found:
        path, reason = found[0]
        leaf = next((str(p) for p in reversed(path) if isinstance(p, str)), "secret")
        if reason == "literal secret":
            reason = "a credential must be a reference, not a literal value"
            hint = f"{leaf}_env: VAR or {leaf}_file: /path (mode 0600), or env:VAR / file:/path"
        else:
            hint = "keep credentials out of URLs: ?community=env:VAR or file:/path"
        raise ConfigError(f"{reason}; reference it instead ({hint})", file=file,
                          host=_host_of(path, host), key=dotted(path))
    check_secret_files(data, file=file, host=host)


def _secret_files(data: Any, path: KeyPath) -> list[tuple[KeyPath, str]]:
    """(path, file path) of every ``*_file`` key and ``file:`` value naming a secret."""
    out: list[tuple[KeyPath, str]] = []
    if isinstance(data, Mapping):
        for key, value in data.items():
            here = (*path, str(key))
            name = str(key).lower()
            if isinstance(value, str):
                if name.endswith("_file") and SECRET_KEY.search(name.removesuffix("_file")):
                    out.append((here, value))
                elif is_reference(value) and value.startswith("file:"):
                    out.append((here, value.removeprefix("file:")))
            else:
                out.extend(_secret_files(value, here))
    elif isinstance(data, list):
        for index, item in enumerate(data):
            out.extend(_secret_files(item, (*path, index)))
    return out


def check_secret_files(data: Any, *, file: str, host: str | None = None) -> None:
    """A secret file that exists here must be a private regular file (0600 or stricter)."""
    for path, value in _secret_files(data, ()):
        target = Path(os.path.expanduser(value))
        try:
            info = target.stat()
        except OSError:
            continue  # not on this machine: the node's file, checked where it is read
        where = {"file": file, "host": _host_of(path, host), "key": dotted(path)}
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"secret file {target} is not a regular file", **where)
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o077:
            raise ConfigError(f"secret file {target} mode {mode:04o} is too open (group/others "
                              "may read it); chmod 600 it", **where)


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
        return read_text(path, kind="credential").strip()
    return None
