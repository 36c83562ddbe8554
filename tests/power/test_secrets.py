"""Secrets by construction: the one URL userinfo parser, the credential key catalogue, the
redaction filter at every output, BMC over https only, and the bounded BMC transport (drip,
huge body, redirect to another host with the session token) against small servers on
127.0.0.1 started here."""

from __future__ import annotations

import argparse
import io
import json
import socket
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from nodegate import cli
from nodegate.errors import ConfigError
from nodegate.power.bmc import parse_bmc_url, read_bmc
from nodegate.power.urls import split_url
from nodegate.redaction import (
    find_userinfo,
    forget_secrets,
    install_log_filter,
    redact,
    redacted_std_streams,
    remember_secret,
    strip_userinfo,
)
from nodegate.report import build, write_junit
from nodegate.report.model import load, write
from nodegate.report.prometheus import write_prometheus
from nodegate.results import CheckResult, Severity, Verdict
from nodegate.secret_refs import (
    find_literal_secrets,
    is_secret_key,
    reject_literal_secrets,
    resolve_secret,
)
from tests.power.helpers import BMC_PASSWORD

PASSWORD = "s3cr/et?#@:pw%41"  # every reserved character a password may hold


@pytest.fixture(autouse=True)
def _clean_registry() -> Iterator[None]:
    forget_secrets()
    yield
    forget_secrets()


# --- one userinfo parser ----------------------------------------------------------------------

SHAPES = [  # (url, user, password, what is left)
    ("http://u:p/x@h", "u", "p/x", "http://h"),
    ("http://u:p?x@h/path", "u", "p?x", "http://h/path"),
    ("http://u:p#x@h:8443/redfish", "u", "p#x", "http://h:8443/redfish"),
    ("https://root:p@ss@bmc", "root", "p@ss", "https://bmc"),
    ("https://root:a:b@bmc", "root", "a:b", "https://bmc"),
    ("https://root:p%2Fx%40y@bmc", "root", "p/x@y", "https://bmc"),
    ("snmp://pub/lic@pdu:161", "pub/lic", None, "snmp://pdu:161"),
    ("https://admin@[fe80::1]:443/x", "admin", None, "https://[fe80::1]:443/x"),
]


@pytest.mark.parametrize(("url", "user", "password", "rest"), SHAPES)
def test_userinfo_found_whatever_the_password_holds(url: str, user: str, password: str | None,
                                                    rest: str) -> None:
    info = find_userinfo(url)
    assert info is not None
    assert (info.user, info.password) == (user, password)
    assert strip_userinfo(url) == rest


def test_urlsplit_is_fooled_where_find_userinfo_is_not() -> None:
    from urllib.parse import urlsplit as std

    assert std("http://u:p/x@h").hostname == "u"  # the standard split: host "u", path "/x@h"
    parts = split_url("http://u:p/x@h", what="BMC")
    assert (parts.hostname, parts.username, parts.password) == ("h", "u", "p/x")


@pytest.mark.parametrize("url", ["http://h/path", "https://bmc:443", "snmp://pdu?community=env:C",
                                 "not a url", "mailto:someone@example.org"])
def test_no_userinfo(url: str) -> None:
    assert find_userinfo(url) is None


@pytest.mark.parametrize("url", [s[0] for s in SHAPES if s[2] is not None])
def test_site_check_rejects_every_shape(url: str) -> None:
    assert find_literal_secrets({"mirror": {"url": url}}) == ["mirror.url"]
    assert find_literal_secrets({"mirrors": [url]}) == ["mirrors[0]"]


def test_bmc_and_pdu_urls_refuse_a_password_hidden_past_a_slash() -> None:
    with pytest.raises(ConfigError, match="password"):
        parse_bmc_url("https://root:p/x@bmc", password="env:X")
    from nodegate.power.snmp import parse_snmp_url

    with pytest.raises(ConfigError, match="password"):
        parse_snmp_url("snmp://c:p/x@pdu:161", allow_literal_community=True)


# --- the credential key catalogue ---------------------------------------------------------------

SECRET_NAMES = ["password", "passwd", "community", "community_string", "snmp_community",
                "ssh_private_key", "private_key", "bmc_pw", "ipmi_pwd", "ansible_become_pass",
                "token", "api_key", "apiKey", "secret", "client_secret", "auth_key",
                "sshPrivateKey", "communityString", "access-key", "vault_pass", "psk",
                "credentials", "session_token", "BMC_PASSWORD"]
NOT_SECRET = ["password_env", "password_file", "token_file", "community_env",
              "ssh_private_key_file", "api_key_env", "username", "username_env", "ssh_key",
              "ssh_user", "url", "name", "key", "passthrough", "bypass", "keyboard", "monkey",
              "public_key", "host_key_checking", "model", "ca_bundle"]


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_catalogue_finds_credential_names(name: str) -> None:
    assert is_secret_key(name)
    assert find_literal_secrets({"h": {name: "literal"}}) == [f"h.{name}"]


@pytest.mark.parametrize("name", NOT_SECRET)
def test_catalogue_leaves_references_and_plain_names(name: str) -> None:
    assert not is_secret_key(name)
    assert find_literal_secrets({"h": {name: "/etc/x"}}) == []


# --- https only unless insecure -----------------------------------------------------------------

def test_http_bmc_needs_the_insecure_flag() -> None:
    with pytest.raises(ConfigError, match="in clear") as err:
        parse_bmc_url("http://root@bmc1", password="env:X", key="bmcs[0]", file="p.yaml")
    assert "bmc1" in str(err.value) and "p.yaml" in str(err.value)
    assert parse_bmc_url("http://root@bmc1", password="env:X", insecure=True).url == "http://bmc1"


def test_site_http_bmc_with_credentials_names_file_host_key() -> None:
    data = {"hosts": {"n1": {"bmc": {"url": "http://10.0.0.1", "password_env": "P"}}}}
    with pytest.raises(ConfigError, match="in clear") as err:
        reject_literal_secrets(data, file="site.yaml")
    assert (err.value.file, err.value.host, err.value.key) == ("site.yaml", "n1",
                                                                "hosts.n1.bmc.url")
    data["hosts"]["n1"]["bmc"]["insecure"] = True
    reject_literal_secrets(data, file="site.yaml")
    reject_literal_secrets({"m": {"url": "http://mirror/debian"}}, file="site.yaml")


# --- one redaction filter -------------------------------------------------------------------

def _password_file(tmp_path: Path) -> str:
    path = tmp_path / "bmc-password"
    path.write_text(PASSWORD + "\n")
    path.chmod(0o600)
    got = resolve_secret({"password_file": str(path)}, "password", where="site.yaml")
    assert got == PASSWORD
    return got


def test_redact_every_spelling(tmp_path: Path) -> None:
    _password_file(tmp_path)
    for text in (PASSWORD, json.dumps({"x": PASSWORD}), f"<a v='{PASSWORD}'/>",
                 "https://root:" + PASSWORD.replace("/", "%2F") + "@bmc"):
        out = redact(text)
        assert PASSWORD not in out and "%2F" not in out.replace("https://***@bmc", "")
    assert redact("https://root:pw@bmc/x and more") == "https://root:***@bmc/x and more"
    # a user name alone is no secret (USER@HOST in nodegate's own help); a community is
    assert redact("use https://USER@HOST[:PORT]") == "use https://USER@HOST[:PORT]"
    assert redact("snmp://public@pdu") == "snmp://***@pdu"
    # a token where the user stands is masked whole
    assert redact("https://ghp_" + "a" * 36 + "@git") == "https://***@git"
    assert redact("nothing here") == "nothing here"


def test_numbers_and_short_values_are_not_registered() -> None:
    remember_secret("ab")
    remember_secret("123456")
    assert redact("ab 123456 1234567.5") == "ab 123456 1234567.5"


def _report_with(secret: str) -> Any:
    leaky = CheckResult("bmc_power", "bmc", None, None, "W", Verdict.ERROR, Severity.CRITICAL,
                        {"error": f"login refused for https://root:{secret}@bmc ({secret})"})
    ok = CheckResult("gpu_count", "node", 8, 8, "", Verdict.PASS, Severity.INFO, {})
    return build([leaky, ok], node="n1", profile="sim-h100-hgx", level="quick",
                 started_at=1_700_000_000.0, duration_s=1.0, backend="sim")


def test_password_from_file_never_in_json_junit_prometheus(tmp_path: Path) -> None:
    secret = _password_file(tmp_path)
    report = _report_with(secret)
    json_path = write(report, tmp_path / "r.json")
    junit = write_junit(report, tmp_path / "r.xml")
    prom = write_prometheus(report, tmp_path / "r.prom")
    for path in (json_path, junit, prom):
        text = path.read_text()
        assert secret not in text and json.dumps(secret)[1:-1] not in text, path
    assert load(json_path).node == "n1"  # still a valid report: digest and byte counts hold
    ET.parse(junit)


def _parser(func: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="t")
    parser.add_argument("--debug", action="store_true")
    parser.set_defaults(func=func, command="t")
    return parser


def test_password_from_env_never_in_stdout_stderr_or_traceback_file(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    monkeypatch.setenv("BMC_PW", PASSWORD)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.delenv("NODEGATE_DEBUG", raising=False)
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    secret = resolve_secret({"password_env": "BMC_PW"}, "password", where="site.yaml")
    assert secret == PASSWORD

    def leaks(_args: argparse.Namespace) -> int:
        print(f"reading with {secret}")
        raise RuntimeError(f"the BMC said no to {secret}")

    def bad(_args: argparse.Namespace) -> int:
        raise ConfigError(f"bad value {secret}", file="site.yaml")

    with redacted_std_streams():
        assert cli.run(_parser(leaks), []) == 3
        assert cli.run(_parser(bad), []) == 2
    out, err = capsys.readouterr()
    assert "RuntimeError" in err and "site.yaml" in err
    traceback_files = list(tmp_path.glob("nodegate-error-*.log"))
    assert traceback_files
    for text in (out, err, *(p.read_text() for p in traceback_files)):
        assert secret not in text


def test_log_lines_redacted(tmp_path: Path) -> None:
    import logging

    _password_file(tmp_path)
    stream = io.StringIO()
    logger = logging.getLogger("nodegate.test.secrets")
    handler = logging.StreamHandler(stream)
    logger.addHandler(handler)
    try:
        install_log_filter(logger)
        logger.warning("device said %s", PASSWORD)
        try:
            raise ValueError(PASSWORD)
        except ValueError:
            logger.exception("failed")
    finally:
        logger.removeHandler(handler)
    assert "device said ***" in stream.getvalue()
    assert PASSWORD not in stream.getvalue()


# --- the bounded BMC transport --------------------------------------------------------------------


class _Raw:
    """A one-shot TCP server on 127.0.0.1 running ``serve(conn)`` per connection."""

    def __init__(self, serve: Callable[[socket.socket], None]) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.sent = 0
        self._serve = serve
        self._stop = threading.Event()
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            try:
                conn.recv(65536)
                self._serve(conn)
            except OSError:
                pass

    def close(self) -> None:
        self._stop.set()
        self.sock.close()


def _target(port: int) -> Any:
    return parse_bmc_url(f"http://root@127.0.0.1:{port}", password="env:BMC_PW", insecure=True,
                         timeout_s=2.0, retries=0)


@pytest.fixture(autouse=True)
def _bmc_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BMC_PW", BMC_PASSWORD)


@pytest.mark.parametrize("where", ["headers", "body"])
def test_dripping_bmc_ends_at_the_deadline(where: str) -> None:
    def drip(conn: socket.socket) -> None:
        head = b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n"
        if where == "body":
            conn.sendall(head)
            head = b"{" + b" " * 99999
        for byte in head[:200]:  # a byte every 0.1 s: a per-recv timeout never fires
            conn.sendall(bytes([byte]))
            time.sleep(0.1)

    server = _Raw(drip)
    try:
        start = time.monotonic()
        dev = read_bmc("bmc", _target(server.port))
        elapsed = time.monotonic() - start
    finally:
        server.close()
    assert not dev.up
    assert "deadline" in (dev.error or "")
    assert elapsed < 12, f"a dripping BMC held the read for {elapsed:.0f} s"


@pytest.mark.parametrize("declared", [True, False])
def test_huge_body_is_refused_not_read(declared: bool) -> None:
    size = 48 * 1024 * 1024
    server: _Raw

    def flood(conn: socket.socket) -> None:
        length = f"Content-Length: {400 * 1024 * 1024}\r\n" if declared else ""
        conn.sendall(f"HTTP/1.1 200 OK\r\n{length}Connection: close\r\n\r\n".encode())
        chunk = b" " * 65536
        while server.sent < size:
            conn.sendall(chunk)
            server.sent += len(chunk)

    server = _Raw(flood)
    try:
        dev = read_bmc("bmc", _target(server.port))
    finally:
        server.close()
    assert not dev.up
    assert "cap" in (dev.error or "")
    assert server.sent < 16 * 1024 * 1024, f"{server.sent} bytes were read"


class _Recorder(BaseHTTPRequestHandler):
    seen: list[dict[str, str]]

    def do_GET(self) -> None:
        self.seen.append(dict(self.headers))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: Any) -> None:
        pass


def _bmc_redirecting_to(other: int) -> type[BaseHTTPRequestHandler]:
    class Bmc(BaseHTTPRequestHandler):
        def _json(self, code: int, body: dict[str, Any], extra: dict[str, str]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            for name, value in extra.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if urlsplit(self.path).path.rstrip("/") == "/redfish/v1":
                self._json(200, {"Links": {"Sessions": {
                    "@odata.id": "/redfish/v1/SessionService/Sessions"}},
                    "Chassis": {"@odata.id": "/redfish/v1/Chassis"}}, {})
                return
            self._json(302, {}, {"Location": f"http://localhost:{other}{self.path}"})

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self._json(201, {}, {"X-Auth-Token": "TOKEN-1234567",
                                 "Location": "/redfish/v1/SessionService/Sessions/1"})

        def do_DELETE(self) -> None:
            self._json(204, {}, {})

        def log_message(self, *args: Any) -> None:
            pass

    return Bmc


def test_redirect_to_another_host_is_not_followed_with_the_token() -> None:
    seen: list[dict[str, str]] = []
    recorder = type("Rec", (_Recorder,), {"seen": seen})
    elsewhere = ThreadingHTTPServer(("127.0.0.1", 0), recorder)
    bmc = ThreadingHTTPServer(("127.0.0.1", 0), _bmc_redirecting_to(elsewhere.server_port))
    for server in (elsewhere, bmc):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        dev = read_bmc("bmc", _target(bmc.server_port))
    finally:
        for server in (elsewhere, bmc):
            server.shutdown()
            server.server_close()
    assert seen == [], f"the redirect was followed: {seen}"
    assert not dev.up
    assert "redirect not followed" in (dev.error or "")
