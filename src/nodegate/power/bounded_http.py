"""The BMC's HTTP transport: one total deadline per request, a body cap, no redirects.

The ``redfish`` library sends through a ``requests.Session``: its timeout is per ``recv``
(a BMC that drips a byte a second never times out), it reads any body whole into memory (a
400 MB answer takes gigabytes) and it follows redirects, sending its ``X-Auth-Token`` header
to whatever host the ``Location`` names (requests strips only ``Authorization`` across hosts).
``BoundedSession`` replaces that session: every socket read waits at most for what is left of
the request's deadline, a body over ``MAX_BODY_BYTES`` (declared or read) is refused, and a
3xx answer is returned as it is, never followed, so no credential goes anywhere but the BMC
the site named. Proxies from the environment are not used: a BMC is on the management
network.
"""

from __future__ import annotations

import http.client
import io
import socket
import ssl
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import requests
from requests.structures import CaseInsensitiveDict

#: A Redfish resource is a few kB; a whole chassis with sensors well under 1 MB.
MAX_BODY_BYTES = 8 * 1024 * 1024
_CHUNK = 64 * 1024


class HttpLimitError(Exception):
    """The deadline passed, the body was too large or the answer was malformed; the message
    names the host, never a credential."""


class _DeadlineReader(io.RawIOBase):
    """A socket read that never waits past ``deadline`` (time.monotonic) in total."""

    def __init__(self, sock: socket.socket, deadline: float, host: str) -> None:
        self._sock, self._deadline, self._host = sock, deadline, host

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise HttpLimitError(f"{self._host}: no complete answer before the deadline")
        self._sock.settimeout(left)
        try:
            return self._sock.recv_into(buffer)
        except TimeoutError:
            raise HttpLimitError(f"{self._host}: no complete answer before the deadline") from None


class _SocketView:
    """What ``http.client.HTTPResponse`` needs of a socket: ``makefile`` on the deadline."""

    def __init__(self, reader: _DeadlineReader) -> None:
        self._reader = reader

    def makefile(self, _mode: str) -> io.BufferedReader:
        return io.BufferedReader(self._reader)


def _request_bytes(method: str, target: str, host: str, headers: Mapping[str, str],
                   body: bytes | None) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}", "Connection: close",
             "Accept-Encoding: identity"]
    for name, value in headers.items():
        if any(c in f"{name}{value}" for c in "\r\n\0"):
            raise HttpLimitError(f"{host}: header {name} holds a line break")
        if name.lower() not in ("host", "connection", "accept-encoding", "content-length"):
            lines.append(f"{name}: {value}")
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


def bounded_request(method: str, url: str, *, headers: Mapping[str, str], body: bytes | None,
                    timeout_s: float, verify: str | bool,
                    max_body: int = MAX_BODY_BYTES) -> tuple[int, str, dict[str, str], bytes]:
    """(status, reason, headers, body) of one request finished within ``timeout_s`` in total.

    ``verify``: a CA file, or False for no verification (the site's explicit ``insecure``).
    """
    deadline = time.monotonic() + timeout_s
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    sock = socket.create_connection((host, port), timeout=max(deadline - time.monotonic(), 0.01))
    try:
        if parts.scheme == "https":
            context = ssl.create_default_context(cafile=verify if isinstance(verify, str) else None)
            if verify is False:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            sock.settimeout(max(deadline - time.monotonic(), 0.01))
            sock = context.wrap_socket(sock, server_hostname=host)
        sock.settimeout(max(deadline - time.monotonic(), 0.01))
        sock.sendall(_request_bytes(method, target, parts.netloc, headers, body))
        view = _SocketView(_DeadlineReader(sock, deadline, host))
        response = http.client.HTTPResponse(view, method=method)  # type: ignore[arg-type]
        try:
            response.begin()
            declared = response.getheader("Content-Length")
            if declared and declared.strip().isdigit() and int(declared) > max_body:
                raise HttpLimitError(f"{host}: answer of {int(declared)} bytes is over the "
                                     f"{max_body}-byte cap")
            data = bytearray()
            while chunk := response.read(_CHUNK):
                data += chunk
                if len(data) > max_body:
                    raise HttpLimitError(f"{host}: answer is over the {max_body}-byte cap")
        except (http.client.HTTPException, ValueError) as exc:
            raise HttpLimitError(f"{host}: malformed HTTP answer ({type(exc).__name__})") from None
        return response.status, response.reason, dict(response.getheaders()), bytes(data)
    finally:
        sock.close()


class BoundedSession:
    """Stands in for the ``requests.Session`` of ``redfish``'s client (its ``request`` and
    ``close``), every request under ``bounded_request``, none past ``device_deadline``."""

    def __init__(self, *, device_deadline: float, max_body: int = MAX_BODY_BYTES) -> None:
        self.device_deadline = device_deadline
        self.max_body = max_body

    def request(self, method: str, url: str, *, data: Any = None,
                headers: Mapping[str, str] | None = None, timeout: float | None = None,
                allow_redirects: bool = True, verify: str | bool = True,
                proxies: Any = None, params: str | None = None) -> requests.Response:
        """One request; ``allow_redirects`` and ``proxies`` are ignored (never followed,
        never used)."""
        del allow_redirects, proxies
        left = self.device_deadline - time.monotonic()
        if left <= 0:
            raise HttpLimitError(f"{urlsplit(url).hostname}: the device's time is used up")
        budget = min(float(timeout or left), left)
        if params:
            url = f"{url}{'&' if '?' in url else '?'}{params}"
        body = data.encode("utf-8") if isinstance(data, str) else data
        status, reason, answer_headers, content = bounded_request(
            method, url, headers=dict(headers or {}), body=body, timeout_s=budget,
            verify=verify if isinstance(verify, str) else bool(verify), max_body=self.max_body)
        response = requests.Response()
        response.status_code, response.reason, response.url = status, reason, url
        response.headers = CaseInsensitiveDict(answer_headers)
        response._content = content  # a Response built from our own read
        response.encoding = "utf-8"
        return response

    def close(self) -> None:
        """Nothing to close: every request has its own connection."""
