"""Lab services on the uplink: the package mirror, the PDU (snmpsim) and one BMC per node.

Each is a detached process bound to one lab address (never 0.0.0.0), with a pid file under
``lab_dir()/services`` so ``lab down`` stops exactly what ``lab up`` started. Their secrets
(BMC password, PDU community) are made per lab, kept 0600 in ``lab_dir()/lab.env`` and
referenced from the site file by variable name only.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from nodegate_lab import config
from nodegate_lab.config import Member
from nodegate_lab.proc import run, source_env

BMC_USER = "root"
BMC_USER_ENV = "NODEGATE_LAB_BMC_USER"
BMC_PASSWORD_ENV = "NODEGATE_LAB_BMC_PASSWORD"
PDU_COMMUNITY_ENV = "NODEGATE_LAB_PDU_COMMUNITY"
#: snmpsim-data's recording of a real APC rack PDU (AP8641: metered-by-outlet, rPDU2 MIB).
PDU_RECORDING = "UPS/apc-8641.snmprec"
BMC_BASE_POWER_W = 1200.0


@dataclass
class ServiceStatus:
    name: str
    address: str
    state: str
    detail: str


def _dir() -> Path:
    return config.lab_dir() / "services"


def _pid(name: str) -> int | None:
    try:
        pid = int((_dir() / f"{name}.pid").read_text())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def _listening(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=0.5):
            return True
    except OSError:
        return False


def _start(name: str, argv: list[str], env: dict[str, str] | None = None) -> bool:
    """Start ``argv`` detached unless ``name`` runs; True if it was started now."""
    if _pid(name) is not None:
        return False
    _dir().mkdir(parents=True, exist_ok=True)
    with (_dir() / f"{name}.log").open("ab") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                env=source_env(env), start_new_session=True)
    (_dir() / f"{name}.pid").write_text(f"{proc.pid}\n")
    return True


def _wait_tcp(name: str, address: str, port: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not _listening(address, port):
        if time.monotonic() > deadline or _pid(name) is None:
            return  # status shows it stopped; the log says why
        time.sleep(0.05)


# --- secrets ------------------------------------------------------------------------------

def env_file() -> Path:
    """``set -a; . /var/lib/nodegate-lab/lab.env`` gives a shell the lab's credentials."""
    return config.lab_dir() / "lab.env"


def lab_secrets() -> dict[str, str]:
    """The lab's BMC and PDU credentials (made once per lab dir, 0600)."""
    path = env_file()
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        values = {BMC_USER_ENV: BMC_USER, BMC_PASSWORD_ENV: secrets.token_urlsafe(12),
                  PDU_COMMUNITY_ENV: "lab-" + secrets.token_hex(6)}
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write("# nodegate lab credentials (made by `lab up`; `set -a; . THIS`)\n")
            fh.writelines(f"{k}={v}\n" for k, v in values.items())
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not key.startswith("#"):
            out[key.strip()] = value.strip()
    return out


# --- mirror -------------------------------------------------------------------------------

def start_mirror(directory: Path) -> None:
    """Serve ``directory`` over HTTP on the uplink address."""
    current = _dir() / "mirror.dir"
    if _pid("mirror") is not None and current.is_file() and \
            current.read_text().strip() != str(directory):
        stop("mirror")  # a rebuilt mirror (new key): serve the new one
    if _start("mirror", [sys.executable, "-m", "http.server", "--bind", config.HOST_ADDRESS,
                         "--directory", str(directory), str(config.MIRROR_PORT)]):
        current.write_text(f"{directory}\n")
        _wait_tcp("mirror", config.HOST_ADDRESS, config.MIRROR_PORT)


# --- PDU ----------------------------------------------------------------------------------

def pdu_available() -> bool:
    """snmpsim and its data (pip: snmpsim, snmpsim-data) importable by this interpreter."""
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("snmpsim", "snmpsim_data"))


def start_pdu() -> bool:
    """snmpsim serving the real APC recording on the PDU address; False when not installed."""
    if not pdu_available():
        return False
    if _pid("pdu") is not None:
        return True
    import importlib.util

    spec = importlib.util.find_spec("snmpsim_data")
    assert spec is not None and spec.origin is not None
    recording = Path(spec.origin).parent / "data" / PDU_RECORDING
    data = _dir() / "pdu-data"
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    # snmpsim: the community string is the recording's file name
    shutil.copyfile(recording, data / f"{lab_secrets()[PDU_COMMUNITY_ENV]}.snmprec")
    _start("pdu", [sys.executable, "-m", "nodegate_lab.pdu_agent", f"--data-dir={data}",
                   f"--cache-dir={_dir() / 'pdu-cache'}",
                   f"--agent-udpv4-endpoint={config.PDU_ADDRESS}:{config.PDU_PORT}"])
    return True


def _pdu_answers(timeout_s: float = 0.0) -> bool:
    """One SNMP GET of sysDescr with the lab community (pysnmp through nodegate.power)."""
    import asyncio

    try:
        from nodegate.power.snmp import SnmpSession, SnmpTarget
    except ImportError:
        return False

    community = lab_secrets()[PDU_COMMUNITY_ENV]

    async def probe() -> bool:
        target = SnmpTarget(config.PDU_ADDRESS, config.PDU_PORT, community=community,
                            timeout_s=0.5, retries=0)
        try:
            async with SnmpSession(target) as session:
                await session.get(["1.3.6.1.2.1.1.1.0"])
        except Exception:
            return False
        return True

    deadline = time.monotonic() + timeout_s
    while True:
        if asyncio.run(probe()):
            return True
        if time.monotonic() >= deadline or _pid("pdu") is None:
            return False
        time.sleep(0.3)


def wait_pdu(timeout_s: float = 20.0) -> bool:
    return _pid("pdu") is not None and _pdu_answers(timeout_s)


# --- BMCs ---------------------------------------------------------------------------------

def bmc_ca_path() -> Path:
    """The lab CA's certificate, which BMC clients verify with.

    Its directory is bound read-only into every node at the same path, so one ``ca_bundle``
    in the site file is right both here and on a node (the pdu_monitor role's poller).
    """
    return config.lab_dir() / "pki" / "bmc-ca.pem"


def _openssl(*args: str) -> None:
    run(["openssl", *args])


def _tls_pair() -> tuple[Path, Path]:
    """The BMCs' certificate and key, issued by a lab CA made once per lab dir.

    TLS verification stays on: the certificate names every BMC address (IP SANs) and the
    site file's ``ca_bundle`` is the CA. The CA key stays 0600 in the services dir.
    """
    ca, ca_key = bmc_ca_path(), _dir() / "bmc-ca-key.pem"
    cert, key = _dir() / "bmc-tls-cert.pem", _dir() / "bmc-tls-key.pem"
    _dir().mkdir(parents=True, exist_ok=True)
    for legacy in ("bmc-cert.pem", "bmc-key.pem"):  # the self-signed pair of earlier labs
        (_dir() / legacy).unlink(missing_ok=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    if not ca.is_file() or not ca_key.is_file():
        ca.parent.mkdir(parents=True, exist_ok=True)
        _openssl("req", "-x509", *ec, "-days", "3650", "-subj", "/CN=nodegate lab BMC CA",
                 "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign",
                 "-keyout", str(ca_key), "-out", str(ca))
        ca_key.chmod(0o600)
        ca.chmod(0o644)
        cert.unlink(missing_ok=True)  # issued by a CA that no longer exists
    if not cert.is_file() or not key.is_file():
        san = ",".join(f"IP:{config.node(i).bmc_address}"
                       for i in range(1, config.MAX_NODES + 1))
        csr, ext = _dir() / "bmc-tls.csr", _dir() / "bmc-tls.ext"
        ext.write_text("basicConstraints=critical,CA:FALSE\n"
                       "keyUsage=critical,digitalSignature\n"
                       "extendedKeyUsage=serverAuth\n"
                       f"subjectAltName={san}\n"
                       "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n")
        _openssl("req", "-new", *ec, "-subj", "/CN=nodegate-lab-bmc", "-keyout", str(key),
                 "-out", str(csr))
        key.chmod(0o600)
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
                 "-set_serial", str(int.from_bytes(os.urandom(8), "big")), "-days", "825",
                 "-extfile", str(ext), "-out", str(cert))
        csr.unlink()
        ext.unlink()
    return cert, key


def start_bmc(member: Member, lib_dir: Path, board_dir: Path) -> bool:
    """The node's Redfish BMC (nodegate_lab.bmc_emulator); power follows its board."""
    name = f"bmc-{member.name}"
    if _pid(name) is not None:
        return True
    cert, key = _tls_pair()
    creds = lab_secrets()
    # the emulator reads GPU power through pynvml: point it at this node's simulated board
    env = {"LD_LIBRARY_PATH": str(lib_dir), "NODEGATE_SIM_DIR": str(board_dir),
           BMC_PASSWORD_ENV: creds[BMC_PASSWORD_ENV]}
    _start(name, [sys.executable, "-m", "nodegate_lab.bmc_emulator",
                  "--listen", f"{member.bmc_address}:{config.BMC_PORT}", "--vendor", "dell",
                  "--username", creds[BMC_USER_ENV], "--password-env", BMC_PASSWORD_ENV,
                  "--base-power-w", str(BMC_BASE_POWER_W), "--psu-count", "2",
                  "--psu-watts", "3000", "--psu-min-needed", "1",
                  "--tls-cert", str(cert), "--tls-key", str(key),
                  # ComputerSystem.Reset restarts this host through its supervisor
                  "--host-dir", str(member.dir),
                  # Systems HostName: the node's name, as its OS reports it to a real BMC
                  "--host-name", member.name], env)
    return True


def wait_bmcs(members: list[Member], timeout_s: float = 10.0) -> None:
    for member in members:
        _wait_tcp(f"bmc-{member.name}", member.bmc_address, config.BMC_PORT, timeout_s)


# --- teardown and status --------------------------------------------------------------------

def stop(name: str) -> None:
    """SIGTERM the service, SIGKILL after 5 s; forget its pid file."""
    pid = _pid(name)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while _pid(name) is not None and time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            time.sleep(0.05)
        if _pid(name) is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    (_dir() / f"{name}.pid").unlink(missing_ok=True)


def stop_all() -> None:
    """Stop every service the lab started."""
    if not _dir().is_dir():
        return
    for pid_file in sorted(_dir().glob("*.pid")):
        stop(pid_file.stem)


def status(nodes: list[Member]) -> list[ServiceStatus]:
    """Mirror, PDU and each node's BMC: running (and answering) or why not."""
    rows = []
    mirror_dir = _dir() / "mirror.dir"
    up = _pid("mirror") is not None and _listening(config.HOST_ADDRESS, config.MIRROR_PORT)
    detail = (f"apt: deb [trusted=yes] http://{config.HOST_ADDRESS}:{config.MIRROR_PORT}/ ./; "
              f"pip: --find-links http://{config.HOST_ADDRESS}:{config.MIRROR_PORT}/wheels/"
              if mirror_dir.is_file() else "not built (lab up --no-mirror)")
    rows.append(ServiceStatus("mirror", f"{config.HOST_ADDRESS}:{config.MIRROR_PORT}",
                              "running" if up else "stopped", detail))
    pdu_addr = f"{config.PDU_ADDRESS}:{config.PDU_PORT}/udp"
    if not pdu_available():
        rows.append(ServiceStatus("pdu", pdu_addr, "absent",
                                  "pip install snmpsim snmpsim-data (the dev extra)"))
    else:
        answering = _pid("pdu") is not None and _pdu_answers()
        rows.append(ServiceStatus(
            "pdu", pdu_addr, "running" if answering else "stopped",
            f"snmpsim: real APC AP8641 recording (snmpsim-data {PDU_RECORDING}); "
            f"outlet N = nodeN; community in ${PDU_COMMUNITY_ENV}"))
    for member in nodes:
        name = f"bmc-{member.name}"
        addr = f"{member.bmc_address}:{config.BMC_PORT}"
        running = _pid(name) is not None and _listening(member.bmc_address, config.BMC_PORT)
        rows.append(ServiceStatus(name, addr, "running" if running else "stopped",
                                  f"Redfish (https, lab CA {bmc_ca_path()}) for "
                                  f"{member.name}; power follows its board"))
    return rows
