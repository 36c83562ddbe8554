"""Processes holding the GPUs, and the node's Slurm state: what makes a driver change unsafe."""

from __future__ import annotations

import re
from typing import TypedDict, TypeVar

from pyinfra.api.command import QuoteString, StringCommand
from pyinfra.api.facts import FactBase
from typing_extensions import override

from nodegate.facts.base import ListFact

T = TypeVar("T")

#: Used where nvidia-smi is absent (the lab's simulated board has only libnvidia-ml): the same
#: question asked through NVML with the agent's Python.
_NVML_QUERY = (
    "import pynvml as n\n"
    "n.nvmlInit()\n"
    "for i in range(n.nvmlDeviceGetCount()):\n"
    "    h = n.nvmlDeviceGetHandleByIndex(i)\n"
    "    for p in n.nvmlDeviceGetComputeRunningProcesses(h):\n"
    "        print(f'{p.pid}, gpu{i}, {(p.usedGpuMemory or 0) // 1048576}')\n"
)


class GpuProcess(TypedDict):
    pid: int
    name: str
    used_mib: int


class GpuProcesses(FactBase[list[GpuProcess] | None]):
    """Compute processes on any GPU; None when neither nvidia-smi nor NVML could be asked.

    ``python`` is the agent venv's interpreter (it has nvidia-ml-py).
    """

    @override
    def command(self, python: str = "/opt/nodegate/venv/bin/python") -> StringCommand:
        return StringCommand(
            "if command -v nvidia-smi >/dev/null 2>&1; then",
            "nvidia-smi --query-compute-apps=pid,process_name,used_memory "
            "--format=csv,noheader,nounits || echo NODEGATE_NO_GPU_QUERY;",
            "elif test -x", QuoteString(python), "; then",
            QuoteString(python), "-c", QuoteString(_NVML_QUERY),
            "2>/dev/null || echo NODEGATE_NO_GPU_QUERY;",
            "else echo NODEGATE_NO_GPU_QUERY; fi",
        )

    @override
    def process(self, output: list[str]) -> list[GpuProcess] | None:
        if any(line.strip() == "NODEGATE_NO_GPU_QUERY" for line in output):
            return None
        procs: list[GpuProcess] = []
        for line in output:
            parts = [p.strip() for p in line.split(",")]
            if len(parts) >= 2 and parts[0].isdigit():
                used = parts[2] if len(parts) > 2 and parts[2].isdigit() else "0"
                procs.append({"pid": int(parts[0]), "name": parts[1], "used_mib": int(used)})
        return procs

    @override
    @staticmethod
    def default() -> list[GpuProcess] | None:
        return []


#: What ``scontrol`` exited with, on the last line of both Slurm facts' output.
_EXIT_MARK = "nodegate-scontrol-exit="

#: The state token ``SlurmNodeState`` gives when ``scontrol`` is there but could not answer
#: (controller down, no configuration, munge failure), followed by ``: <its message>``. Not
#: None: None is "not in Slurm" and lets a reboot go on; unknown must refuse it.
SCONTROL_FAILED = "SCONTROL_FAILED"


def read_show_node(output: list[str]) -> tuple[str | None, str | None]:
    """``scontrol show node -o`` output -> (its ``NodeName=`` line, None), (None, None) when the
    cluster does not know the node, or (None, scontrol's message) when it could not answer.
    Output without the exit line (an older fact's) reads as before: no line, not in Slurm."""
    from nodegate.cluster.slurm import UNKNOWN_NODE_MARKERS

    line = next((ln for ln in output if "NodeName=" in ln), None)
    if line is not None:
        return line, None
    marks = [ln for ln in output if ln.startswith(_EXIT_MARK)]
    said = " ".join(ln.strip() for ln in output if ln.strip() and not ln.startswith(_EXIT_MARK))
    if not marks or marks[-1] == f"{_EXIT_MARK}0":
        return None, None
    if any(marker in said.lower() for marker in UNKNOWN_NODE_MARKERS):
        return None, None
    return None, (said[-300:] or f"scontrol exited {marks[-1][len(_EXIT_MARK):]}")


def scontrol_failure(state: str | None) -> str | None:
    """scontrol's message when ``state`` (a ``SlurmNodeState``) says it could not answer."""
    if state and state.startswith(SCONTROL_FAILED):
        return state[len(SCONTROL_FAILED):].lstrip(": ") or "scontrol failed"
    return None


class _ShowNode(FactBase[T]):
    """A fact read from ``scontrol show node -o <node>`` and the exit code echoed after it
    (``read_show_node`` splits them)."""

    @override
    def requires_command(self, node: str) -> str:
        return "scontrol"

    @override
    def command(self, node: str) -> StringCommand:
        return StringCommand("scontrol", "show", "node", "-o", QuoteString(node), "2>&1;",
                             "echo", f"{_EXIT_MARK}$?")


class SlurmNodeState(_ShowNode[str | None]):
    """This node's Slurm state token (``IDLE``, ``DRAINED``, ``MIXED+DRAIN``...), None without
    Slurm (no ``scontrol``, or the cluster does not know the node), ``SCONTROL_FAILED: ...``
    when scontrol could not answer (``scontrol_failure``). Read the token with
    ``nodegate.cluster.slurm.parse_state`` / ``is_drained``."""

    @override
    def process(self, output: list[str]) -> str | None:
        line, error = read_show_node(output)
        if error is not None:
            return f"{SCONTROL_FAILED}: {error}"
        state = re.search(r"\sState=(\S+)", line or "")
        return state.group(1) if state else None


class GpuPlacement(TypedDict):
    minor: int  # /dev/nvidia<minor>
    bdf: str
    socket: int | None
    cores: str | None  # Slurm core indexes of that socket, "0-55"


_PLACEMENT = (
    "for d in /proc/driver/nvidia/gpus/*/; do [ -f \"$d/information\" ] || continue; "
    "b=$(basename \"$d\"); "
    "m=$(sed -n 's/^Device Minor:[[:space:]]*//p' \"$d/information\"); "
    "c=$(cut -d, -f1 /sys/bus/pci/devices/$b/local_cpulist 2>/dev/null | cut -d- -f1); "
    "echo \"gpu $m $b ${c:--}\"; done; "
    "for c in /sys/devices/system/cpu/cpu[0-9]*; do [ -r $c/topology/core_id ] && "
    "echo \"cpu ${c##*cpu} $(cat $c/topology/physical_package_id) $(cat $c/topology/core_id)\"; "
    "done; true"
)


class GpuPlacements(ListFact[GpuPlacement]):
    """Each GPU's device minor (``/proc/driver/nvidia/gpus/<bdf>/information``, the driver's
    own numbering of ``/dev/nvidiaN``) and the socket of its PCIe slot (the first CPU of the
    slot's ``local_cpulist``, then that CPU's ``physical_package_id``), with the socket's
    cores as Slurm's core indexes: gres.conf(5) says ``Cores=`` takes core index numbers and
    should name all cores of a socket, because Slurm co-allocates GRES with CPUs per socket
    or NUMA node. Empty without a loaded driver (the lab: no /proc/driver/nvidia)."""

    @override
    def command(self) -> str:
        return _PLACEMENT

    @override
    def process(self, output: list[str]) -> list[GpuPlacement]:
        gpus: list[tuple[int, str, int | None]] = []
        cpu_socket: dict[int, int] = {}
        cores: dict[int, set[int]] = {}
        for line in output:
            parts = line.split()
            if len(parts) == 4 and parts[0] == "gpu" and parts[1].isdigit():
                first = int(parts[3]) if parts[3].isdigit() else None
                gpus.append((int(parts[1]), parts[2], first))
            elif len(parts) == 4 and parts[0] == "cpu" and all(p.isdigit() for p in parts[1:]):
                cpu, socket, core = (int(p) for p in parts[1:])
                cpu_socket[cpu] = socket
                cores.setdefault(socket, set()).add(core)
        base, first_index = 0, {}
        for pkg in sorted(cores):
            first_index[pkg] = base
            base += len(cores[pkg])
        out: list[GpuPlacement] = []
        for minor, bdf, first in sorted(gpus):
            where = cpu_socket.get(first) if first is not None else None
            span = None
            if where is not None:
                lo = first_index[where]
                span = f"{lo}-{lo + len(cores[where]) - 1}"
            out.append(GpuPlacement(minor=minor, bdf=bdf, socket=where, cores=span))
        return out


class CpuTopology(FactBase[dict[str, int] | None]):
    """Sockets, cores per socket and threads per core from sysfs (each CPU's
    ``physical_package_id`` and ``core_id``), as slurm.conf's ``NodeName`` wants them next to
    ``CPUs=``: without them Slurm counts every CPU as a core of one socket, and gres.conf's
    ``Cores=`` (socket-major core indexes, as ``GpuPlacements`` numbers them) would not line
    up with what slurmd finds. None where sysfs shows no topology."""

    @override
    def command(self) -> str:
        return ("for c in /sys/devices/system/cpu/cpu[0-9]*; do [ -r $c/topology/core_id ] && "
                "echo \"$(cat $c/topology/physical_package_id) $(cat $c/topology/core_id)\"; "
                "done; true")

    @override
    @staticmethod
    def default() -> dict[str, int] | None:
        return None

    @override
    def process(self, output: list[str]) -> dict[str, int] | None:
        threads: dict[tuple[int, int], int] = {}
        for line in output:
            parts = line.split()
            if len(parts) == 2 and all(p.isdigit() for p in parts):
                key = (int(parts[0]), int(parts[1]))
                threads[key] = threads.get(key, 0) + 1
        if not threads:
            return None
        sockets = {s for s, _ in threads}
        per_socket = max(sum(1 for s, _ in threads if s == sock) for sock in sockets)
        return {"cpus": sum(threads.values()), "sockets": len(sockets),
                "cores_per_socket": per_socket, "threads_per_core": max(threads.values())}


class SlurmNode(_ShowNode[dict[str, str | None] | None]):
    """This node's Slurm state token and drain reason (``scontrol show node -o``), None
    without Slurm or when the cluster does not know the node; ``{"error": ...}`` (no state)
    when scontrol could not answer. Read fresh: an upgrade drains, waits on and resumes by it."""

    @override
    def process(self, output: list[str]) -> dict[str, str | None] | None:
        from nodegate.cluster.slurm import parse_show_node

        line, error = read_show_node(output)
        if error is not None:
            return {"state": None, "reason": None, "error": error}
        if line is None:
            return None
        state = re.search(r"\sState=(\S+)", line)
        parsed = parse_show_node(line)
        return {"state": state.group(1) if state else "", "reason": parsed.reason}
