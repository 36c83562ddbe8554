"""The bit-for-bit identity of a tensor, shared by the GEMM phase and the burn-in (both compare
it across ranks), in a module of its own so neither imports the other."""

from __future__ import annotations

import ctypes
import hashlib
from typing import Any


def digest(tensor: Any) -> str:
    """sha256 of a tensor's raw bytes: bit-for-bit identity, whatever the dtype."""
    host = tensor.detach().contiguous().cpu()
    buf = (ctypes.c_char * (host.numel() * host.element_size())).from_address(host.data_ptr())
    return hashlib.sha256(memoryview(buf)).hexdigest()
