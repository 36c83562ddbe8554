"""BMC reader over Redfish (DMTF ``redfish`` library): node power, PSUs, redundancy, inlet, fans.

Works with Dell iDRAC9 and HPE iLO 6 and any BMC that follows the DMTF schemas: node power from
``EnvironmentMetrics.PowerWatts`` or a chassis ``Sensors`` power reading when offered (the
newer model), else the legacy ``Power.PowerControl[0].PowerConsumedWatts``; PSUs and
redundancy from ``PowerSubsystem`` or legacy ``Power``; inlet from ``Sensors``,
``ThermalSubsystem/ThermalMetrics`` or ``Thermal``; fans from ``ThermalSubsystem/Fans``,
``Thermal`` or ``Sensors``. Parsing (null-tolerant, both generations) is in ``bmc_chassis``.

Why the care around the library: ``redfish`` turns TLS verification *off* unless a CA file is
given, retries 10 times with 1 s sleeps by default, logs session tokens at DEBUG, and sends
through a ``requests`` session that times out per ``recv``, reads any body whole and follows
redirects with its session token. This module always passes a CA bundle (certifi's unless one
is configured), refuses plain ``http://`` unless the site says ``insecure``, bounds retries,
keeps the library's logger at WARNING, and swaps the session for
``bounded_http.BoundedSession`` (a total deadline per request and per device, a body cap, no
redirects).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from nodegate.errors import ConfigError
from nodegate.power.bmc_chassis import as_list, read_chassis
from nodegate.power.credentials import SecretRef, parse_ref, redact
from nodegate.power.readings import DeviceReading
from nodegate.power.urls import split_url

DEFAULT_TIMEOUT_S = 5.0
DEFAULT_RETRIES = 1
DEFAULT_MAX_SESSIONS = 2

_SESSION_CAPS: dict[str, threading.BoundedSemaphore] = {}
_CAPS_LOCK = threading.Lock()


class BmcError(Exception):
    """The BMC could not be read; the message is safe to print (no credentials)."""


class BmcRedirect(BmcError):
    """The BMC answered a redirect: never followed, and the whole read is refused (an optional
    resource that redirects is not just missing)."""


@dataclass(frozen=True)
class BmcTarget:
    """One BMC: base URL (scheme://host:port, no credentials), user, password reference."""

    url: str
    username: str
    password: SecretRef
    ca_bundle: str | None = None  # None: certifi's bundle; verification is never silently off
    insecure: bool = False  # explicit opt-out only (lab with self-signed cert)
    timeout_s: float = DEFAULT_TIMEOUT_S
    retries: int = DEFAULT_RETRIES
    max_sessions: int = DEFAULT_MAX_SESSIONS

    @property
    def display(self) -> str:
        return self.url

    @property
    def key(self) -> str:
        parts = urlsplit(self.url)
        return f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"


def parse_bmc_url(
    url: str, *, password: str | None = None, ca_bundle: str | None = None,
    insecure: bool = False, timeout_s: float = DEFAULT_TIMEOUT_S,
    retries: int = DEFAULT_RETRIES, max_sessions: int = DEFAULT_MAX_SESSIONS,
    key: str | None = None, file: str | None = None,
) -> BmcTarget:
    """``https://USER@HOST:PORT`` (or ``redfish://`` = https); the password comes by reference."""
    parts = split_url(url, what="BMC", key=key, file=file)
    scheme = {"redfish": "https"}.get(parts.scheme, parts.scheme)
    if scheme not in ("https", "http") or not parts.hostname:
        raise ConfigError("BMC URL must be https://USER@HOST[:PORT]", key=key, file=file)
    if scheme == "http" and not insecure:
        raise ConfigError(f"BMC {parts.hostname}: plain http:// would send the password in "
                          "clear; use https:// (a lab BMC without TLS: set insecure)",
                          key=key, file=file)
    if parts.password is not None:
        raise ConfigError("BMC URL must not carry a password; use a password reference "
                          "(env:NAME or file:/path)", key=key, file=file)
    if not parts.username:
        raise ConfigError("BMC URL needs a user: https://USER@HOST", key=key, file=file)
    if password is None:
        raise ConfigError("BMC password reference missing (env:NAME or file:/path)",
                          key=key, file=file)
    if max_sessions < 1:
        raise ConfigError("max_sessions must be >= 1", key=key, file=file)
    port = f":{parts.port}" if parts.port else ""
    return BmcTarget(
        url=f"{scheme}://{parts.hostname}{port}", username=parts.username,
        password=parse_ref(password, key=key, file=file), ca_bundle=ca_bundle,
        insecure=insecure, timeout_s=timeout_s, retries=retries, max_sessions=max_sessions,
    )


def check_refs(target: BmcTarget, *, key: str | None = None) -> None:
    """Resolve the password once up front so a missing variable or an 0644 file fails at start
    (exit 2), not as a down device at the first poll."""
    target.password.resolve(key=key)


def _session_cap(target: BmcTarget) -> threading.BoundedSemaphore:
    """At most ``max_sessions`` concurrent sessions per BMC from this process: BMCs allow only a
    handful of sessions in total and an exhausted BMC locks out the operator too."""
    with _CAPS_LOCK:
        cap = _SESSION_CAPS.get(target.key)
        if cap is None:
            cap = _SESSION_CAPS[target.key] = threading.BoundedSemaphore(target.max_sessions)
        return cap


class _Client:
    """Thin wrapper: bounded GETs returning dicts, errors as BmcError."""

    def __init__(self, target: BmcTarget, deadline: float) -> None:
        import redfish

        from nodegate.power.bounded_http import BoundedSession

        logging.getLogger("redfish").setLevel(logging.WARNING)
        self.target = target
        if target.insecure:
            cafile: str | None = None  # the library's verify=False
        elif target.ca_bundle:
            cafile = target.ca_bundle
        else:
            import certifi

            cafile = certifi.where()
        self._client = redfish.redfish_client(
            base_url=target.url, username=target.username,
            password=target.password.resolve(), cafile=cafile,
            timeout=target.timeout_s, max_retry=target.retries, check_connectivity=False,
        )
        # every request: one total deadline, a body cap, redirects never followed
        self._client._session = BoundedSession(device_deadline=deadline)
        self.root = self.get("/redfish/v1")
        self.logged_in = False

    def login(self) -> None:
        links = self.root.get("Links")
        auth = "session" if isinstance(links, dict) and links.get("Sessions") else "basic"
        self._client.login(auth=auth)
        self.logged_in = auth == "session"
        self.auth = auth

    def logout(self) -> None:
        # A failed logout must not mask the reading; the BMC times the session out.
        with contextlib.suppress(Exception):
            self._client.logout()

    def get(self, path: str) -> dict[str, Any]:
        resp = self._client.get(path)
        if resp.status == 401:
            raise BmcError(f"{self.target.display}: authentication refused (HTTP 401)")
        if 300 <= resp.status < 400:
            raise BmcRedirect(f"{self.target.display}{path}: HTTP {resp.status} redirect not "
                           "followed (credentials go to the configured BMC only)")
        if resp.status != 200:
            raise BmcError(f"{self.target.display}{path}: HTTP {resp.status}")
        data = resp.dict
        return data if isinstance(data, dict) else {}

    def post(self, path: str, body: dict[str, Any]) -> None:
        """An action: 200/202/204 is taken; anything else a BmcError naming the status and
        the Redfish error's MessageId (never the request's headers or body)."""
        resp = self._client.post(path, body=body)
        if resp.status == 401:
            raise BmcError(f"{self.target.display}: authentication refused (HTTP 401)")
        if 300 <= resp.status < 400:
            raise BmcRedirect(f"{self.target.display}{path}: HTTP {resp.status} redirect not "
                              "followed (credentials go to the configured BMC only)")
        if resp.status not in (200, 202, 204):
            data = resp.dict if resp.status != 204 else None
            error = data.get("error") if isinstance(data, dict) else None
            code = error.get("code") if isinstance(error, dict) else None
            raise BmcError(f"{self.target.display}{path}: HTTP {resp.status}"
                           + (f" ({code})" if code else ""))

    def get_opt(self, link: Any) -> dict[str, Any] | None:
        if not isinstance(link, dict) or "@odata.id" not in link:
            return None
        try:
            return self.get(str(link["@odata.id"]))
        except BmcRedirect:
            raise
        except BmcError:
            return None

    def members(self, link: Any) -> list[dict[str, Any]]:
        coll = self.get_opt(link)
        if not coll:
            return []
        out = []
        for m in as_list(coll.get("Members")):
            res = self.get_opt(m)
            if res is not None:
                out.append(res)
        return out


def _read_chassis(client: _Client, dev: DeviceReading) -> None:
    chassis_list = client.members(client.root.get("Chassis"))
    # The chassis carrying power data is the server's (HGX systems also list a GPU baseboard).
    chassis = next((c for c in chassis_list if any(
                        isinstance(c.get(k), dict) for k in ("PowerSubsystem", "Power"))),
                   chassis_list[0] if chassis_list else None)
    if chassis is None:
        raise BmcError(f"{client.target.display}: no Chassis")
    dev.info.update({"vendor": client.root.get("Vendor") or chassis.get("Manufacturer") or "",
                     "chassis": str(chassis.get("@odata.id", "")),
                     "chassis_model": chassis.get("Model") or "", "auth": client.auth})
    read_chassis(client, chassis, dev)


def device_budget(target: BmcTarget) -> float:
    """Seconds one BMC read may take in total, all its requests and retries together."""
    return target.timeout_s * (target.retries + 1) * 8 + 5


def read_bmc(name: str, target: BmcTarget) -> DeviceReading:
    """Read one BMC under its session cap. Never raises for a device problem (``up=False``)."""
    dev = DeviceReading(name=name, kind="bmc", model="redfish", address=target.display)
    start = time.monotonic()
    cap = _session_cap(target)
    wait = target.timeout_s * (target.retries + 1)
    if not cap.acquire(timeout=wait):
        dev.up, dev.error = False, (f"{target.display}: {target.max_sessions} sessions already "
                                    f"open from this host; gave up after {wait:g} s")
        return dev
    client: _Client | None = None
    try:
        client = _Client(target, start + device_budget(target))
        client.login()
        _read_chassis(client, dev)
        vendor = str(dev.info.get("vendor", "")).lower()
        dev.model = "idrac9" if "dell" in vendor else "ilo6" if "hp" in vendor else "redfish"
    except Exception as exc:  # includes a secret that vanished since start: device marked down
        dev.up = False
        dev.error = redact(_describe(exc, target))
        dev.readings = []
    finally:
        if client is not None and client.logged_in:
            client.logout()
        cap.release()
    dev.elapsed_s = time.monotonic() - start
    return dev


def _reset_action(client: _Client) -> tuple[str, list[str] | None]:
    """The system's ``#ComputerSystem.Reset`` target and its allowable ResetTypes (None: the
    BMC lists none). An HGX server is one system; a BMC listing several is refused rather
    than guessed at."""
    systems = client.members(client.root.get("Systems"))
    if len(systems) != 1:
        raise BmcError(f"{client.target.display}: {len(systems)} Systems; power cycle needs "
                       "exactly one")
    action = (systems[0].get("Actions") or {}).get("#ComputerSystem.Reset")
    if not isinstance(action, dict) or not isinstance(action.get("target"), str):
        raise BmcError(f"{client.target.display}: the system offers no ComputerSystem.Reset")
    allowed = action.get("ResetType@Redfish.AllowableValues")
    return str(action["target"]), [str(v) for v in allowed] if isinstance(allowed, list) \
        else None


@contextlib.contextmanager
def _session(target: BmcTarget, *, extra_s: float = 0.0) -> Iterator[_Client]:
    """One logged-in Redfish session within this host's session cap, for an action or a read
    beyond the poller's; every failure leaves as a BmcError whose message is safe to print."""
    cap = _session_cap(target)
    if not cap.acquire(timeout=target.timeout_s * (target.retries + 1)):
        raise BmcError(f"{target.display}: {target.max_sessions} sessions already open from "
                       "this host")
    client: _Client | None = None
    try:
        client = _Client(target, time.monotonic() + device_budget(target) + extra_s)
        client.login()
        yield client
    except BmcError as exc:
        raise BmcError(redact(str(exc))) from None
    except Exception as exc:
        raise BmcError(redact(_describe(exc, target))) from None
    finally:
        if client is not None and client.logged_in:
            client.logout()
        cap.release()


def power_cycle(target: BmcTarget, *, off_wait_s: float = 5.0) -> str:
    """Power-cycle the BMC's system through Redfish ``ComputerSystem.Reset`` (DMTF
    ComputerSystem schema): ``PowerCycle`` where the BMC offers it (or lists no values), else
    ``ForceOff`` then ``On``: a full removal of power either way, never a warm reset. Returns
    what was posted; raises BmcError with a message safe to print (no credentials)."""
    with _session(target, extra_s=off_wait_s) as client:
        path, allowed = _reset_action(client)
        if allowed is None or "PowerCycle" in allowed:
            client.post(path, {"ResetType": "PowerCycle"})
            return "PowerCycle"
        if "ForceOff" in allowed and "On" in allowed:
            client.post(path, {"ResetType": "ForceOff"})
            time.sleep(off_wait_s)
            client.post(path, {"ResetType": "On"})
            return "ForceOff, On"
        raise BmcError(f"{target.display}: neither PowerCycle nor ForceOff and On among the "
                       f"ResetTypes offered ({', '.join(allowed)})")


#: What the RMA manifest keeps of the service root and of the BMC's Manager resource (DMTF
#: ServiceRoot and Manager schemas): who made it, what it is, its firmware.
_ROOT_IDENTITY = ("Vendor", "Product", "RedfishVersion", "UUID")
_MANAGER_IDENTITY = ("Id", "ManagerType", "Manufacturer", "Model", "FirmwareVersion", "UUID",
                     "SerialNumber", "PartNumber")


def bmc_identity(target: BmcTarget) -> dict[str, Any]:
    """The BMC as it names itself: the service root's vendor and product, and the first
    Manager's type, model, firmware and identifiers (only the fields present, as strings).
    Raises BmcError with a message safe to print."""
    with _session(target) as client:
        out: dict[str, Any] = {"address": target.display}
        out.update({k: str(client.root[k]) for k in _ROOT_IDENTITY if client.root.get(k)})
        managers = client.members(client.root.get("Managers"))
        if managers:
            out["manager"] = {k: str(managers[0][k]) for k in _MANAGER_IDENTITY
                              if managers[0].get(k)}
        return out


def bmc_systems(target: BmcTarget) -> list[dict[str, str]]:
    """Each ComputerSystem the BMC manages as it names it: ``HostName`` (set by the host's OS
    or agent), ``SerialNumber`` (the chassis service tag), ``Id`` (only the fields present,
    as strings). What nodegate.power.verify compares with the host the site wired it to.
    Raises BmcError with a message safe to print."""
    with _session(target) as client:
        return [{k: str(system[k]) for k in ("Id", "HostName", "SerialNumber")
                 if system.get(k)} for system in client.members(client.root.get("Systems"))]


def _describe(exc: Exception, target: BmcTarget) -> str:
    name = type(exc).__name__
    cause = exc.__cause__ or exc.__context__
    if name == "RetriesExhaustedError":
        detail = type(cause).__name__ if cause else "no answer"
        if type(cause).__name__ == "HttpLimitError":
            detail = str(cause)
        if cause is not None and "SSL" in str(cause):
            detail = "TLS verification failed (use ca_bundle for a private CA)"
        budget = target.timeout_s * (target.retries + 1)
        return (f"no Redfish answer from {target.display} within ~{budget:g} s "
                f"({target.retries + 1} tries): {detail}")
    if name in ("InvalidCredentialsError", "SessionCreationError"):
        return f"{target.display}: login refused ({name})"
    return f"{target.display}: {exc}" if str(exc) else f"{target.display}: {name}"
