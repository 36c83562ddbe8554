"""Which backend runs (CUDA/NCCL or CPU/gloo) and where each worker's memory lives.

The same measuring code runs on both: a worker gets a ``torch.device`` and calls ``sync`` where
CUDA needs a stream synchronisation; on CPU every op is already synchronous.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodegate.bounds import ascii_int
from nodegate.errors import CannotRunError

SYS_PCI = Path("/sys/bus/pci/devices")
SYS_NODES = Path("/sys/devices/system/node")
#: move_pages(2) syscall numbers: libc has no wrapper (libnuma does), the number is stable ABI.
SYS_MOVE_PAGES = {"x86_64": 279, "aarch64": 239, "ppc64le": 301}
#: Pages sampled across a buffer to say which NUMA node holds it.
PAGE_SAMPLES = 64


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


def for_world(backend: Backend, world: int) -> Backend:
    """The process group's backend for ``world`` workers. One GPU: no collective crosses
    GPUs, so gloo's host-side group does, sparing NCCL's setup (which some sandboxes, gVisor
    among them, cannot do); the report then says cuda/gloo."""
    if backend.cuda and world == 1:
        return Backend(backend.kind, "gloo", backend.device_count)
    return backend


#: What every CUDA worker sets before CUDA starts: CUDA's default order is "fastest first",
#: NVML's (and nvidia-smi's) is PCI bus order; with this, CUDA device i is NVML GPU i.
CUDA_ORDER_ENV = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def nvml_indices(backend: Backend, world: int, environ: dict[str, str] | None = None,
                 uuid_to_index: dict[str, int] | None = None) -> list[int]:
    """The NVML index (the report's ``gpuN``) of each CUDA rank, honouring
    ``CUDA_VISIBLE_DEVICES`` as a scheduler sets it: indices, or GPU UUIDs (prefixes too).

    Without it rank r is GPU r. ``uuid_to_index`` is NVML's view, read here when needed."""
    env = os.environ if environ is None else environ
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if not backend.cuda or raw is None or not raw.strip():
        return list(range(world))
    entries = [e.strip() for e in raw.split(",") if e.strip()][:world]
    if any(e.startswith("MIG-") for e in entries):
        raise CannotRunError(f"CUDA_VISIBLE_DEVICES={raw} names MIG instances: the load checks "
                             "validate whole GPUs (unset it, or disable MIG)")
    if all(e.isdigit() for e in entries):
        return [int(e) for e in entries]
    uuids = uuid_to_index if uuid_to_index is not None else _nvml_uuids()
    out: list[int] = []
    for entry in entries:
        if entry.isdigit():
            out.append(int(entry))
            continue
        found = [index for uuid, index in uuids.items() if uuid.startswith(entry)]
        if len(found) != 1:
            raise CannotRunError(f"CUDA_VISIBLE_DEVICES entry {entry!r} matches "
                                 f"{len(found)} GPU(s) by UUID: cannot tell which GPU a rank is")
        out.append(found[0])
    return out


def _nvml_uuids() -> dict[str, int]:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return {str(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))): i
                    for i in range(pynvml.nvmlDeviceGetCount())}
        finally:
            pynvml.nvmlShutdown()
    except Exception as exc:
        raise CannotRunError(f"CUDA_VISIBLE_DEVICES names GPUs by UUID and NVML cannot list "
                             f"them: {exc}") from None


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
    """The GPU's PCI NUMA affinity (sysfs ``numa_node``); None off CUDA or when unknown (-1,
    no sysfs, as in a gVisor sandbox)."""
    if not backend.cuda:
        return None
    import torch

    address = pci_address(torch.cuda.get_device_properties(index))
    if address is None:
        return None
    try:
        node = ascii_int((sys_pci / address / "numa_node").read_text().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


def pci_address(props: Any) -> str | None:
    """sysfs's name of a CUDA device's PCI function, ``dddd:bb:dd.0``.

    torch's properties carry the PCI location on recent builds (a GPU is function 0); where
    they do not, NVML says it for the device's UUID. None when neither can."""
    bus, slot = getattr(props, "pci_bus_id", None), getattr(props, "pci_device_id", None)
    if isinstance(bus, int) and isinstance(slot, int):
        return f"{int(getattr(props, 'pci_domain_id', 0) or 0):04x}:{bus:02x}:{slot:02x}.0"
    uuid = str(getattr(props, "uuid", "") or "")
    return _nvml_pci_address(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}") if uuid else None


def sysfs_pci_address(nvml_bus_id: str) -> str | None:
    """NVML's ``00000000:18:00.0`` (32-bit domain) as sysfs names it, ``0000:18:00.0``."""
    domain, sep, rest = nvml_bus_id.strip().lower().partition(":")
    if not sep:
        return None
    try:
        return f"{int(domain, 16):04x}:{rest}"
    except ValueError:
        return None


def _nvml_pci_address(uuid: str) -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            info = pynvml.nvmlDeviceGetPciInfo(pynvml.nvmlDeviceGetHandleByUUID(uuid))
            bus_id = info.busId
            return sysfs_pci_address(bus_id.decode() if isinstance(bus_id, bytes) else bus_id)
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return None


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


def page_nodes(address: int, nbytes: int, samples: int = PAGE_SAMPLES) -> dict[int, int]:
    """NUMA node -> how many of ``samples`` pages spread over the buffer live there, read
    with move_pages(2) without target nodes (it only reports). Pages not yet touched are not
    counted; empty where the kernel or architecture cannot say."""
    number = SYS_MOVE_PAGES.get(platform.machine())
    page = os.sysconf("SC_PAGE_SIZE")
    if number is None or nbytes <= 0:
        return {}
    first = address - address % page
    count = max(1, min(samples, (address + nbytes - first) // page))
    stride = max(1, (address + nbytes - first) // page // count)
    pages = (ctypes.c_void_p * count)(*[first + i * stride * page for i in range(count)])
    status = (ctypes.c_int * count)()
    libc = ctypes.CDLL(None, use_errno=True)
    # syscall(2) reads every argument as a long: pass them so, not as C ints
    long = ctypes.c_long
    if libc.syscall(long(number), long(0), long(count), pages, None, status, long(0)) != 0:
        return {}
    nodes: dict[int, int] = {}
    for node in status:
        if node >= 0:
            nodes[node] = nodes.get(node, 0) + 1
    return nodes


def placed_on(pages: dict[int, int], node: int | None) -> bool | None:
    """Whether every sampled page is on ``node``; None when either is unknown."""
    if node is None or not pages:
        return None
    return set(pages) == {node}


#: cuMemHostRegister flag: the pages count as pinned in every CUDA context of the process.
CU_MEMHOSTREGISTER_PORTABLE = 0x01


def cuda_driver() -> Any | None:
    """The CUDA driver library (loaded already by torch), typed for the two calls used here.

    The driver API, not the runtime's ``cudaHostRegister``: a refused runtime call leaves its
    error as the thread's last error, and torch's next kernel-launch check would raise it."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    lib.cuMemHostRegister_v2.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
    lib.cuMemHostRegister_v2.restype = ctypes.c_int
    lib.cuMemHostUnregister.argtypes = [ctypes.c_void_p]
    lib.cuMemHostUnregister.restype = ctypes.c_int
    return lib


@contextlib.contextmanager
def host_buffer(nbytes: int, *, pin: bool) -> Iterator[tuple[Any, str]]:
    """A host buffer placed by first touch from this thread's CPUs, then pinned where it lies.

    Why not ``torch.empty(pin_memory=True)``: torch's caching host allocator hands a freed
    pinned block to the next request of its size, so a second placement (the remote NUMA
    node) would silently reuse the first one's pages. Here the pages are touched by this
    thread alone (a memset, not torch's thread pool, whose threads keep an older CPU mask),
    then registered with CUDA in place and unregistered on exit. Yields the tensor and how it
    was pinned: ``registered``, ``pageable`` (CPU runs) or ``torch-cache`` (registration was
    refused; the pages then come from torch's allocator, as placed by this thread).
    """
    import torch

    host = torch.empty(nbytes, dtype=torch.uint8)
    ctypes.memset(host.data_ptr(), 3, nbytes)
    if not pin:
        yield host, "pageable"
        return
    torch.cuda.synchronize()  # this thread's context is current (the driver call needs one)
    driver = cuda_driver()
    if driver is None or driver.cuMemHostRegister_v2(host.data_ptr(), nbytes,
                                                     CU_MEMHOSTREGISTER_PORTABLE) != 0:
        fallback = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        ctypes.memset(fallback.data_ptr(), 3, nbytes)
        try:
            yield fallback, "torch-cache"
        finally:
            del fallback
            empty_cache = getattr(torch._C, "_host_emptyCache", None)
            if empty_cache is not None:  # give the block back, so no later run reuses it
                empty_cache()
        return
    try:
        yield host, "registered"
    finally:
        torch.cuda.synchronize()  # no copy may still read the pages being unpinned
        driver.cuMemHostUnregister(host.data_ptr())
