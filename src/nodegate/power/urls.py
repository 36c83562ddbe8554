"""Device URLs split defensively: a malformed one is bad input naming its key, never a crash.

The userinfo is found by ``nodegate.redaction.find_userinfo`` (to the last ``@``), not by
``urlsplit``, which ends the authority at the first ``/ ? #`` and so reads
``http://u:p/x@h`` as host ``u``: a password holding those characters would otherwise hide
in the path. What is left (``scheme://host:port/path?query``) goes to ``urlsplit``, which
raises ValueError on an unbalanced IPv6 bracket (``snmp://[::1``); ``.port`` raises on a
non-numeric or out-of-range port. The URL itself is never echoed: it may hold a credential.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

from nodegate.errors import ConfigError
from nodegate.redaction import find_userinfo, strip_userinfo


@dataclass(frozen=True)
class DeviceUrl:
    """A split device URL: ``username``/``password`` decoded (None when absent), the rest as
    ``urlsplit`` gives it for the URL without its userinfo."""

    scheme: str
    username: str | None
    password: str | None
    hostname: str | None
    port: int | None
    path: str
    query: str
    rest: SplitResult


def split_url(url: str, *, what: str, key: str | None = None,
              file: str | None = None) -> DeviceUrl:
    """``url`` split, its userinfo, host and port already checked readable."""
    info = find_userinfo(url)
    try:
        parts = urlsplit(strip_userinfo(url))
        port = parts.port
        hostname = parts.hostname
    except ValueError as exc:
        raise ConfigError(f"{what} URL is malformed ({exc})", key=key, file=file) from None
    return DeviceUrl(
        scheme=parts.scheme, username=info.user if info is not None else None,
        password=info.password if info is not None else None, hostname=hostname, port=port,
        path=parts.path, query=parts.query, rest=parts)
