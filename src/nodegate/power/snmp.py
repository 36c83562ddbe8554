"""SNMP targets (URL forms, v2c and v3 authPriv) and a small bounded asyncio client on pysnmp 7.

URL forms (docs/power.md):

* ``snmp://COMMUNITY@HOST:PORT`` -- v2c with a literal community (CLI only, lab use);
* ``snmp://HOST:PORT?community=env:NAME`` (or ``file:/path``) -- v2c, community by reference;
* ``snmpv3://USER@HOST:PORT?auth=sha256&auth_key=env:A&priv=aes128&priv_key=file:/p`` --
  v3 authPriv; keys only by reference, so the URL is safe to log.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import parse_qs

from nodegate.bounds import parse_number
from nodegate.errors import ConfigError
from nodegate.power.credentials import SecretRef, parse_ref, remember_secret
from nodegate.power.urls import DeviceUrl, split_url

DEFAULT_PORT = 161
DEFAULT_TIMEOUT_S = 2.0
DEFAULT_RETRIES = 1

AUTH_PROTOCOLS = ("md5", "sha", "sha224", "sha256", "sha384", "sha512")
PRIV_PROTOCOLS = ("des", "3des", "aes128", "aes192", "aes256")


class SnmpError(Exception):
    """A device did not answer or answered with an error; the message is safe to print."""


@dataclass(frozen=True)
class SnmpTarget:
    """Where and how to reach one SNMP agent. Secrets are held as references, resolved late."""

    host: str
    port: int = DEFAULT_PORT
    version: str = "2c"
    community: str | SecretRef | None = None  # str only when given literally on the CLI
    user: str = ""
    auth_protocol: str = "sha256"
    auth_key: SecretRef | None = None
    priv_protocol: str = "aes128"
    priv_key: SecretRef | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    retries: int = DEFAULT_RETRIES

    @property
    def display(self) -> str:
        """The address as it may appear in output: no community, no keys."""
        if self.version == "3":
            return f"snmpv3://{self.user}@{self.host}:{self.port}"
        return f"snmp://{self.host}:{self.port}"

    def with_limits(self, timeout_s: float, retries: int) -> SnmpTarget:
        return replace(self, timeout_s=timeout_s, retries=retries)


def parse_snmp_url(
    url: str, *, allow_literal_community: bool = False, key: str | None = None,
    file: str | None = None,
) -> SnmpTarget:
    """Parse a PDU URL; a literal community is accepted only where the caller allows it."""
    parts = split_url(url, what="PDU", key=key, file=file)
    if parts.scheme not in ("snmp", "snmpv3"):
        raise ConfigError(f"PDU URL must start with snmp:// or snmpv3://, got {parts.scheme}://",
                          key=key, file=file)
    if not parts.hostname:
        raise ConfigError("PDU URL has no host", key=key, file=file)
    try:
        port = parts.port or DEFAULT_PORT
    except ValueError as exc:
        raise ConfigError("PDU URL has a bad port", key=key, file=file) from exc
    query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    unknown = set(query) - {"community", "auth", "auth_key", "priv", "priv_key", "timeout",
                            "retries"}
    if unknown:
        raise ConfigError(f"unknown PDU URL parameter(s): {', '.join(sorted(unknown))}",
                          key=key, file=file)
    timeout = parse_number(query.get("timeout", str(DEFAULT_TIMEOUT_S)), float, low=0, high=30,
                           low_open=True, key=f"{key or 'url'} timeout", file=file)
    retries = int(parse_number(query.get("retries", str(DEFAULT_RETRIES)), int, low=0, high=5,
                               key=f"{key or 'url'} retries", file=file))
    if parts.password is not None:
        raise ConfigError("PDU URL must not carry a password (user:password@)", key=key, file=file)
    if parts.scheme == "snmp":
        community = _v2c_community(parts, query, allow_literal_community, key=key, file=file)
        return SnmpTarget(parts.hostname, port, "2c", community=community,
                          timeout_s=timeout, retries=retries)
    return _v3_target(parts, parts.hostname, port, query, timeout=timeout, retries=retries,
                      key=key, file=file)


def _v2c_community(parts: DeviceUrl, query: dict[str, str], allow_literal: bool, *,
                   key: str | None, file: str | None) -> str | SecretRef:
    """The community: literal as ``COMMUNITY@`` (only where allowed; remembered for redaction)
    or a reference in ``?community=``."""
    if parts.username:
        if not allow_literal:
            raise ConfigError(
                "literal SNMP community in URL; use snmp://HOST?community=env:NAME",
                key=key, file=file)
        community = parts.username
        remember_secret(community)
        return community
    if "community" in query:
        return parse_ref(query["community"], key=key, file=file)
    raise ConfigError("SNMP v2c URL needs COMMUNITY@ or ?community=env:NAME",
                      key=key, file=file)


def _v3_target(parts: DeviceUrl, host: str, port: int, query: dict[str, str], *,
               timeout: float, retries: int, key: str | None, file: str | None) -> SnmpTarget:
    """A v3 authPriv target: a user, known protocols and both keys as references."""
    if not parts.username:
        raise ConfigError("SNMP v3 URL needs a user: snmpv3://USER@HOST", key=key, file=file)
    auth = query.get("auth", "sha256").lower()
    priv = query.get("priv", "aes128").lower()
    if auth not in AUTH_PROTOCOLS or priv not in PRIV_PROTOCOLS:
        raise ConfigError(f"auth must be one of {AUTH_PROTOCOLS}, priv one of {PRIV_PROTOCOLS}",
                          key=key, file=file)
    if "auth_key" not in query or "priv_key" not in query:
        raise ConfigError("SNMP v3 needs auth_key= and priv_key= references (authPriv only)",
                          key=key, file=file)
    return SnmpTarget(
        host, port, "3", user=parts.username,
        auth_protocol=auth, auth_key=parse_ref(query["auth_key"], key=key, file=file),
        priv_protocol=priv, priv_key=parse_ref(query["priv_key"], key=key, file=file),
        timeout_s=timeout, retries=retries,
    )


def check_refs(target: SnmpTarget, *, key: str | None = None) -> None:
    """Resolve every secret reference once so a bad one fails at start, not at the first poll."""
    for ref in (target.community, target.auth_key, target.priv_key):
        if isinstance(ref, SecretRef):
            ref.resolve(key=key)


def _auth_data(target: SnmpTarget) -> Any:
    from pysnmp.hlapi.v3arch.asyncio import auth as pauth

    if target.version == "2c":
        community = target.community
        secret = community.resolve() if isinstance(community, SecretRef) else (community or "")
        return pauth.CommunityData(secret, mpModel=1)
    auth_protocols = {
        "md5": pauth.USM_AUTH_HMAC96_MD5,
        "sha": pauth.USM_AUTH_HMAC96_SHA,
        "sha224": pauth.USM_AUTH_HMAC128_SHA224,
        "sha256": pauth.USM_AUTH_HMAC192_SHA256,
        "sha384": pauth.USM_AUTH_HMAC256_SHA384,
        "sha512": pauth.USM_AUTH_HMAC384_SHA512,
    }
    priv_protocols = {
        "des": pauth.USM_PRIV_CBC56_DES,
        "3des": pauth.USM_PRIV_CBC168_3DES,
        "aes128": pauth.USM_PRIV_CFB128_AES,
        "aes192": pauth.USM_PRIV_CFB192_AES,
        "aes256": pauth.USM_PRIV_CFB256_AES,
    }
    assert target.auth_key is not None and target.priv_key is not None
    return pauth.UsmUserData(
        target.user,
        authKey=target.auth_key.resolve(),
        privKey=target.priv_key.resolve(),
        authProtocol=auth_protocols[target.auth_protocol],
        privProtocol=priv_protocols[target.priv_protocol],
    )


def _pyvalue(value: Any) -> int | str | None:
    """Integers stay integers, strings decode; noSuchObject/endOfMib become None."""
    name = type(value).__name__
    if name in ("NoSuchObject", "NoSuchInstance", "EndOfMibView", "Null"):
        return None
    if name in ("Integer", "Integer32", "Gauge32", "Counter32", "Counter64", "Unsigned32",
                "TimeTicks"):
        return int(value)
    if name == "OctetString":
        raw = bytes(value)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw.hex()
    return str(value.prettyPrint())


class SnmpSession:
    """One agent, one engine; ``get`` and ``walk`` bounded by the target's timeout and retries."""

    def __init__(self, target: SnmpTarget) -> None:
        self.target = target
        self._engine: Any = None
        self._auth: Any = None
        self._transport: Any = None

    async def __aenter__(self) -> SnmpSession:
        from pysnmp.hlapi.v3arch.asyncio import SnmpEngine, UdpTransportTarget

        self._engine = SnmpEngine()
        self._auth = _auth_data(self.target)
        self._transport = await UdpTransportTarget.create(
            (self.target.host, self.target.port),
            timeout=self.target.timeout_s,
            retries=self.target.retries,
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._engine is not None:
            self._engine.close_dispatcher()

    def _check(self, error_indication: Any, error_status: Any) -> None:
        if error_indication:
            text = str(error_indication)
            if "timeout" in text.lower() or "no snmp response" in text.lower():
                budget = self.target.timeout_s * (self.target.retries + 1)
                text = (f"no SNMP response from {self.target.display} within {budget:g} s "
                        f"({self.target.retries + 1} tries); check address, port and credentials")
            raise SnmpError(text)
        if error_status:
            raise SnmpError(f"{self.target.display}: SNMP error {error_status.prettyPrint()}")

    async def get(self, oids: Sequence[str]) -> dict[str, int | str | None]:
        from pysnmp.hlapi.v3arch.asyncio import ContextData, ObjectIdentity, ObjectType, get_cmd

        out: dict[str, int | str | None] = {}
        for start in range(0, len(oids), 20):
            chunk = oids[start:start + 20]
            err_ind, err_status, _idx, var_binds = await get_cmd(
                self._engine, self._auth, self._transport, ContextData(),
                *[ObjectType(ObjectIdentity(oid)) for oid in chunk],
            )
            self._check(err_ind, err_status)
            for name, value in var_binds:
                out[str(name)] = _pyvalue(value)
        return out

    async def walk(self, base: str) -> dict[tuple[int, ...], int | str | None]:
        """All rows under ``base``, keyed by the OID suffix (column, *index)."""
        from pysnmp.hlapi.v3arch.asyncio import (
            ContextData,
            ObjectIdentity,
            ObjectType,
            bulk_walk_cmd,
        )

        prefix = tuple(int(p) for p in base.strip(".").split("."))
        out: dict[tuple[int, ...], int | str | None] = {}
        async for err_ind, err_status, _idx, var_binds in bulk_walk_cmd(
            self._engine, self._auth, self._transport, ContextData(), 0, 25,
            ObjectType(ObjectIdentity(base)), lexicographicMode=False,
        ):
            self._check(err_ind, err_status)
            for name, value in var_binds:
                oid = tuple(name)
                if oid[: len(prefix)] != prefix:
                    continue
                out[oid[len(prefix):]] = _pyvalue(value)
        return out
