"""Device URLs split defensively: a malformed one is bad input naming its key, never a crash.

``urllib.parse.urlsplit`` raises ValueError on an unbalanced IPv6 bracket (``snmp://[::1``) and
``.port`` raises on a non-numeric or out-of-range port. The URL itself is not echoed: it may
hold a credential.
"""

from __future__ import annotations

from urllib.parse import SplitResult, urlsplit

from nodegate.errors import ConfigError


def split_url(url: str, *, what: str, key: str | None = None,
              file: str | None = None) -> SplitResult:
    """``url`` split, its host and port already checked readable."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
        parts.hostname  # noqa: B018
    except ValueError as exc:
        raise ConfigError(f"{what} URL is malformed ({exc})", key=key, file=file) from None
    return parts
