"""A small Redfish BMC for the lab: session auth, Chassis Power/Thermal and PowerSubsystem,
EnvironmentMetrics and Sensors, with node power that follows the simulated GPU board, and the
host's ``ComputerSystem`` with its ``#ComputerSystem.Reset`` action.

The reset action is laid out as DMTF's ComputerSystem schema and its public mockups have it
(``Actions`` -> ``#ComputerSystem.Reset`` -> ``target`` and
``ResetType@Redfish.AllowableValues``; a POST of ``{"ResetType": ...}`` to the target). What a
reset does is injected (``BmcState.reset_handler``); in the lab (``--host-dir``) it asks the
host's supervisor (``nodegate_lab.supervisor.request_reset``) to restart that lab host for real.

Node power = ``--base-power-w`` (CPUs, fans, NICs: the part NVML cannot see) + the GPU power sum
read through pynvml (which, under the simulator, is the project's libnvidia-ml.so.1). The
power source is injectable so tests and other callers need no NVML at all.

    python -m nodegate_lab.bmc_emulator --listen 127.0.0.1:8443 --vendor dell \
        --username root --password-env NODEGATE_BMC_PASSWORD

The password is read from an environment variable or a 0600 file, never from argv.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import secrets
import ssl
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

LOG = logging.getLogger("nodegate_lab.bmc_emulator")

PowerSource = Callable[[], float]
#: Called with an accepted ResetType; raises OSError when the host cannot be reached.
ResetHandler = Callable[[str], None]

#: DMTF Resource.ResetType values this BMC offers for its system (the ComputerSystem schema's
#: enum, the subset that means something for a lab host): a PowerCycle removes power (the
#: board comes back cold); ForceRestart resets without removing it; the graceful ones ask the
#: OS first.
RESET_TYPES = ("On", "ForceOff", "GracefulShutdown", "GracefulRestart", "ForceRestart",
               "PowerCycle")


def nvml_gpu_power_w() -> float:
    """Sum of GPU power draw in W through pynvml; 0 when NVML is not there (logged once)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            total_mw = 0
            for i in range(pynvml.nvmlDeviceGetCount()):
                total_mw += pynvml.nvmlDeviceGetPowerUsage(pynvml.nvmlDeviceGetHandleByIndex(i))
        finally:
            pynvml.nvmlShutdown()
        return total_mw / 1000.0
    except Exception as exc:  # NVML absent or the simulator not started: base power only
        if not getattr(nvml_gpu_power_w, "_warned", False):
            LOG.warning("GPU power unavailable (%s); reporting base node power only", exc)
            nvml_gpu_power_w._warned = True  # type: ignore[attr-defined]
        return 0.0


@dataclass
class BmcState:
    """What the emulated chassis reports; mutable so a test can fail a PSU or heat the inlet."""

    vendor: str = "dell"  # dell (iDRAC9) or hpe (iLO 6)
    base_power_w: float = 1200.0
    psu_count: int = 6
    psu_watts: float = 3000.0
    psu_min_needed: int = 3
    failed_psus: set[int] = field(default_factory=set)
    inlet_temp_c: float = 24.0
    fan_rpm: list[float] = field(default_factory=lambda: [9600.0, 9650.0, 9580.0, 9700.0])
    schema: str = "both"  # legacy | modern | both
    redundancy_state: str = "Enabled"  # the PSU redundancy group's Status.State
    power_source: PowerSource = nvml_gpu_power_w
    # A static resource tree (DMTF mockup layout: <dir>/Chassis/1U/index.json serves
    # /redfish/v1/Chassis/1U) served instead of the built-in one; sessions work as usual.
    mockup_dir: Path | None = None
    power_state: str = "On"  # the system's PowerState: On | Off
    reset_handler: ResetHandler | None = None  # None: the state changes, nothing restarts
    # a real BMC answers the POST, then acts: the host's own request (a node power-cycling
    # itself) gets its 204 before the power goes; 0: the handler runs before the answer
    reset_delay_s: float = 0.0
    resets: list[str] = field(default_factory=list)  # every accepted ResetType, in order
    host_name: str | None = None  # the system's HostName (what its OS calls itself)

    def node_power_w(self) -> float:
        return round(self.base_power_w + max(0.0, float(self.power_source())), 1)


class RedfishBmc:
    """The resource tree, built fresh per request from ``BmcState``."""

    def __init__(self, state: BmcState, username: str, password: str, max_sessions: int) -> None:
        self.state = state
        self.username = username
        self.password = password
        self.max_sessions = max_sessions
        self.sessions: dict[str, str] = {}  # session id -> token
        self.lock = threading.Lock()
        self._next = 1

    @property
    def chassis_id(self) -> str:
        return "System.Embedded.1" if self.state.vendor == "dell" else "1"

    @property
    def system_id(self) -> str:
        return "System.Embedded.1" if self.state.vendor == "dell" else "1"

    def psu_id(self, n: int) -> str:
        return f"PSU.Slot.{n}" if self.state.vendor == "dell" else str(n)

    # --- sessions -------------------------------------------------------------------------
    def create_session(self, body: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, str]]:
        if body.get("UserName") != self.username or body.get("Password") != self.password:
            return 401, _error("Base.1.8.NoValidSession", "Invalid username or password"), {}
        with self.lock:
            if len(self.sessions) >= self.max_sessions:
                return 503, _error("Base.1.8.SessionLimitExceeded",
                                   "The maximum number of user sessions is reached"), {}
            sid = str(self._next)
            self._next += 1
            token = secrets.token_hex(16)
            self.sessions[sid] = token
        loc = f"/redfish/v1/SessionService/Sessions/{sid}"
        return 201, {"@odata.id": loc, "Id": sid, "UserName": self.username}, {
            "X-Auth-Token": token, "Location": loc}

    def delete_session(self, sid: str) -> int:
        with self.lock:
            return 204 if self.sessions.pop(sid, None) is not None else 404

    def authorized(self, headers: Any) -> bool:
        token = headers.get("X-Auth-Token")
        if token:
            with self.lock:
                return token in self.sessions.values()
        auth = headers.get("Authorization", "")
        if auth.startswith("Basic "):
            try:
                user, _, pw = base64.b64decode(auth[6:]).decode().partition(":")
            except ValueError:
                return False
            return user == self.username and pw == self.password
        return False

    # --- resources ------------------------------------------------------------------------
    def resource(self, path: str) -> dict[str, Any] | None:
        if self.state.mockup_dir is not None:
            return _static_resource(self.state.mockup_dir, path)
        s = self.state
        c = f"/redfish/v1/Chassis/{self.chassis_id}"
        legacy = s.schema in ("legacy", "both")
        modern = s.schema in ("modern", "both")
        node_w = s.node_power_w()
        healthy = [n for n in range(1, s.psu_count + 1) if n not in s.failed_psus]
        redundant = len(healthy) > s.psu_min_needed
        red_health = "OK" if redundant else "Critical" if len(healthy) < s.psu_min_needed \
            else "Warning"
        vendor = "Dell" if s.vendor == "dell" else "HPE"
        per_psu_w = round(node_w / max(1, len(healthy)), 1)

        def psu_status(n: int) -> dict[str, str]:
            return {"State": "Enabled", "Health": "OK"} if n in healthy else {
                "State": "UnavailableOffline", "Health": "Critical"}

        manager = "/redfish/v1/Managers/" + ("iDRAC.Embedded.1" if s.vendor == "dell" else "1")
        trees: dict[str, dict[str, Any]] = {
            "/redfish/v1": {
                "@odata.id": "/redfish/v1", "@odata.type": "#ServiceRoot.v1_15_0.ServiceRoot",
                "Id": "RootService", "RedfishVersion": "1.17.0", "Vendor": vendor,
                "Product": "Integrated Dell Remote Access Controller" if s.vendor == "dell"
                else "ProLiant DL iLO 6",
                "Chassis": {"@odata.id": "/redfish/v1/Chassis"},
                "Systems": {"@odata.id": "/redfish/v1/Systems"},
                "Managers": {"@odata.id": "/redfish/v1/Managers"},
                "SessionService": {"@odata.id": "/redfish/v1/SessionService"},
                "Links": {"Sessions": {"@odata.id": "/redfish/v1/SessionService/Sessions"}},
            },
            "/redfish/v1/SessionService": {
                "@odata.id": "/redfish/v1/SessionService", "ServiceEnabled": True,
                "Sessions": {"@odata.id": "/redfish/v1/SessionService/Sessions"},
            },
            "/redfish/v1/SessionService/Sessions": _collection(
                "/redfish/v1/SessionService/Sessions",
                [f"/redfish/v1/SessionService/Sessions/{i}" for i in self.sessions]),
            "/redfish/v1/Managers": _collection("/redfish/v1/Managers", [manager]),
            # the BMC itself (DMTF Manager schema); the firmware figures are this emulator's
            manager: {
                "@odata.id": manager, "@odata.type": "#Manager.v1_19_0.Manager",
                "Id": manager.rsplit("/", 1)[-1], "ManagerType": "BMC", "Manufacturer": vendor,
                "Model": "iDRAC9" if s.vendor == "dell" else "iLO 6",
                "FirmwareVersion": "emulator-1.0", "Status": {"State": "Enabled",
                                                              "Health": "OK"},
            },
            "/redfish/v1/Chassis": _collection("/redfish/v1/Chassis", [c]),
            "/redfish/v1/Systems": _collection("/redfish/v1/Systems", [self.system_path]),
            self.system_path: self.system(),
        }
        chassis: dict[str, Any] = {
            "@odata.id": c, "@odata.type": "#Chassis.v1_23_0.Chassis", "Id": self.chassis_id,
            "ChassisType": "RackMount", "Manufacturer": vendor,
            "Model": "PowerEdge XE9680" if s.vendor == "dell" else "ProLiant DL380a Gen11",
            "Status": {"State": "Enabled", "Health": "OK"},
        }
        if legacy:
            chassis["Power"] = {"@odata.id": f"{c}/Power"}
            chassis["Thermal"] = {"@odata.id": f"{c}/Thermal"}
            trees[f"{c}/Power"] = {
                "@odata.id": f"{c}/Power", "@odata.type": "#Power.v1_7_1.Power", "Id": "Power",
                "PowerControl": [{
                    "@odata.id": f"{c}/Power#/PowerControl/0", "MemberId": "0",
                    "Name": "System Power Control", "PowerConsumedWatts": node_w,
                    "PowerCapacityWatts": s.psu_watts * s.psu_min_needed,
                }],
                "PowerSupplies": [{
                    "@odata.id": f"{c}/Power#/PowerSupplies/{n - 1}", "MemberId": self.psu_id(n),
                    "Name": f"PS{n} Status", "PowerCapacityWatts": s.psu_watts,
                    "PowerInputWatts": per_psu_w if n in healthy else 0,
                    "LastPowerOutputWatts": round(per_psu_w * 0.94, 1) if n in healthy else 0,
                    "Status": psu_status(n),
                } for n in range(1, s.psu_count + 1)],
                "Redundancy": [{
                    "@odata.id": f"{c}/Power#/Redundancy/0", "MemberId": "0",
                    "Name": "System Power Redundancy",
                    "Mode": "N+m", "MinNumNeeded": s.psu_min_needed,
                    "MaxNumSupported": s.psu_count,
                    "RedundancySet": [{"@odata.id": f"{c}/Power#/PowerSupplies/{n - 1}"}
                                      for n in range(1, s.psu_count + 1)],
                    "Status": {"State": s.redundancy_state, "Health": red_health},
                }],
            }
            trees[f"{c}/Thermal"] = {
                "@odata.id": f"{c}/Thermal", "@odata.type": "#Thermal.v1_7_0.Thermal",
                "Temperatures": [{
                    "MemberId": "0", "Name": "System Board Inlet Temp",
                    "PhysicalContext": "Intake", "ReadingCelsius": s.inlet_temp_c,
                    "Status": {"State": "Enabled", "Health": "OK"},
                }, {
                    "MemberId": "1", "Name": "System Board Exhaust Temp",
                    "PhysicalContext": "Exhaust", "ReadingCelsius": s.inlet_temp_c + 18,
                    "Status": {"State": "Enabled", "Health": "OK"},
                }],
                "Fans": [{
                    "MemberId": str(i), "Name": f"Fan{i + 1}", "Reading": rpm,
                    "ReadingUnits": "RPM", "Status": {"State": "Enabled", "Health": "OK"},
                } for i, rpm in enumerate(s.fan_rpm)],
            }
        if modern:
            ps = f"{c}/PowerSubsystem"
            chassis["PowerSubsystem"] = {"@odata.id": ps}
            chassis["EnvironmentMetrics"] = {"@odata.id": f"{c}/EnvironmentMetrics"}
            chassis["Sensors"] = {"@odata.id": f"{c}/Sensors"}
            trees[ps] = {
                "@odata.id": ps, "@odata.type": "#PowerSubsystem.v1_1_0.PowerSubsystem",
                "CapacityWatts": s.psu_watts * s.psu_min_needed,
                "PowerSupplies": {"@odata.id": f"{ps}/PowerSupplies"},
                "PowerSupplyRedundancy": [{
                    "RedundancyType": "NPlusM", "MinNeededInGroup": s.psu_min_needed,
                    "MaxSupportedInGroup": s.psu_count,
                    "RedundancyGroup": [{"@odata.id": f"{ps}/PowerSupplies/{self.psu_id(n)}"}
                                        for n in range(1, s.psu_count + 1)],
                    "Status": {"State": s.redundancy_state, "Health": red_health},
                }],
                "Status": {"State": "Enabled", "Health": red_health},
            }
            trees[f"{ps}/PowerSupplies"] = _collection(
                f"{ps}/PowerSupplies",
                [f"{ps}/PowerSupplies/{self.psu_id(n)}" for n in range(1, s.psu_count + 1)])
            for n in range(1, s.psu_count + 1):
                p = f"{ps}/PowerSupplies/{self.psu_id(n)}"
                trees[p] = {
                    "@odata.id": p, "@odata.type": "#PowerSupply.v1_5_0.PowerSupply",
                    "Id": self.psu_id(n), "Name": f"PSU {n}", "PowerCapacityWatts": s.psu_watts,
                    "Status": psu_status(n), "Metrics": {"@odata.id": f"{p}/Metrics"},
                }
                trees[f"{p}/Metrics"] = {
                    "@odata.id": f"{p}/Metrics",
                    "InputPowerWatts": {"Reading": per_psu_w if n in healthy else 0},
                }
            trees[f"{c}/EnvironmentMetrics"] = {
                "@odata.id": f"{c}/EnvironmentMetrics",
                "@odata.type": "#EnvironmentMetrics.v1_3_0.EnvironmentMetrics",
                "PowerWatts": {"Reading": node_w, "DataSourceUri": f"{c}/Sensors/PowerTotal"},
            }
            sensors = {
                "PowerTotal": {"ReadingType": "Power", "Reading": node_w, "ReadingUnits": "W",
                               "PhysicalContext": "Chassis", "Name": "Total Power"},
                "InletTemp": {"ReadingType": "Temperature", "Reading": s.inlet_temp_c,
                              "ReadingUnits": "Cel", "PhysicalContext": "Intake",
                              "Name": "Inlet Temperature"},
            }
            for i, rpm in enumerate(s.fan_rpm):
                sensors[f"Fan{i + 1}"] = {"ReadingType": "Rotational", "Reading": rpm,
                                          "ReadingUnits": "RPM", "PhysicalContext": "Fan",
                                          "Name": f"Fan {i + 1}"}
            trees[f"{c}/Sensors"] = _collection(f"{c}/Sensors",
                                                [f"{c}/Sensors/{k}" for k in sensors])
            for k, v in sensors.items():
                trees[f"{c}/Sensors/{k}"] = {"@odata.id": f"{c}/Sensors/{k}", "Id": k,
                                             "@odata.type": "#Sensor.v1_7_0.Sensor", **v}
        trees[c] = chassis
        return trees.get(path.rstrip("/") or "/")


    @property
    def system_path(self) -> str:
        return f"/redfish/v1/Systems/{self.system_id}"

    def system(self) -> dict[str, Any]:
        """The host as a ComputerSystem: its power state and the reset action."""
        s = self.state
        return {
            "@odata.id": self.system_path, "@odata.type": "#ComputerSystem.v1_20_0.ComputerSystem",
            "Id": self.system_id, "Name": "System", "SystemType": "Physical",
            "Manufacturer": "Dell Inc." if s.vendor == "dell" else "HPE",
            **({"HostName": s.host_name} if s.host_name else {}),
            "PowerState": s.power_state,
            "Status": {"State": "Enabled" if s.power_state == "On" else "StandbyOffline",
                       "Health": "OK"},
            "Links": {"Chassis": [{"@odata.id": f"/redfish/v1/Chassis/{self.chassis_id}"}]},
            "Actions": {"#ComputerSystem.Reset": {
                "target": f"{self.system_path}/Actions/ComputerSystem.Reset",
                "ResetType@Redfish.AllowableValues": list(RESET_TYPES)}},
        }

    def reset(self, body: Any) -> tuple[int, dict[str, Any] | None]:
        """POST to the reset target: 204 once the host was asked; a ResetType this BMC does
        not offer is a 400 with a Redfish error body, as is a body without one."""
        reset_type = body.get("ResetType") if isinstance(body, dict) else None
        if reset_type is None:
            return 400, _error("Base.1.8.ActionParameterMissing",
                               "The action ComputerSystem.Reset requires the parameter "
                               "ResetType to be present in the request body.")
        if reset_type not in RESET_TYPES:
            return 400, _error("Base.1.8.ActionParameterNotSupported",
                               f"The parameter ResetType for the action ComputerSystem.Reset "
                               f"is not supported on the target resource: {reset_type!r} is "
                               f"not one of {', '.join(RESET_TYPES)}.")
        s = self.state
        if (reset_type == "On") == (s.power_state == "On") and reset_type in (
                "On", "ForceOff", "GracefulShutdown"):
            return 204, None  # already there: nothing to do
        if s.reset_handler is not None and s.reset_delay_s > 0:
            timer = threading.Timer(s.reset_delay_s, _run_logged, (s.reset_handler, reset_type))
            timer.daemon = True
            timer.start()
        elif s.reset_handler is not None:
            try:
                s.reset_handler(reset_type)
            except OSError as exc:
                return 500, _error("Base.1.8.InternalError", f"the host did not take the "
                                   f"reset: {exc}")
        with self.lock:
            s.resets.append(reset_type)
            s.power_state = "Off" if reset_type in ("ForceOff", "GracefulShutdown") else "On"
        LOG.info("ComputerSystem.Reset %s", reset_type)
        return 204, None


def _run_logged(handler: ResetHandler, reset_type: str) -> None:
    try:
        handler(reset_type)
    except OSError as exc:
        LOG.error("ComputerSystem.Reset %s: the host did not take it: %s", reset_type, exc)


def _static_resource(root: Path, path: str) -> dict[str, Any] | None:
    """``/redfish/v1/A/B`` -> ``root/A/B/index.json`` (the layout of DMTF's mockups); None for
    anything outside the tree or not a JSON object."""
    prefix = "/redfish/v1"
    if path != prefix and not path.startswith(prefix + "/"):
        return None
    parts = [p for p in path[len(prefix):].split("/") if p]
    if any(p in (".", "..") or "\\" in p for p in parts):
        return None
    file = root.joinpath(*parts, "index.json")
    try:
        body = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) else None


def _collection(odata_id: str, members: list[str]) -> dict[str, Any]:
    return {"@odata.id": odata_id, "Members@odata.count": len(members),
            "Members": [{"@odata.id": m} for m in members]}


def _error(message_id: str, message: str) -> dict[str, Any]:
    return {"error": {"code": message_id, "message": message,
                      "@Message.ExtendedInfo": [{"MessageId": message_id, "Message": message}]}}


class _BmcHandler(BaseHTTPRequestHandler):
    """Redfish over HTTP for one emulated BMC; ``make_handler`` binds ``bmc``."""

    server_version = "nodegate-bmc-emulator"
    protocol_version = "HTTP/1.1"
    # Headers and body leave in two writes; with Nagle on, a keep-alive client's delayed ACK
    # held every second write for ~40 ms (63 reads of a mockup took 2.7 s instead of 0.1 s).
    disable_nagle_algorithm = True
    bmc: RedfishBmc

    def log_message(self, fmt: str, *args: Any) -> None:
        LOG.debug("%s %s", self.address_string(), fmt % args)  # never headers or bodies

    def _send(self, code: int, body: dict[str, Any] | None,
              headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("OData-Version", "4.0")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if data:
            self.wfile.write(data)

    def _path(self) -> str:
        return self.path.split("?", 1)[0].rstrip("/") or "/"

    def do_GET(self) -> None:
        path = self._path()
        if path not in ("/redfish", "/redfish/v1") and not self.bmc.authorized(self.headers):
            self._send(401, _error("Base.1.8.NoValidSession", "authentication required"),
                       {"WWW-Authenticate": 'Basic realm="nodegate"'})
            return
        if path == "/redfish":
            self._send(200, {"v1": "/redfish/v1/"})
            return
        body = self.bmc.resource(path)
        if body is None:
            self._send(404, _error("Base.1.8.ResourceMissingAtURI", f"{path} not found"))
        else:
            self._send(200, body)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b"{}"
        path = self._path()
        reset = (self.bmc.state.mockup_dir is None
                 and path == f"{self.bmc.system_path}/Actions/ComputerSystem.Reset")
        if path != "/redfish/v1/SessionService/Sessions" and not reset:
            self._send(405, _error("Base.1.8.OperationNotAllowed", "POST not allowed"))
            return
        if reset and not self.bmc.authorized(self.headers):
            self._send(401, _error("Base.1.8.NoValidSession", "authentication required"),
                       {"WWW-Authenticate": 'Basic realm="nodegate"'})
            return
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._send(400, _error("Base.1.8.MalformedJSON", "malformed JSON"))
            return
        if reset:
            code, payload = self.bmc.reset(body)
            self._send(code, payload)
            return
        code, payload, headers = self.bmc.create_session(body if isinstance(body, dict) else {})
        self._send(code, payload, headers)

    def do_DELETE(self) -> None:
        path = self._path()
        prefix = "/redfish/v1/SessionService/Sessions/"
        if not path.startswith(prefix) or not self.bmc.authorized(self.headers):
            self._send(401, _error("Base.1.8.NoValidSession", "authentication required"))
            return
        code = self.bmc.delete_session(path[len(prefix):])
        self._send(code, None)


def make_handler(bmc: RedfishBmc) -> type[BaseHTTPRequestHandler]:
    """A handler class bound to ``bmc``: the server makes one handler object per request."""
    return type("Handler", (_BmcHandler,), {"bmc": bmc})


def serve(
    listen: tuple[str, int], state: BmcState, username: str, password: str, *,
    max_sessions: int = 8, tls_cert: str | None = None, tls_key: str | None = None,
) -> ThreadingHTTPServer:
    """Start the server (not yet serving); call ``serve_forever`` or run it in a thread."""
    bmc = RedfishBmc(state, username, password, max_sessions)
    server = ThreadingHTTPServer(listen, make_handler(bmc))
    server.daemon_threads = True
    if tls_cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(tls_cert, tls_key)
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    server.bmc = bmc  # type: ignore[attr-defined]
    return server


def _read_password(args: argparse.Namespace) -> str:
    from nodegate.power.credentials import SecretRef

    if args.password_file:
        return SecretRef("file", args.password_file).resolve(key="--password-file")
    return SecretRef("env", args.password_env).resolve(key="--password-env")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nodegate_lab.bmc_emulator",
                                     description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--listen", default="127.0.0.1:8000",
                        help="HOST:PORT (default %(default)s)")
    parser.add_argument("--vendor", choices=("dell", "hpe"), default="dell")
    parser.add_argument("--schema", choices=("legacy", "modern", "both"), default="both")
    parser.add_argument("--mockup", metavar="DIR",
                        help="serve a static DMTF mockup tree (DIR/index.json is /redfish/v1) "
                             "instead of the built-in chassis")
    parser.add_argument("--username", default="root")
    parser.add_argument("--password-env", default="NODEGATE_BMC_PASSWORD",
                        help="environment variable holding the password (default %(default)s)")
    parser.add_argument("--password-file", help="0600 file holding the password")
    parser.add_argument("--base-power-w", type=float, default=1200.0,
                        help="node power beyond the GPUs (CPUs, fans, NICs), W")
    parser.add_argument("--psu-count", type=int, default=6)
    parser.add_argument("--psu-watts", type=float, default=3000.0)
    parser.add_argument("--psu-min-needed", type=int, default=3)
    parser.add_argument("--failed-psu", type=int, action="append", default=[])
    parser.add_argument("--inlet-temp-c", type=float, default=24.0)
    parser.add_argument("--max-sessions", type=int, default=8)
    parser.add_argument("--tls-cert")
    parser.add_argument("--tls-key")
    parser.add_argument("--host-name", help="the system's HostName (the node it powers)")
    parser.add_argument("--host-dir", type=Path,
                        help="the lab host this BMC powers: ComputerSystem.Reset restarts it "
                             "through its supervisor (nodegate_lab.supervisor)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    host, _, port = args.listen.rpartition(":")
    from nodegate.errors import NodegateError

    try:
        password = _read_password(args)
    except NodegateError as exc:
        print(f"bmc_emulator: error: {exc}", file=sys.stderr)
        return 2
    state = BmcState(vendor=args.vendor, base_power_w=args.base_power_w,
                     psu_count=args.psu_count, psu_watts=args.psu_watts,
                     psu_min_needed=args.psu_min_needed, failed_psus=set(args.failed_psu),
                     inlet_temp_c=args.inlet_temp_c, schema=args.schema,
                     mockup_dir=Path(args.mockup) if args.mockup else None,
                     host_name=args.host_name)
    if args.host_dir is not None:
        from nodegate_lab.supervisor import request_reset

        host_dir: Path = args.host_dir
        state.reset_handler = lambda reset_type: request_reset(host_dir, reset_type)
        state.reset_delay_s = 0.5
    if state.mockup_dir is not None and not (state.mockup_dir / "index.json").is_file():
        print(f"bmc_emulator: error: --mockup {args.mockup}: no index.json (service root) there",
              file=sys.stderr)
        return 2
    if args.tls_cert and not Path(args.tls_cert).is_file():
        print(f"bmc_emulator: error: {args.tls_cert}: no such file", file=sys.stderr)
        return 2
    server = serve((host or "127.0.0.1", int(port)), state, args.username, password,
                   max_sessions=args.max_sessions, tls_cert=args.tls_cert, tls_key=args.tls_key)
    LOG.info("Redfish BMC emulator (%s) on %s://%s:%s", args.vendor,
             "https" if args.tls_cert else "http", host, server.server_address[1])
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
