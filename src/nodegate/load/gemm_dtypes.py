"""The GEMM operands and kernel per profile dtype, and whether this device can run it.

bf16, fp16, tf32 and fp64 are ``torch.matmul`` on tensors of that type (tf32: float32 with the
TF32 tensor-core path switched on by the caller). fp8 is ``torch._scaled_mm`` on e4m3 operands
with unit scales and a bf16 output: the call transformer engines make for their fp8 GEMMs. It
needs the tensor cores of compute capability 8.9 and later (Ada, Hopper, Blackwell); where the
device or this torch lacks it the phase reports why, and the judge SKIPs with that reason.

fp4 is NVFP4 as torch runs it: ``torch._scaled_mm`` on ``float4_e2m1fn_x2`` operands (two e2m1
values per byte) with one e4m3 scale per 16 values along K and a bf16 output, the block-scaled
GEMM of Blackwell's fifth-generation tensor cores (compute capability 10.0; torch's own tests,
test/test_scaled_matmul_cuda.py, run it from SM100 on). Every scale is 1.0, so the swizzled
128x4 scale layout cuBLAS wants holds the same values in any order, and every byte is a valid
pair of e2m1 codes (e2m1 has no NaN or infinity), so the operands need no quantiser. Where torch
has no kernel for the device (any CPU build, a GPU before Blackwell) the phase says so and the
judge SKIPs with the reason. Not yet run on a Blackwell GPU by this project.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: Profile dtype -> torch dtype of the operands (fp8's output is bf16).
OPERAND_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "tf32": "float32",
                  "fp64": "float64", "fp8": "float8_e4m3fn", "fp4": "float4_e2m1fn_x2"}
#: The first CUDA compute capability with fp8 tensor cores (Ada is 8.9, Hopper 9.0).
FP8_MIN_CAPABILITY = (8, 9)
#: The first with NVFP4 tensor cores (Blackwell B200/B300 are 10.0).
FP4_MIN_CAPABILITY = (10, 0)
#: NVFP4: 16 fp4 values along K share one e4m3 scale.
FP4_BLOCK = 16
#: The scale layout tiles 128 rows: an fp4 GEMM size is a multiple of this (no padding).
FP4_ALIGN = 128
#: Where each dtype needs its own capability (the rest run on any CUDA GPU torch supports).
MIN_CAPABILITY = {"fp8": FP8_MIN_CAPABILITY, "fp4": FP4_MIN_CAPABILITY}

#: fp8 on CPU: torch's reference _scaled_mm took 2.9 s for one 256^3 GEMM on the 2-core CI
#: machine (bf16: 0.08 ms), so the CPU path multiplies at most this size (same code path).
CPU_FP8_MAX_N = 64

Seeded = Callable[[int, int, Any, Any], Any]


def size_for(dtype: str, n: int, device: Any) -> int:
    """The GEMM size this device runs ``dtype`` at: the profile's, but fp8 on CPU capped and fp4
    rounded down to its scale tiles."""
    if dtype == "fp4":
        return max(FP4_ALIGN, n - n % FP4_ALIGN)
    return min(n, CPU_FP8_MAX_N) if dtype == "fp8" and device.type != "cuda" else n


def unsupported(dtype: str, device: Any) -> str | None:
    """Why ``device`` cannot run a ``dtype`` GEMM here, or None when it can."""
    import torch

    if dtype not in MIN_CAPABILITY:
        return None
    names = ("_scaled_mm", OPERAND_DTYPES[dtype])
    if not all(hasattr(torch, name) for name in names):
        return f"torch {torch.__version__} has no torch.{names[0]} / {names[1]}"
    if device.type == "cuda":
        need = MIN_CAPABILITY[dtype]
        cap = tuple(torch.cuda.get_device_capability(device))
        if cap < need:
            return (f"{dtype} GEMM needs compute capability {need[0]}.{need[1]} or later; "
                    f"this GPU is {cap[0]}.{cap[1]}")
    try:  # a small trial: some builds expose the op without a kernel for this device
        size = FP4_ALIGN if dtype == "fp4" else 16
        operands(dtype, size, device, _ones)[3]()
    except (RuntimeError, NotImplementedError, ValueError) as exc:
        return (f"torch {torch.__version__} has no {dtype} GEMM kernel for {device} "
                f"(torch._scaled_mm: {str(exc).splitlines()[0][:160]})")
    return None


def _ones(n: int, seed: int, dtype: Any, device: Any) -> Any:
    """Trial operands: the values do not matter, only whether the kernel exists."""
    import torch

    return torch.ones(n, n, dtype=dtype, device=device)


def _fp4_bytes(x: Any) -> Any:
    """Deterministic bytes from seeded floats, each read as two e2m1 codes (all 16 finite)."""
    import torch

    return (x.abs() * 4096).to(torch.int32).remainder(256).to(torch.uint8).contiguous()


def operands(dtype: str, n: int, device: Any, seeded: Seeded
             ) -> tuple[Any, Any, Any, Callable[[], None]]:
    """(a, b, out, mm): seeded n x n inputs, the output buffer and one GEMM into it."""
    import torch

    if dtype == "fp4":
        return _fp4_operands(n, device, seeded)
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


def _fp4_operands(n: int, device: Any, seeded: Seeded
                  ) -> tuple[Any, Any, Any, Callable[[], None]]:
    """NVFP4 operands: (n, n/2) packed bytes each, the second column-major, unit e4m3 scales
    (one per 16 values along K, as many as the 128x4-tiled layout holds for n x n)."""
    import torch

    fp4 = torch.float4_e2m1fn_x2
    half = n // 2
    a = _fp4_bytes(seeded(n, 1234, torch.float32, device)[:, :half]).view(fp4)
    # _scaled_mm takes its second operand column-major: the transpose of a row-major tensor
    b = _fp4_bytes(seeded(n, 5678, torch.float32, device)[:, :half]).view(fp4).t()
    scales = n * (n // FP4_BLOCK)
    scale_a = torch.ones(scales, dtype=torch.float32, device=device).to(torch.float8_e4m3fn)
    scale_b = scale_a.clone()
    out = torch.empty(n, n, dtype=torch.bfloat16, device=device)

    def mm4() -> None:
        torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, out=out)

    return a, b, out, mm4
