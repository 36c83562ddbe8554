"""Fuzzing the secrets path: generated passwords holding reserved characters inside URLs (the
one userinfo parser finds them, the site check refuses them, redaction removes them from any
message), generated key names against the credential catalogue, and hostile URL text into
the BMC and PDU URL parsers (ConfigError or a target, never another exception, never the
secret in the message)."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from urllib.parse import unquote

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from nodegate.errors import ConfigError  # noqa: E402
from nodegate.power.bmc import parse_bmc_url  # noqa: E402
from nodegate.power.snmp import parse_snmp_url  # noqa: E402
from nodegate.redaction import (  # noqa: E402
    ACCOUNT_NAME,
    find_userinfo,
    forget_secrets,
    redact,
    remember_secret,
)
from nodegate.secret_refs import (  # noqa: E402
    find_literal_secrets,
    is_secret_key,
    reject_literal_secrets,
)

RESERVED = "/?#@:%[]!$&'()+,;="
LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~"

users = st.text(alphabet=LETTERS, min_size=1, max_size=12)
# a letter first: a value that reads as a number is not registered (redaction.remember_secret)
passwords = st.builds(lambda head, body, tail: head + body + tail,
                      st.sampled_from("kQzXw"), st.text(alphabet=LETTERS + RESERVED,
                                                        min_size=1, max_size=24),
                      st.sampled_from(RESERVED.replace("%", "")))
hosts = st.builds(lambda name, port: name + (f":{port}" if port else ""),
                  st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789.-", min_size=1,
                          max_size=12).map(lambda h: "h" + h),
                  st.one_of(st.none(), st.integers(min_value=1, max_value=65535)))
paths = st.lists(st.text(alphabet=LETTERS, max_size=8), max_size=3).map(
    lambda parts: "".join(f"/{part}" for part in parts))
schemes = st.sampled_from(["http", "https", "snmp", "snmpv3", "redfish"])


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    forget_secrets()
    yield
    forget_secrets()


@pytest.mark.fuzz
@given(schemes, users, passwords, hosts, paths)
def test_userinfo_found_refused_and_redacted(scheme: str, user: str, password: str, host: str,
                                             path: str) -> None:
    url = f"{scheme}://{user}:{password}@{host}{path}"
    info = find_userinfo(url)
    assert info is not None
    assert info.raw == f"{user}:{password}"
    assert info.password == unquote(password)
    assert find_literal_secrets({"m": {"url": url}}) == ["m.url"]
    with pytest.raises(ConfigError) as err:
        reject_literal_secrets({"hosts": {"n1": {"data": {"url": url}}}}, file="s.yaml")
    assert password not in str(err.value) and "hosts.n1.data.url" in str(err.value)
    message = f"cannot reach {url} (refused)"
    # the password is masked; the user name too unless it has an account name's shape
    # (a token may stand where the user does), and a bare SNMP community always
    shown = user if scheme != "snmp" and ACCOUNT_NAME.fullmatch(user) else None
    masked = f"{shown}:***" if shown is not None else "***"
    assert redact(message) == f"cannot reach {scheme}://{masked}@{host}{path} (refused)"


@pytest.mark.fuzz
@given(users, passwords, hosts)
def test_device_url_parsers_refuse_a_password_without_echoing_it(user: str, password: str,
                                                                 host: str) -> None:
    for parse in (lambda u: parse_bmc_url(u, password="env:X"),
                  lambda u: parse_snmp_url(u, allow_literal_community=True)):
        for scheme in ("https", "snmp", "snmpv3"):
            with pytest.raises(ConfigError) as err:
                parse(f"{scheme}://{user}:{password}@{host}")
            assert password not in str(err.value)


@pytest.mark.fuzz
@given(passwords, st.sampled_from(["raw", "json", "url", "xml"]))
def test_a_registered_secret_never_survives_redaction(password: str, form: str) -> None:
    from html import escape
    from urllib.parse import quote

    remember_secret(password)
    spelled = {"raw": password, "json": json.dumps({"e": password}),
               "url": quote(password, safe=""), "xml": escape(password)}[form]
    out = redact(f"the BMC said: {spelled}; giving up")
    assert password not in out
    assert json.dumps(password)[1:-1] not in out
    assert out.startswith("the BMC said: ") and out.endswith("; giving up")


@pytest.mark.fuzz
@given(st.text(alphabet=LETTERS + RESERVED + " \n\"'", max_size=4000))
def test_hostile_url_text_is_a_config_error_or_a_target_in_bounded_time(text: str) -> None:
    start = time.monotonic()
    for url in (f"https://{text}", f"snmp://{text}", text):
        find_userinfo(url)
        redact(url)
        for parse in (lambda u: parse_bmc_url(u, password="env:X", insecure=True),
                      lambda u: parse_snmp_url(u, allow_literal_community=True)):
            with contextlib.suppress(ConfigError):  # bad input: fine; anything else fails
                parse(url)
    assert time.monotonic() - start < 5


words = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", max_size=8).map(
    lambda word: "x" + word)
SECRET_TAILS = ["password", "passwd", "pw", "pwd", "pass", "secret", "token", "community",
                "community_string", "private_key", "api_key", "auth_key", "priv_key",
                "passphrase", "credentials", "psk"]


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


@pytest.mark.fuzz
@given(words, st.sampled_from(SECRET_TAILS), st.booleans())
def test_catalogue_finds_every_credential_name_and_no_reference(prefix: str, tail: str,
                                                                camel: bool) -> None:
    name = f"{prefix}_{tail}"
    if camel:
        name = _camel(name)
    assert is_secret_key(name), name
    assert find_literal_secrets({"h": {name: "hunter2x"}}) == [f"h.{name}"]
    for suffix in ("_env", "_file"):
        assert not is_secret_key(name + suffix), name + suffix
        assert find_literal_secrets({"h": {name + suffix: "/etc/nodegate/x"}}) == []


@pytest.mark.fuzz
@given(st.text(alphabet=LETTERS + "_ .", max_size=40))
def test_catalogue_is_total_and_references_never_secret(name: str) -> None:
    secret = is_secret_key(name)
    assert isinstance(secret, bool)
    assert find_literal_secrets({"h": {name: "hunter2x"}}) == ([f"h.{name}"] if secret else [])
    assert not is_secret_key(f"{name}_env")
