"""The GEMM operands and kernel per profile dtype, and whether this device can run it.

bf16, fp16, tf32 and fp64 are ``torch.matmul`` on tensors of that type (tf32: float32 with the
TF32 tensor-core path switched on by the caller). fp8 is ``torch._scaled_mm`` on e4m3 operands
with unit scales and a bf16 output: the call transformer engines make for their fp8 GEMMs. It
needs the tensor cores of compute capability 8.9 and later (Ada, Hopper, Blackwell); where the
device or this torch lacks it the phase reports why, and the judge SKIPs with that reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: Profile dtype -> torch dtype of the operands (fp8's output is bf16).
OPERAND_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "tf32": "float32",
                  "fp64": "float64", "fp8": "float8_e4m3fn"}
#: The first CUDA compute capability with fp8 tensor cores (Ada is 8.9, Hopper 9.0).
FP8_MIN_CAPABILITY = (8, 9)

#: fp8 on CPU: torch's reference _scaled_mm took 2.9 s for one 256^3 GEMM on the 2-core CI
#: machine (bf16: 0.08 ms), so the CPU path multiplies at most this size (same code path).
CPU_FP8_MAX_N = 64

Seeded = Callable[[int, int, Any, Any], Any]


def size_for(dtype: str, n: int, device: Any) -> int:
    """The GEMM size this device runs ``dtype`` at: the profile's, but fp8 on CPU capped."""
    return min(n, CPU_FP8_MAX_N) if dtype == "fp8" and device.type != "cuda" else n


def unsupported(dtype: str, device: Any) -> str | None:
    """Why ``device`` cannot run a ``dtype`` GEMM here, or None when it can."""
    import torch

    if dtype != "fp8":
        return None
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        return f"torch {torch.__version__} has no torch._scaled_mm / float8_e4m3fn"
    if device.type == "cuda":
        cap = tuple(torch.cuda.get_device_capability(device))
        if cap < FP8_MIN_CAPABILITY:
            return (f"fp8 GEMM needs compute capability {FP8_MIN_CAPABILITY[0]}."
                    f"{FP8_MIN_CAPABILITY[1]} or later; this GPU is {cap[0]}.{cap[1]}")
    try:  # a tiny trial: some builds expose the op without a kernel for this device
        a = torch.zeros(16, 16, device=device).to(torch.float8_e4m3fn)
        one = torch.ones((), device=device)
        torch._scaled_mm(a, a.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    except (RuntimeError, NotImplementedError) as exc:
        return f"torch._scaled_mm failed on {device}: {str(exc).splitlines()[0][:160]}"
    return None


def operands(dtype: str, n: int, device: Any, seeded: Seeded
             ) -> tuple[Any, Any, Any, Callable[[], None]]:
    """(a, b, out, mm): seeded n x n inputs, the output buffer and one GEMM into it."""
    import torch

    if dtype != "fp8":
        tdtype = getattr(torch, OPERAND_DTYPES[dtype])
        a = seeded(n, 1234, tdtype, device)
        b = seeded(n, 5678, tdtype, device)
        out = torch.empty_like(a)
        def mm() -> None:
            torch.matmul(a, b, out=out)

        return a, b, out, mm
    fp8 = torch.float8_e4m3fn
    a = seeded(n, 1234, torch.float32, device).to(fp8)
    # _scaled_mm takes its second operand column-major: the transpose of a row-major tensor
    b = seeded(n, 5678, torch.float32, device).t().contiguous().to(fp8).t()
    one = torch.ones((), dtype=torch.float32, device=device)
    out = torch.empty(n, n, dtype=torch.bfloat16, device=device)

    def mm8() -> None:
        torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, out=out)

    return a, b, out, mm8
