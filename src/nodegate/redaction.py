"""Secrets out of every output: URL userinfo found by one parser, resolved credentials
registered once and scrubbed from whatever leaves the process.

Why one parser: ``urllib.parse.urlsplit`` ends the authority at the first ``/ ? #``, so in
``http://u:p/x@h`` it sees host ``u`` and a path ``/x@h``: a password holding ``/ ? #`` (or
``@``) slips past any check built on it, and an error message quoting such a URL prints the
password. ``find_userinfo`` reads the userinfo as everything between ``://`` and the *last*
``@`` of the URL. An ``@`` that really belongs to a path or query is then taken as userinfo:
that errs towards refusing (a site file) or over-redacting (a message), never towards a leak;
a path that needs an ``@`` writes it ``%40``.

Why one filter: a credential read from ``password_env`` / ``password_file`` can reach output
through an exception message, a library's log line, a report field or a traceback file.
``remember_secret`` is called where a secret is resolved (``secret_refs.resolve_secret``,
``power.credentials``); ``redact`` removes each remembered value (raw, percent-encoded, JSON-
and XML-escaped) and every URL userinfo. The places output leaves call it: ``cli.main``
wraps stdout and stderr (``redacted_std_streams``), ``cli.run`` its error lines and traceback
file, the report writer (``report._atomic.atomic_write_text``: JSON, JUnit, HTML, Prometheus
textfile; there the mask keeps the byte length, so a report's digest and its summary's byte
count stay true) and the log handlers (``install_log_filter``). Values shorter than
``MIN_SECRET_LEN``, or that read as a number, are not registered: redacting ``ab`` or
``123456`` would shred every line and rewrite measurements.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple, TextIO

if TYPE_CHECKING:  # logging, html, json and urllib load when first needed: the cron path
    import logging  # redacts a few lines with no secret and no URL in them

MASK = "***"
MIN_SECRET_LEN = 3

#: ``scheme://``: RFC 3986 scheme characters.
_SCHEME = r"[A-Za-z][A-Za-z0-9+.\-]*://"
#: Where a URL inside free text ends: whitespace, quotes and brackets a message puts around it.
_NUMBER = r"[+-]?[0-9._eE+-]+"
_TEXT_URL = r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s\"<>`]+"
# (patterns as text, compiled by ``re`` on first use: a cron run's output holds no URL and no
# secret, and three compiles were ~0.4 ms of its start-up)


class _Registry:
    """The credential values read so far and the pattern that finds any of them."""

    def __init__(self) -> None:
        self.known: set[str] = set()
        self.pattern: re.Pattern[str] | None = None


_REGISTRY = _Registry()


class Userinfo(NamedTuple):
    """The userinfo of one URL: ``raw`` as written, ``user`` and ``password`` decoded
    (``password`` None when there is no ``:``); ``start``/``end`` index ``raw`` in the URL."""

    scheme: str
    raw: str
    user: str
    password: str | None
    start: int
    end: int


def find_userinfo(url: str) -> Userinfo | None:
    """The userinfo of ``url`` (``scheme://USERINFO@host...``), or None when it has none.

    The userinfo runs to the last ``@``: a password may hold ``/ ? # : @`` unencoded or
    percent-encoded, and both are found (see the module docstring for the rule's trade-off).
    """
    match = re.match(_SCHEME, url)
    if not match:
        return None
    start = match.end()
    at = url.rfind("@", start)
    if at < 0:
        return None
    raw = url[start:at]
    user, colon, password = raw.partition(":")
    from urllib.parse import unquote

    return Userinfo(scheme=url[:start - 3].lower(), raw=raw, user=unquote(user),
                    password=unquote(password) if colon else None, start=start, end=at)


def strip_userinfo(url: str) -> str:
    """``url`` with its userinfo (if any) removed: safe to print."""
    info = find_userinfo(url)
    return url if info is None else url[:info.start] + url[info.end + 1:]


def _mask(text: str, keep_length: bool) -> str:
    return "*" * len(text.encode("utf-8")) if keep_length else MASK


#: A user name alone is not a secret (``https://root@bmc``, the ``USER@HOST`` of nodegate's
#: own help): kept when it has an account name's shape. Anything longer or stranger may be a
#: token used as the user (``https://TOKEN@host``) and is masked.
ACCOUNT_NAME = re.compile(r"[A-Za-z][A-Za-z0-9._-]{0,31}")
#: Schemes whose bare userinfo is itself the credential: SNMP v1/v2c's community.
_USERINFO_IS_SECRET = frozenset({"snmp"})


def mask_userinfo(url: str, *, keep_length: bool = False) -> str:
    """``url`` with its credential masked: the password (``scheme://user:***@host``), or the
    whole userinfo where it may be one (``snmp://***@host``, a token-shaped user)."""
    info = find_userinfo(url)
    if info is None:
        return url
    user = info.raw.partition(":")[0]
    if info.scheme in _USERINFO_IS_SECRET or not ACCOUNT_NAME.fullmatch(user):
        return url[:info.start] + _mask(info.raw, keep_length) + url[info.end:]
    if info.password is None:
        return url
    hidden = info.raw[len(user) + 1:]
    return url[:info.start] + user + ":" + _mask(hidden, keep_length) + url[info.end:]


def remember_secret(value: str) -> None:
    """Register a credential value this process has read: ``redact`` never lets it through.

    Not registered: values shorter than ``MIN_SECRET_LEN``, and values that read as a number
    (``123456``): masking them would rewrite measurements in every report.
    """
    if len(value) < MIN_SECRET_LEN or value in _REGISTRY.known or re.fullmatch(_NUMBER, value):
        return
    _REGISTRY.known.add(value)
    _REGISTRY.pattern = None


def forget_secrets() -> None:
    """Clear the registry (tests)."""
    _REGISTRY.known.clear()
    _REGISTRY.pattern = None


def _forms(secret: str) -> set[str]:
    """How a value may be spelled in output: as is, in a URL, in JSON, in XML/HTML."""
    import html
    import json
    from urllib.parse import quote

    forms = {secret, quote(secret, safe=""), quote(secret), json.dumps(secret)[1:-1],
             json.dumps(secret, ensure_ascii=False)[1:-1], html.escape(secret),
             html.escape(secret, quote=False)}
    return {form for form in forms if len(form) >= MIN_SECRET_LEN}


def _pattern() -> re.Pattern[str] | None:
    if _REGISTRY.pattern is None and _REGISTRY.known:
        forms = {form for secret in _REGISTRY.known for form in _forms(secret)}
        _REGISTRY.pattern = re.compile(
            "|".join(re.escape(f) for f in sorted(forms, key=len, reverse=True)))
    return _REGISTRY.pattern


def redact(text: str, *, keep_length: bool = False) -> str:
    """``text`` with every URL userinfo and every remembered credential replaced by ``***``.

    ``keep_length``: one ``*`` per UTF-8 byte instead, so a file's byte counts stay true
    (a report's ``digest.tail_bytes``, its summary's ``report_bytes``).
    """
    if "://" in text:
        text = re.sub(_TEXT_URL, lambda m: mask_userinfo(m.group(0), keep_length=keep_length),
                      text)
    pattern = _pattern()
    if pattern is None:
        return text
    return pattern.sub(lambda m: _mask(m.group(0), keep_length), text)


class RedactingStream:
    """A text stream that redacts what is written before passing it on (stdout, stderr).

    A secret split across two ``write`` calls is not seen; ``print`` writes each message in
    one call. Everything else (``fileno``, ``buffer``, ``isatty``...) is the wrapped stream's.
    """

    def __init__(self, stream: TextIO) -> None:
        self.wrapped = stream

    def write(self, text: str) -> int:
        self.wrapped.write(redact(text))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)


@contextlib.contextmanager
def redacted_std_streams() -> Iterator[None]:
    """``sys.stdout`` and ``sys.stderr`` redacted for the block, restored after it."""
    saved = sys.stdout, sys.stderr
    # a stream closed before the start is None: left so, for the exit-code guard to see
    # (nodegate.commands._streams), since nothing written there leaves the process
    if sys.stdout is not None:
        sys.stdout = RedactingStream(sys.stdout)
    if sys.stderr is not None:
        sys.stderr = RedactingStream(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


class RedactingFilter:
    """A logging filter that renders the record and redacts it (a library's log line too).
    Any object with ``filter(record)`` is a filter to logging's handlers: no subclass, so
    importing this module does not import logging."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = redact(record.getMessage())
        record.args = None
        if record.exc_info and record.exc_info[1] is not None:
            import traceback

            record.exc_text = redact("".join(traceback.format_exception(*record.exc_info)))
            record.exc_info = None
        return True


def install_log_filter(logger: logging.Logger | None = None) -> None:
    """Put the redacting filter on every handler of ``logger`` (the root logger by default)."""
    import logging

    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())


# --- what the process did not read itself --------------------------------------

#: ``password=VALUE``-shaped text in collected output (a kernel command line, a tool's dump
#: of its configuration): the key names a credential, the value is masked whatever it looks
#: like. Keys: any word holding one of these (``NODEGATE_BMC_PASSWORD``, ``rootpw``,
#: ``snmp_community``, ``api-key``).
_ASSIGNED = (r"(?i)(?<![A-Za-z0-9])([A-Za-z0-9_.-]*(?:passw(?:or)?d|passwd|pwd|rootpw|secret"
             r"|token|communit(?:y|ies)|api[_-]?key|credential)[A-Za-z0-9_.-]*)"
             r"(\s*[=:]\s*)(\"[^\"\n]*\"|'[^'\n]*'|[^\s,;&\"']+)")
#: ``snmpget -c COMMUNITY`` (net-snmp's flag) in a collected command line.
_SNMP_FLAG = r"(?<![A-Za-z0-9-])(-c\s+)([^\s-][^\s]*)(?=\s+[^\s]*(?:snmp|[0-9]+\.[0-9]+\.))"


def redact_collected(text: str, secrets: Iterable[str] = ()) -> tuple[str, dict[str, int]]:
    """Collected output another program wrote (``nvidia-bug-report.sh``, the kernel log)
    with every secret masked, and how many of each kind were (never the values).

    Beyond ``redact``: ``secrets`` are the node's credential values (its nodegate
    environment files and credential files, ``nodegate.node_secrets``), masked *including*
    values that read as a number (``2718281828``, ``2024-06-30``, ``1e7_5e3``: here no
    measurement can be rewritten, the text is not ours); ``password=``-shaped values, SNMP
    communities (``community=``, ``-c``) and URL userinfo whatever their value."""
    counts: dict[str, int] = {}
    text = _mask_values(text, secrets, counts)
    text = re.sub(_ASSIGNED, lambda m: _assigned(m, counts), text)
    text = re.sub(_SNMP_FLAG, lambda m: _counted(counts, "snmp community",
                                                 f"{m.group(1)}{MASK}"), text)
    if "://" in text:
        text = re.sub(_TEXT_URL, lambda m: _userinfo(m.group(0), counts), text)
    return redact(text), counts


def _counted(counts: dict[str, int], kind: str, replacement: str) -> str:
    counts[kind] = counts.get(kind, 0) + 1
    return replacement


def _mask_values(text: str, secrets: Iterable[str], counts: dict[str, int]) -> str:
    values = {s for s in secrets if len(s) >= MIN_SECRET_LEN}
    if not values:
        return text
    forms = sorted({f for s in values for f in _forms(s)}, key=len, reverse=True)
    pattern = re.compile("|".join(re.escape(f) for f in forms))
    return pattern.sub(lambda m: _counted(counts, "credential value", MASK), text)


def _assigned(match: re.Match[str], counts: dict[str, int]) -> str:
    key, sep, value = match.groups()
    if value.strip("\"'") in ("", MASK):
        return match.group(0)
    kind = "snmp community" if "communit" in key.lower() else "password-shaped value"
    return _counted(counts, kind, f"{key}{sep}{MASK}")


def _userinfo(url: str, counts: dict[str, int]) -> str:
    masked = mask_userinfo(url)
    return url if masked == url else _counted(counts, "url userinfo", masked)
