"""A real Slurm 22.05 cluster on localhost for the gate tests.

One munged and one slurmctld, plus one ``slurmd -N <name>`` per fake node (all on 127.0.0.1,
each on its own port), so nodes register and go idle as real ones do. Everything lives in a
temporary directory with its own munge socket and free ports, so it cannot collide with a
system Slurm or the lab's. Recipe: proctrack/linuxproc and task/none (no cgroups needed),
select/cons_tres, GPU gres backed by char devices made with mknod.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nodegate.cluster.slurm import RetryPolicy, SlurmScheduler

NODES = ("ng1", "ng2", "ng3", "ng4", "ng5", "ng6")
MESSAGE_TIMEOUT = 3
QUAD = "quad"
BINARIES = ("munged", "slurmctld", "slurmd", "scontrol", "sinfo")


def _free_ports(count: int) -> list[int]:
    sockets = []
    for _ in range(count):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sockets.append(sock)
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


@dataclass
class SlurmCluster:
    base: Path
    conf: Path
    env: dict[str, str]
    nodes: tuple[str, ...]
    ctld_port: int

    def scheduler(self, **kwargs: object) -> SlurmScheduler:
        retry = kwargs.pop("retry", RetryPolicy(attempts=2, initial_delay_s=0.2))
        return SlurmScheduler(conf=self.conf, retry=retry, **kwargs)  # type: ignore[arg-type]

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True,
                              timeout=60, check=check)

    def sinfo(self, node: str) -> tuple[str, str]:
        """(state, reason) as an operator reads them: ``sinfo -n NODE -o '%T|%E'``."""
        out = self.run("sinfo", "-N", "-h", "-n", node, "-o", "%T|%E").stdout
        state, _, reason = out.splitlines()[0].partition("|")
        return state.strip(), reason.strip()

    def reset(self, node: str) -> None:
        """Back to idle, whatever a previous test left."""
        self.run("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)
        self.wait_state(node, "idle")

    def wait_state(self, node: str, wanted: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            state = self.sinfo(node)[0]
            if state == wanted:
                return
            time.sleep(0.3)
        raise AssertionError(f"{node} is {state!r}, wanted {wanted!r}")

    def _pid(self, name: str) -> int | None:
        try:
            return int((self.base / f"{name}.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def stop_controller(self) -> None:
        pid = self._pid("slurmctld")
        if pid is not None:
            _stop_all([pid])

    def start_controller(self) -> None:
        self.run("slurmctld")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.run("scontrol", "ping", check=False).returncode == 0:
                return
            time.sleep(0.3)
        raise AssertionError("slurmctld did not come back: " + self.log("slurmctld"))

    def log(self, name: str) -> str:
        path = self.base / "log" / f"{name}.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else "(no log)"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _stop_all(pids: list[int], timeout: float = 10.0) -> None:
    """SIGTERM the daemons we started (by pid), together; SIGKILL what outlives ``timeout``."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while any(map(_alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in filter(_alive, pids):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _write_conf(base: Path, ctld_port: int, node_ports: list[int]) -> Path:
    devices = base / "dev"
    devices.mkdir()
    for index in range(8):  # 8 GPUs per node, as on an HGX board (NVIDIA's major is 195)
        os.mknod(devices / f"nvidia{index}", 0o600 | 0o020000, os.makedev(195, index))
    (base / "gres.conf").write_text(f"Name=gpu File={devices}/nvidia[0-7]\n")
    lines = [
        "ClusterName=nodegate-test",
        "SlurmctldHost=localhost(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={base}/munge.socket",
        f"StateSaveLocation={base}/state",
        f"SlurmdSpoolDir={base}/spool/%n",
        f"SlurmctldPidFile={base}/slurmctld.pid",
        f"SlurmdPidFile={base}/slurmd-%n.pid",
        f"SlurmctldLogFile={base}/log/slurmctld.log",
        f"SlurmdLogFile={base}/log/slurmd-%n.log",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "MpiDefault=none",
        "ReturnToService=2",
        "SlurmdTimeout=60",
        f"MessageTimeout={MESSAGE_TIMEOUT}",  # a client gives up on a dead controller in ~this
        "GresTypes=gpu",
    ]
    for name, port in zip(NODES, node_ports, strict=True):
        lines.append(f"NodeName={name} NodeAddr=127.0.0.1 Port={port} CPUs=1 RealMemory=500 "
                     "Gres=gpu:8 State=UNKNOWN")
    lines.append(f"PartitionName=gpu Nodes={','.join(NODES)} Default=YES State=UP")
    # a second, smaller partition over the first four nodes (the drain budget's 3-of-4 test)
    lines.append(f"PartitionName={QUAD} Nodes={','.join(NODES[:4])} Default=NO State=UP")
    conf = base / "slurm.conf"
    conf.write_text("\n".join(lines) + "\n")
    return conf


@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    missing = [name for name in BINARIES if shutil.which(name) is None
               and not Path("/usr/sbin", name).exists()]
    if missing:
        pytest.skip(f"Slurm/munge not installed (missing {', '.join(missing)}); "
                    "apt-get install -y $(cat src/nodegate/cluster/host-packages.txt)")
    if os.geteuid() != 0:
        pytest.skip("the test Slurm runs its daemons as root (SlurmUser=root, mknod)")
    base = tmp_path_factory.mktemp("slurm")
    for sub in ("state", "log", *(f"spool/{n}" for n in NODES)):
        (base / sub).mkdir(parents=True)
    ports = _free_ports(1 + len(NODES))
    conf = _write_conf(base, ports[0], ports[1:])
    key = base / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    env = {**os.environ, "SLURM_CONF": str(conf),
           "PATH": f"/usr/sbin:/usr/bin:{os.environ.get('PATH', '')}"}
    cluster = SlurmCluster(base, conf, env, NODES, ports[0])
    try:
        cluster.run("munged", f"--socket={base}/munge.socket", f"--key-file={key}",
                    f"--pid-file={base}/munged.pid", f"--log-file={base}/log/munged.log",
                    f"--seed-file={base}/munge.seed", "--force")
        cluster.run("slurmctld", "-i")
        for name in NODES:
            cluster.run("slurmd", "-N", name)
        for name in NODES:
            cluster.wait_state(name, "idle")
        yield cluster
    except subprocess.CalledProcessError as exc:
        pytest.fail(f"could not start the test Slurm: {exc.cmd}: {exc.stderr}\n"
                    + cluster.log("slurmctld"))
    finally:
        daemons = [*(f"slurmd-{n}" for n in NODES), "slurmctld"]
        _stop_all([pid for pid in map(cluster._pid, daemons) if pid is not None])
        _stop_all([pid for pid in [cluster._pid("munged")] if pid is not None])
