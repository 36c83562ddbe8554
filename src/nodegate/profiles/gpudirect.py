"""How a profile provides GPUDirect RDMA: ``host.gpudirect.mode``, or its default.

NVIDIA recommends DMA-BUF (the Linux kernel's buffer sharing, used by recent NCCL with the
open kernel modules) over the legacy ``nvidia-peermem`` module, which is only needed where
DMA-BUF cannot be used (the proprietary kernel modules). Both the driver role (load peermem
or not) and the host check (verify what the profile declares) read the mode from here, so a
profile without the key gets the same answer in both places.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

MODES = ("dmabuf", "peermem", "none")


class GpuDirect(NamedTuple):
    mode: str
    source: str
    declared: bool  # False: derived from host.infiniband and driver.kernel_modules


def gpudirect(data: Mapping[str, Any]) -> GpuDirect:
    """The profile's GPUDirect RDMA mode; a missing key defaults from the fabric and modules."""
    host = data.get("host") or {}
    declared = host.get("gpudirect")
    if isinstance(declared, Mapping) and declared.get("mode") in MODES:
        return GpuDirect(str(declared["mode"]), str(declared.get("source", "")), True)
    if not host.get("infiniband"):
        return GpuDirect("none", "default: the profile has no RDMA fabric (host.infiniband "
                                 "false)", False)
    modules = (data.get("driver") or {}).get("kernel_modules", "open")
    if modules == "open":
        return GpuDirect("dmabuf", "default: open kernel modules provide DMA-BUF", False)
    return GpuDirect("peermem", "default: the proprietary kernel modules have no DMA-BUF "
                                "export; nvidia-peermem is needed", False)
