"""The acceptance level's integrity checks, measured in this process on CPU tensors (the
same code the workers run on a GPU): the HBM patterns, the copy checksums, the all-reduce
check and the fp8 GEMM path, with their fault seams."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from nodegate.load import copy_verify, gemm_dtypes, hbm_test, seams, tasks  # noqa: E402
from nodegate.load.devices import Backend  # noqa: E402
from nodegate.load.workers import SLOTS, WorkerContext  # noqa: E402

pytestmark = pytest.mark.torch
CPU = torch.device("cpu")


def ctx(rank: int = 0, world: int = 1) -> WorkerContext:
    return WorkerContext(rank=rank, world=world, backend=Backend("cpu", "gloo", 0),
                         progress=multiprocessing.Array("d", SLOTS * max(world, rank + 1)))


# --- HBM patterns --------------------------------------------------------------------------

def _words(pattern: str, round_: int, n: int = 130, base: int = 0x7F0000001000) -> list[int]:
    got = hbm_test.expected(pattern, round_, 0, n, base=base, device=CPU)
    return [int(x) & ((1 << 64) - 1) for x in got]


def test_address_pattern_is_each_words_own_address_then_its_complement() -> None:
    base = 0x7F0000001000
    assert _words("address", 0, 4, base) == [base, base + 8, base + 16, base + 24]
    assert _words("address", 1, 2, base) == [~base & (2**64 - 1), ~(base + 8) & (2**64 - 1)]


def test_walking_ones_and_zeros_visit_every_bit_lane_including_the_sign_bit() -> None:
    ones = _words("walking_ones", 3)
    assert ones[0] == 1 << 3 and ones[60] == 1 << 63 and ones[61] == 1
    assert all(bin(w).count("1") == 1 for w in ones)
    zeros = _words("walking_zeros", 3)
    assert all(z == ~o & (2**64 - 1) for z, o in zip(zeros, ones, strict=True))


def test_random_pattern_is_seeded_by_round_and_uses_the_whole_word() -> None:
    first, again, other = _words("random", 0), _words("random", 0), _words("random", 1)
    assert first == again and first != other
    assert any(w >> 63 for w in first) and len(set(first)) == len(first)
    # the stream does not depend on where a chunk starts
    tail = hbm_test.expected("random", 0, 64, 130, base=0, device=CPU)
    assert [int(x) & (2**64 - 1) for x in tail] == first[64:]


def test_pattern_test_covers_the_fraction_and_counts_no_error_on_sound_memory() -> None:
    out = hbm_test.patterns(ctx(), fraction=0.5, seconds=0.0, cpu_bytes=1 << 16,
                            chunk_bytes=4096)
    assert out["free_bytes"] == 1 << 16 and out["bytes_tested"] == 1 << 15
    assert out["errors"] == 0 and out["first_bad"] == [] and out["rounds"] == 1
    assert {p: v["passes"] for p, v in out["patterns"].items()} == dict.fromkeys(
        hbm_test.PATTERNS, 1)
    assert out["gbps"] > 0 and out["counted"] == "bytes written + bytes verified"


def test_hbm_seam_flips_words_that_are_counted_and_named(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    monkeypatch.setenv(seams.HBM_FAULT, "1:2")
    clean = hbm_test.patterns(ctx(0, 1), fraction=0.9, seconds=0.0, cpu_bytes=1 << 15,
                              chunk_bytes=4096)
    assert clean["errors"] == 0  # the seam names rank 1, not this one
    bad = hbm_test.patterns(ctx(1, 1), fraction=0.9, seconds=0.0, cpu_bytes=1 << 15,
                            chunk_bytes=4096)
    assert bad["errors"] == 2 * len(hbm_test.PATTERNS)  # every pass finds both words
    words = bad["bytes_tested"] // 8
    first = bad["first_bad"][0]
    assert first["offset"] == (words // 3) * 8 and first["pattern"] == "address"
    assert first["bits"] == f"0x{1 << hbm_test.SEAM_BIT:016x}"
    assert int(first["address"], 16) - first["offset"] > 0  # the device address, not 0


def test_fraction_is_checked_before_any_load_starts() -> None:
    from nodegate.errors import ConfigError
    from nodegate.load import config

    for bad in (0, -0.1, 0.99, 1, "0.9", True):
        with pytest.raises(ConfigError) as err:
            config.from_profile({"load": {"hbm_test_fraction": bad}}, "acceptance")
        assert "load.hbm_test_fraction" in str(err.value) and err.value.exit_code == 2
    assert config.from_profile({"load": {"hbm_test_fraction": 0.98}},
                               "acceptance").hbm_test_fraction == 0.98


# --- copies ---------------------------------------------------------------------------------

def test_fill_is_position_dependent_and_any_single_byte_changes_the_checksum() -> None:
    buf = copy_verify.fill(torch.empty(4099, dtype=torch.uint8), seed=5)
    assert len(set(buf[:64].tolist())) > 32  # not a constant: a misplaced copy shows
    reference = copy_verify.checksum(buf)
    for pos in (0, 7, 2048, 4096, 4098):  # words and the tail
        for flip in (0x01, 0x80, 0xFF):
            bad = buf.clone()
            bad[pos] ^= flip
            assert copy_verify.checksum(bad) != reference, (pos, flip)
    assert copy_verify.compare(buf, buf.clone())["ok"]


@pytest.fixture
def corrupt(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    def set_(value: str) -> None:
        monkeypatch.setenv(seams.CORRUPT_COPY, value)
    yield set_


def test_memory_phase_verifies_hbm_h2d_and_d2h_and_the_seam_fails_only_its_copy(
        corrupt: Any) -> None:
    clean = tasks.memory(ctx(), hbm_bytes=1 << 16, copy_bytes=1 << 14, iters=1)
    assert clean["hbm_verify"]["ok"] and clean["hbm_verify"]["bytes"] == 1 << 15
    local = clean["host"]["local"]
    assert local["h2d_verify"]["ok"] and local["d2h_verify"]["ok"]
    for kind in ("hbm", "h2d", "d2h"):
        corrupt(f"{kind}:0")
        out = tasks.memory(ctx(), hbm_bytes=1 << 16, copy_bytes=1 << 14, iters=1)
        got = {"hbm": out["hbm_verify"]["ok"],
               "h2d": out["host"]["local"]["h2d_verify"]["ok"],
               "d2h": out["host"]["local"]["d2h_verify"]["ok"]}
        assert got == {k: k != kind for k in got}, kind


def test_p2p_verifies_every_ordered_pair_and_the_seam_names_one(corrupt: Any) -> None:
    corrupt("p2p:2-0")
    out = tasks.p2p(ctx(0, 3), nbytes=1 << 12, iters=1)
    assert set(out["verify"]) == {"0-1", "0-2", "1-0", "1-2", "2-0", "2-1"}
    assert [pair for pair, v in out["verify"].items() if not v["ok"]] == ["2-0"]


def test_allreduce_check_is_exact_and_names_the_first_wrong_element() -> None:
    world = 8
    parts = []
    for rank in range(world):
        buf = torch.empty(1000, dtype=torch.float32)
        copy_verify.allreduce_fill(buf, rank)
        parts.append(buf)
    total = torch.stack(parts).sum(0)
    assert copy_verify.allreduce_wrong(total, world) == (0, None)
    total[613] += 1
    total[900] = float("nan")
    assert copy_verify.allreduce_wrong(total, world) == (2, 613)


def test_allreduce_phase_checks_its_result_and_the_seam_corrupts_it(corrupt: Any) -> None:
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        clean = tasks.allreduce(ctx(), max_bytes=1 << 14, steps=2, seconds_per_size=0.01)
        assert [r["wrong"] for r in clean["sweep"]] == [0, 0]
        corrupt("allreduce:0")
        bad = tasks.allreduce(ctx(), max_bytes=1 << 14, steps=2, seconds_per_size=0.01)
        assert [r["wrong"] for r in bad["sweep"]] == [1, 1]
        assert bad["sweep"][0]["first_wrong"] == (bad["sweep"][0]["bytes"] // 4) // 2
    finally:
        dist.destroy_process_group()


# --- GEMM dtypes ----------------------------------------------------------------------------

def test_fp8_gemm_runs_through_scaled_mm_with_a_bf16_output() -> None:
    assert gemm_dtypes.unsupported("fp8", CPU) is None  # this torch has a CPU kernel
    a, b, out, mm = gemm_dtypes.operands("fp8", 32, CPU, tasks._seeded)
    mm()
    assert a.dtype == torch.float8_e4m3fn and b.stride() == (1, 32)  # column-major
    expected = a.float() @ b.float()
    assert out.dtype == torch.bfloat16
    assert torch.allclose(out.float(), expected, rtol=1e-2, atol=1e-1)
    assert gemm_dtypes.size_for("fp8", 8192, CPU) == gemm_dtypes.CPU_FP8_MAX_N
    assert gemm_dtypes.size_for("bf16", 8192, CPU) == 8192


def test_fp4_operands_are_nvfp4_shaped_and_this_cpu_torch_reports_why_it_cannot_run_them(
        ) -> None:
    """fp4 is NVFP4: packed e2m1 pairs, the second operand column-major, one unit e4m3 scale
    per 16 values. torch has no CPU kernel for it, so the phase names the reason (the judge
    SKIPs with it) instead of measuring."""
    n = gemm_dtypes.size_for("fp4", 300, CPU)
    assert n == 256 and gemm_dtypes.size_for("fp4", 64, CPU) == gemm_dtypes.FP4_ALIGN
    a, b, out, _mm = gemm_dtypes.operands("fp4", n, CPU, tasks._seeded)
    assert a.dtype == b.dtype == torch.float4_e2m1fn_x2
    assert a.shape == (n, n // 2) and b.shape == (n // 2, n) and b.stride() == (1, n // 2)
    assert out.shape == (n, n) and out.dtype == torch.bfloat16
    again = gemm_dtypes.operands("fp4", n, CPU, tasks._seeded)
    assert torch.equal(a.view(torch.uint8), again[0].view(torch.uint8))  # seeded: same bytes
    assert len(set(a.view(torch.uint8).flatten().tolist())) > 200  # not a constant fill
    why = gemm_dtypes.unsupported("fp4", CPU)
    assert why is not None and "fp4" in why and "cpu" in why and torch.__version__ in why
    out = tasks.gemm(ctx(), dtype="fp4", n=n, seconds=0.01, barrier=False)
    assert out == {"dtype": "fp4", "n": n, "unsupported": why}


def test_a_gpu_before_blackwell_is_told_fp4_needs_compute_capability_10(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    why = gemm_dtypes.unsupported("fp4", torch.device("cuda"))
    assert why == "fp4 GEMM needs compute capability 10.0 or later; this GPU is 9.0"
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    assert gemm_dtypes.unsupported("fp8", torch.device("cuda")) == (
        "fp8 GEMM needs compute capability 8.9 or later; this GPU is 8.0")


def test_gemm_phase_reports_an_unsupported_dtype_instead_of_running(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gemm_dtypes, "unsupported", lambda dtype, device: "no fp8 here")
    out = tasks.gemm(ctx(), dtype="fp8", n=32, seconds=0.01, barrier=False)
    assert out == {"dtype": "fp8", "n": 32, "unsupported": "no fp8 here"}


@pytest.mark.parametrize("dtype", ["fp16", "tf32", "fp8", "fp64"])
def test_every_dtype_gemm_measures_and_digests(dtype: str) -> None:
    out = tasks.gemm(ctx(), dtype=dtype, n=32, seconds=0.01, barrier=False)
    assert out["dtype"] == dtype and out["tflops"] > 0 and out["self_mismatches"] == 0
    assert len(out["digest"]) == 64
