"""Constants and helpers shared by the power tests (fixtures live in conftest.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
V3_USER = "nodegate"
V3_AUTH = "auth-Secret-9f3a"
V3_PRIV = "priv-Secret-71c2"
BMC_PASSWORD = "bmc-Secret-e4d1"
COMMUNITY_SECRET = "comm-Secret-5b8e"


def free_port(kind: int = socket.SOCK_DGRAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_cli(*args: str, env: dict[str, str] | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The real ``nodegate`` entry point in a child process, secrets only in its environment."""
    return subprocess.run(
        [sys.executable, "-c", "import sys; from nodegate.cli import main; sys.exit(main())",
         *args],
        env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=timeout,
        check=False)


ALL_SECRETS = (V3_AUTH, V3_PRIV, BMC_PASSWORD, COMMUNITY_SECRET)


def assert_no_secrets(*outputs: str) -> None:
    for out in outputs:
        for secret in ALL_SECRETS:
            assert secret not in out, f"secret leaked into output: {out[:200]!r}"


def apc_raw(oid: str) -> int:
    """A value straight from the shipped AP8641 recording (reference without net-snmp)."""
    import snmpsim_data

    path = Path(snmpsim_data.__file__).parent / "data" / "UPS" / "apc-8641.snmprec"
    for line in path.read_text().splitlines():
        name, _, rest = line.partition("|")
        if name == oid:
            return int(rest.split("|")[1])
    raise KeyError(oid)
