"""Canary secrets, referenced the supported ways, appear in no output and no file a run writes.

Each canary is a value only a secret store holds (an environment variable or a 0600 file). The
runs are the operator's: ``pyinfra inventory.py debug-inventory`` on a site and on an Ansible
inventory that reference them, and ``nodegate power read`` against devices that do not answer
(a short timeout), which resolves every reference and prints errors about each device.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

CANARIES = {
    "NODEGATE_CANARY_BMC": "canary-bmc-7Qx2",
    "NODEGATE_CANARY_COMMUNITY": "canary-comm-9Wz4",
    "NODEGATE_CANARY_AUTH": "canary-auth-3Rt8",
}
FILE_CANARY = "canary-file-5Kp1"


def _closed_port() -> int:
    """A local UDP/TCP port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def store(tmp_path: Path) -> dict[str, str]:
    """Secrets where the operator keeps them, and a HOME/TMPDIR inside tmp_path so any file
    the run writes (logs, caches, ansible's tmp) is searched too."""
    secret = tmp_path / "secrets" / "bmc.pw"
    secret.parent.mkdir()
    secret.write_text(FILE_CANARY + "\n")
    secret.chmod(0o600)
    for sub in ("home", "tmp", "out"):
        (tmp_path / sub).mkdir()
    return {**CANARIES, "HOME": str(tmp_path / "home"), "TMPDIR": str(tmp_path / "tmp"),
            "SECRET_FILE": str(secret)}


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> str:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=180,
                          env={**os.environ, **env}, check=False)
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    return f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"


def _assert_nowhere(outputs: list[str], tmp_path: Path, inputs: tuple[Path, ...] = ()) -> None:
    canaries = [*CANARIES.values(), FILE_CANARY]
    for text in outputs:
        for canary in canaries:
            assert canary not in text, (canary, text[-2000:])
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p.name != "bmc.pw"
               and p not in inputs]
    for path in written:
        data = path.read_bytes()
        for canary in canaries:
            assert canary.encode() not in data, (canary, path)


def test_canaries_reach_no_output_and_no_file(tmp_path: Path, store: dict[str, str]) -> None:
    bin_dir = Path(sys.executable).parent
    site = tmp_path / "canary-site.yaml"
    site.write_text(
        "schema: nodegate.site/1\nname: canary\nhosts:\n  n1:\n    address: 10.9.0.1\n"
        "    profile: xe9680-h100\n"
        "    bmc: {url: 'https://10.9.1.1', model: idrac9, username: root, "
        f"password_env: NODEGATE_CANARY_BMC, password_file: {store['SECRET_FILE']}}}\n"
        "    pdus:\n"
        "      - {name: a, url: 'snmp://10.9.2.1?community=env:NODEGATE_CANARY_COMMUNITY', "
        "model: apc-rpdu2, community_env: NODEGATE_CANARY_COMMUNITY}\n"
        "      - {name: b, url: 'snmpv3://10.9.2.2', model: raritan-pdu2, "
        "username_env: NODEGATE_CANARY_AUTH, auth_password_env: NODEGATE_CANARY_AUTH, "
        f"priv_password_file: {store['SECRET_FILE']}}}\n")
    ansible = tmp_path / "ansible"
    (ansible / "host_vars").mkdir(parents=True)
    (ansible / "fleet.ini").write_text("[slurm-node]\ngpu01 ansible_host=10.9.0.2\n")
    (ansible / "host_vars" / "gpu01.yml").write_text(
        "nodegate_profile: xe9680-h100\n"
        "nodegate_bmc: {url: 'https://10.9.1.2', password_env: NODEGATE_CANARY_BMC}\n")
    pyinfra = [str(bin_dir / "pyinfra"), "inventory.py", "debug-inventory"]
    port = _closed_port()
    outputs = [
        _run(pyinfra, {**store, "NODEGATE_SITE": str(site)}, ROOT),
        _run(pyinfra, {**store, "NODEGATE_ANSIBLE_INVENTORY": str(ansible / "fleet.ini")}, ROOT),
        _run([sys.executable, "-m", "nodegate.cli", "power", "read",
              "--pdu", f"snmp://127.0.0.1:{port}?community=env:NODEGATE_CANARY_COMMUNITY",
              "--pdu", f"snmpv3://ops@127.0.0.1:{port}?auth_key=env:NODEGATE_CANARY_AUTH"
                       f"&priv_key=file:{store['SECRET_FILE']}",
              "--model", "apc-rpdu2", "--bmc", f"https://root@127.0.0.1:{port}",
              "--bmc-password", "env:NODEGATE_CANARY_BMC", "--timeout", "0.2",
              "--retries", "0", "--json"], store, tmp_path / "out"),
    ]
    assert outputs[0].startswith("exit 0") and "[n1]" in outputs[0]
    assert "NODEGATE_CANARY_BMC" in outputs[0]  # the reference is shown, never its value
    assert outputs[1].startswith("exit 0") and "[gpu01]" in outputs[1]
    assert outputs[2].startswith("exit 3"), outputs[2]  # every device down: could not measure
    _assert_nowhere(outputs, tmp_path)


def test_a_literal_canary_in_a_site_url_is_refused_unprinted(tmp_path: Path,
                                                              store: dict[str, str]) -> None:
    site = tmp_path / "s.yaml"
    site.write_text("schema: nodegate.site/1\nname: s\nhosts:\n  n1:\n    address: 10.9.0.1\n"
                    f"    bmc: {{url: 'https://bmc/?password={FILE_CANARY}', model: idrac9}}\n")
    out = _run([str(Path(sys.executable).parent / "pyinfra"), "inventory.py",
                "debug-inventory"], {**store, "NODEGATE_SITE": str(site)}, ROOT)
    assert out.startswith("exit 2") and "hosts.n1.bmc.url" in out
    _assert_nowhere([out], tmp_path, inputs=(site,))
