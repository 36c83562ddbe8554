"""Which backend runs (CUDA/NCCL or CPU/gloo) and where each worker's memory lives.

The same measuring code runs on both: a worker gets a ``torch.device`` and calls ``sync`` where
CUDA needs a stream synchronisation; on CPU every op is already synchronous.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodegate.errors import CannotRunError

SYS_PCI = Path("/sys/bus/pci/devices")
SYS_NODES = Path("/sys/devices/system/node")


@dataclass(frozen=True)
class Backend:
    kind: str  # "cuda" or "cpu"
    dist: str  # "nccl" or "gloo"
    device_count: int

    @property
    def name(self) -> str:
        return f"{self.kind}/{self.dist}"

    @property
    def cuda(self) -> bool:
        return self.kind == "cuda"


def choose(device: str = "auto") -> Backend:
    """``auto``: CUDA/NCCL when a GPU is visible, else CPU/gloo; ``cuda`` insists on GPUs."""
    import torch

    if device not in ("auto", "cuda", "cpu"):
        raise CannotRunError(f"device must be auto, cuda or cpu, not {device!r}")
    has_cuda = device != "cpu" and torch.cuda.is_available() and torch.cuda.device_count() > 0
    if device == "cuda" and not has_cuda:
        raise CannotRunError("device cuda requested but torch sees no CUDA GPU")
    if has_cuda:
        return Backend("cuda", "nccl", torch.cuda.device_count())
    return Backend("cpu", "gloo", 0)


def torch_device(backend: Backend, index: int) -> Any:
    import torch

    return torch.device("cuda", index) if backend.cuda else torch.device("cpu")


def sync(backend: Backend, index: int | None = None) -> None:
    if backend.cuda:
        import torch

        torch.cuda.synchronize(index)


def parse_cpulist(text: str) -> set[int]:
    """``0-3,8,10-11`` -> {0, 1, 2, 3, 8, 10, 11} (the sysfs cpulist format)."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def numa_nodes(sys_nodes: Path = SYS_NODES) -> dict[int, set[int]]:
    """NUMA node -> its CPUs (empty when the kernel exposes no topology)."""
    nodes: dict[int, set[int]] = {}
    for path in sorted(sys_nodes.glob("node[0-9]*")):
        try:
            nodes[int(path.name[4:])] = parse_cpulist((path / "cpulist").read_text())
        except (OSError, ValueError):
            continue
    return {n: cpus for n, cpus in nodes.items() if cpus}


def gpu_numa_node(backend: Backend, index: int, sys_pci: Path = SYS_PCI) -> int | None:
    """The GPU's PCI NUMA affinity (sysfs ``numa_node``); None off CUDA or when unknown (-1)."""
    if not backend.cuda:
        return None
    import torch

    props: Any = torch.cuda.get_device_properties(index)
    bus_id = (f"{getattr(props, 'pci_domain_id', 0):04x}:{props.pci_bus_id:02x}:"
              f"{props.pci_device_id:02x}.0")
    try:
        node = int((sys_pci / bus_id / "numa_node").read_text().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


def pin_to_node(node: int | None, nodes: dict[int, set[int]]) -> bool:
    """Bind this thread's process to a NUMA node's CPUs (first-touch puts host buffers there)."""
    cpus = nodes.get(node) if node is not None else None
    if not cpus:
        return False
    try:
        os.sched_setaffinity(0, cpus)
    except (OSError, AttributeError):
        return False
    return True
