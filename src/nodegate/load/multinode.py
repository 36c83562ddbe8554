"""The multi-node collectives: new nodes and a known-good one, over torchrun's c10d rendezvous.

A node's own battery proves its GPUs and NVLink; it says nothing of the NICs, cables and
switch ports a job crosses between nodes. Here one or more new nodes and a node already in
service (``nnodes`` in all, two for a pair) run nccl-tests style sweeps of all_reduce,
all_gather, reduce_scatter and alltoall together (gloo on CPU for tests and the lab, NCCL on
GPUs, which reads the node's /etc/nccl.conf), and each new node is judged on the bus bandwidth
of each at the profile's size.

The known-good node hosts the rendezvous store (``is_host=true``: name resolution is not
trusted to pick it); both sides advertise the address they were given, never a hostname, and
gloo's data path is bound to the interface from /etc/nccl.conf (``NCCL_SOCKET_IFNAME``), so a
node whose hostname resolves to 127.0.1.1 still works. The whole run is bounded: torchrun runs in
its own session and is killed, with every rank, when the deadline passes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodegate.errors import ConfigError
from nodegate.fileio import read_text
from nodegate.load import config

NCCL_CONF = Path("/etc/nccl.conf")
DEFAULT_PORT = 29400
#: Seconds torchrun itself needs besides the rendezvous and the sweep (start, teardown).
SLACK_S = 30.0
#: What the multi-node check sweeps (nccl-tests names); broadcast stays inside the node.
MULTINODE_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall")


@dataclass(frozen=True)
class PairSpec:
    """One side of a pair run; both sides must agree on ``endpoint`` and ``rdzv_id``."""

    role: str  # "host" (the known-good node: runs the rendezvous store) or "join"
    endpoint: str  # host:port of the known-good node's store
    rdzv_id: str
    local_addr: str | None
    ranks_per_node: int
    backend: str  # "cpu" or "cuda"
    max_bytes: int
    steps: int = 5
    seconds_per_size: float = 0.2
    join_timeout_s: float = 120.0
    collective_timeout_s: float = 120.0
    env: Mapping[str, str] = field(default_factory=dict)
    nnodes: int = 2
    collectives: tuple[str, ...] = MULTINODE_COLLECTIVES
    #: torchrun's own start and teardown on top of the rendezvous and the sweeps
    slack_s: float = SLACK_S

    @property
    def deadline_s(self) -> float:
        # rendezvous, then each sweep (steps sizes, a bounded time each), then teardown
        sweep = self.steps * (self.seconds_per_size * 3 + self.collective_timeout_s / 10)
        return self.join_timeout_s + sweep * max(1, len(self.collectives)) + self.slack_s


@dataclass
class PairOutcome:
    ok: bool
    value: dict[str, Any] | None
    exit_code: int | None
    timed_out: bool
    duration_s: float
    output_tail: str
    rank_errors: dict[str, str] = field(default_factory=dict)

    def _silence(self) -> str:
        """What an empty output means: torchrun waiting for a rendezvous that never forms
        prints nothing (the joining side retries the store for its read timeout)."""
        if self.timed_out:
            return (f"(torchrun printed nothing; killed at the deadline after "
                    f"{self.duration_s:.0f} s: no peer at the rendezvous)")
        return f"(torchrun printed nothing; exit code {self.exit_code})"

    def evidence(self) -> dict[str, Any]:
        out: dict[str, Any] = {"exit_code": self.exit_code, "timed_out": self.timed_out,
                               "duration_s": round(self.duration_s, 3),
                               "output": self.output_tail[-2000:] or self._silence()}
        if self.rank_errors:
            rank = sorted(self.rank_errors, key=lambda r: int(r) if r.isdigit() else 1 << 30)[0]
            out["first_rank_error"] = {"rank": rank, "traceback": self.rank_errors[rank]}
        return out


def nccl_conf_settings(path: Path = NCCL_CONF) -> dict[str, str]:
    """KEY=value lines of nccl.conf (what the nccl role rendered for this node's network)."""
    try:
        text = read_text(path, kind="config")
    except (OSError, ConfigError):
        return {}
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and not key.startswith("#"):
            out[key.strip()] = value.strip()
    return out


def network_env(ifname: str | None, conf: Path = NCCL_CONF) -> dict[str, str]:
    """GLOO_SOCKET_IFNAME (and NCCL's) from ``ifname`` or the node's nccl.conf."""
    name = ifname or nccl_conf_settings(conf).get("NCCL_SOCKET_IFNAME")
    if not name:
        return {}
    return {"GLOO_SOCKET_IFNAME": name, "NCCL_SOCKET_IFNAME": name}


def sizing(profile: Mapping[str, Any], backend: str, device_count: int,
           ranks_per_node: int | None) -> tuple[int, int]:
    """(ranks per node, judged size in bytes) from the profile's ``load`` section."""
    load = dict(profile.get("load") or {})
    max_bytes = int(load.get("multinode_max_bytes") or config.DEFAULTS["multinode_max_bytes"])
    ranks = ranks_per_node or load.get("multinode_ranks_per_node") or \
        int((profile.get("gpu") or {}).get("count") or 1)
    ranks = int(ranks)
    if backend == "cuda":
        ranks = min(ranks, device_count)
    if ranks < 1:
        raise ConfigError(f"ranks per node must be at least 1, not {ranks}",
                          key="load.multinode_ranks_per_node")
    return ranks, max(4096, max_bytes)


def torchrun_argv(spec: PairSpec, out: Path) -> list[str]:
    """torchrun for this side: ``nnodes`` nodes, c10d rendezvous at the known-good node, no
    restarts (a restart would hide the failure this check exists to see)."""
    conf = [f"is_host={'true' if spec.role == 'host' else 'false'}",
            f"join_timeout={int(spec.join_timeout_s)}",
            f"read_timeout={int(max(spec.join_timeout_s, 60))}"]
    argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(spec.nnodes),
            "--nproc-per-node", str(spec.ranks_per_node), "--rdzv-backend", "c10d",
            "--rdzv-endpoint", spec.endpoint, "--rdzv-id", spec.rdzv_id,
            "--rdzv-conf", ",".join(conf), "--max-restarts", "0", "--monitor-interval", "1"]
    if spec.local_addr:
        argv += ["--local-addr", spec.local_addr]
    return [*argv, "-m", "nodegate.load.multinode_worker", "--out", str(out),
            "--backend", spec.backend, "--max-bytes", str(spec.max_bytes),
            "--steps", str(spec.steps), "--seconds-per-size", str(spec.seconds_per_size),
            "--timeout-s", str(spec.collective_timeout_s),
            "--collectives", ",".join(spec.collectives)]


def _kill_session(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def run_pair(spec: PairSpec) -> PairOutcome:
    """Run this side to the end or the deadline; every process it started is gone after."""
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="nodegate-multinode-") as tmp:
        out = Path(tmp) / "result.json"
        env = {**os.environ, **spec.env, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS",
                                                                              "1")}
        proc = subprocess.Popen(torchrun_argv(spec, out), env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
        timed_out = False
        try:
            output, _ = proc.communicate(timeout=spec.deadline_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_session(proc)
            output, _ = proc.communicate()
        finally:
            _kill_session(proc)  # ranks torchrun left behind, if any
        errors = {p.name.rsplit(".rank", 1)[1][:-4]: p.read_text(errors="replace")
                  for p in Path(tmp).glob("result.json.rank*.err")}
        value = None
        if out.is_file():
            with contextlib.suppress(ValueError):
                value = json.loads(out.read_text())
    ok = not timed_out and proc.returncode == 0 and isinstance(value, dict)
    return PairOutcome(ok=ok, value=value if isinstance(value, dict) else None,
                       exit_code=proc.returncode, timed_out=timed_out,
                       duration_s=time.monotonic() - t0, output_tail=(output or "")[-4000:],
                       rank_errors=errors)
