"""Secrets by reference only: ``<name>_env`` / ``<name>_file`` keys, or ``env:NAME`` /
``file:/path`` values.

A literal password, community, key or token in a site file, a poller config or imported Ansible
host vars is a ConfigError naming file, host and key, and so is a URL carrying credentials
(``user:pw@`` or a credential-looking query parameter such as ``?community=public``): those
files live in git, and whatever is in git ends up in logs. A secret file named by reference must
be private (0600 or stricter) when it exists here; one that does not exist here is the node's
(roles/pdu_monitor.py: the site's secret distribution puts it there), so it is checked at use.
A plain ``http://`` url beside a credential (a BMC's ``password_env``) is refused unless the same
mapping says ``insecure: true``. Every secret resolved here is registered with
``nodegate.redaction`` so nothing printed afterwards can carry it.
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
from nodegate.redaction import find_userinfo, remember_secret, strip_userinfo

#: The credential key catalogue, in one place. A key names a credential when one of its words
#: (split at ``_``, ``-``, ``.``, spaces and camelCase; lower-cased) is in ``SECRET_WORDS``,
#: when its last word is in ``SECRET_LAST_WORDS`` (short words that mean a credential only as
#: the noun: ``bmc_pw``, ``ansible_become_pass``, ``snmp_community``), or when its last two
#: words are a pair in ``SECRET_PAIRS`` (``api_key``, ``ssh_private_key``,
#: ``community_string``). A name ending in ``REFERENCE_SUFFIXES`` (``password_env``,
#: ``token_file``) is where a credential lives, not one.
SECRET_WORDS = frozenset({
    "password", "passwd", "passphrase", "secret", "token", "credential", "credentials",
    "apikey", "authkey", "privkey", "privatekey", "accesskey", "psk", "community",
})
SECRET_LAST_WORDS = frozenset({"pass", "pwd", "pw", "key"})
SECRET_PAIRS = frozenset({
    ("api", "key"), ("auth", "key"), ("priv", "key"), ("private", "key"), ("access", "key"),
    ("secret", "key"), ("encryption", "key"), ("signing", "key"),
    ("community", "string"), ("shared", "key"), ("session", "id"), ("session", "key"),
    ("bearer", "key"), ("client", "key"), ("master", "key"), ("vault", "pass"),
    ("munge", "key"), ("tls", "key"), ("ssl", "key"),
})
REFERENCE_SUFFIXES = ("_env", "_file")
_WORD_SPLIT = re.compile(r"[^a-z0-9]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_REFERENCE_VALUE = re.compile(r"^(env:[A-Za-z_][A-Za-z0-9_]*|file:/\S+)$")

KeyPath = tuple[str | int, ...]
CLEAR_TEXT = ("plain http:// would send the credential in clear: use https:// (a lab device "
              "without TLS: set insecure: true beside the url)")


def key_words(name: str) -> list[str]:
    """``name`` split into lower-case words (``sshPrivateKey`` -> ssh, private, key)."""
    return [w for w in _WORD_SPLIT.split(_CAMEL.sub("_", name).lower()) if w]


def _names_secret(words: list[str]) -> bool:
    if any(word in SECRET_WORDS for word in words):
        return True
    if not words:
        return False
    if words[-1] in SECRET_LAST_WORDS and (words[-1] != "key" or len(words) > 1):
        return words[-1] != "key" or tuple(words[-2:]) in SECRET_PAIRS
    return tuple(words[-2:]) in SECRET_PAIRS


def is_secret_key(name: str) -> bool:
    """A key (or URL parameter) that holds a credential when it holds a literal value."""
    words = key_words(name)
    if len(words) > 1 and f"_{words[-1]}" in REFERENCE_SUFFIXES:
        return False
    return _names_secret(words)


def names_secret_reference(name: str) -> bool:
    """``password_env``, ``token_file``: a key saying where a credential lives."""
    words = key_words(name)
    return len(words) > 1 and f"_{words[-1]}" in REFERENCE_SUFFIXES and _names_secret(words[:-1])


def is_reference(value: Any) -> bool:
    """``env:NAME`` or ``file:/path``: where a secret lives, safe to keep in git and logs."""
    return isinstance(value, str) and bool(_REFERENCE_VALUE.match(value))


def _url_problem(value: str) -> str | None:
    """Why a URL string carries a credential, or None; never quotes the value. The userinfo
    comes from ``redaction.find_userinfo`` (a password may hold ``/ ? # @``)."""
    info = find_userinfo(value)
    # a password is always a secret; an snmp:// user is the v2c community (an HTTP or SNMPv3
    # user name is not)
    if info is not None and info.password is not None:
        return "password in the URL (user:password@)"
    if info is not None and info.scheme == "snmp":
        return "literal SNMP community in the URL (community@)"
    rest = strip_userinfo(value)
    query = rest.split("?", 1)[1].split("#", 1)[0] if "?" in rest else ""
    for name, param in parse_qsl(query, keep_blank_values=True):
        if is_secret_key(name) and param and not is_reference(param):
            return f"URL parameter {name} holds a literal value"
    return None


def _clear_text(data: Mapping[Any, Any]) -> bool:
    """A plain ``http://`` ``url`` beside a credential (a value or a reference to one), with
    no ``insecure: true``: the credential would cross the network in clear."""
    url = data.get("url")
    if not isinstance(url, str) or not url.lower().startswith("http://"):
        return False
    if data.get("insecure") is True:
        return False
    return any((is_secret_key(str(k)) or names_secret_reference(str(k))) and v not in (None, "")
               for k, v in data.items())


def _walk(data: Any, path: KeyPath) -> list[tuple[KeyPath, str]]:
    """(path, reason) for every literal secret under ``data``."""
    if isinstance(data, Mapping):
        clear = [((*path, "url"), CLEAR_TEXT)] if _clear_text(data) else []
        return clear + [hit for key, value in data.items()
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
        elif reason == CLEAR_TEXT:
            raise ConfigError(reason, file=file, host=_host_of(path, host), key=dotted(path))
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
                if name.endswith("_file") and names_secret_reference(name):
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
        remember_secret(env[var])
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
        value = read_text(path, kind="credential").strip()
        remember_secret(value)
        return value
    return None
