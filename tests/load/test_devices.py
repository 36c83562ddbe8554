"""Where a load worker's GPU and host memory are: NVML names, NUMA pages, the GEMM bit check."""

from __future__ import annotations

import ctypes
import mmap
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nodegate.battery import load_levels as levels
from nodegate.errors import CannotRunError
from nodegate.judge import load as verdicts
from nodegate.load import devices
from nodegate.load.telemetry import GpuStatic, Telemetry
from nodegate.results import Verdict

CUDA = devices.Backend("cuda", "nccl", 4)
CPU = devices.Backend("cpu", "gloo", 0)
UUIDS = {"GPU-1111aaaa-0000": 0, "GPU-2222bbbb-0000": 1, "GPU-3333cccc-0000": 2,
         "GPU-3333dddd-0000": 3}


@pytest.mark.parametrize(("visible", "expected"), [
    (None, [0, 1, 2, 3]),
    ("", [0, 1, 2, 3]),
    ("4,5,6,7", [4, 5, 6, 7]),
    ("GPU-2222bbbb-0000,GPU-1111,3,GPU-3333d", [1, 0, 3, 3]),
])
def test_each_rank_is_named_by_its_nvml_index(visible: str | None,
                                               expected: list[int]) -> None:
    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    assert devices.nvml_indices(CUDA, 4, env, UUIDS) == expected


def test_cpu_runs_ignore_cuda_visible_devices() -> None:
    assert devices.nvml_indices(CPU, 3, {"CUDA_VISIBLE_DEVICES": "5,6,7"}, UUIDS) == [0, 1, 2]


@pytest.mark.parametrize(("visible", "why"), [
    ("MIG-0f8c3e2a-1111", "MIG instances"),
    ("GPU-3333", r"matches 2 GPU\(s\)"),
    ("GPU-9999", r"matches 0 GPU\(s\)"),
])
def test_ambiguous_or_mig_visible_devices_cannot_run(visible: str, why: str) -> None:
    with pytest.raises(CannotRunError, match=why):
        devices.nvml_indices(CUDA, 1, {"CUDA_VISIBLE_DEVICES": visible}, UUIDS)


def test_rank_entities_are_renamed_to_nvml_gpus() -> None:
    results = [verdicts.make("gemm_tflops", "gpu0", Verdict.PASS, measured=1.0),
               verdicts.make("p2p_unidir", "gpu1-gpu0", Verdict.PASS, measured=2.0),
               verdicts.make("allreduce_busbw", "node", Verdict.PASS, measured=3.0)]
    matrices = {"p2p_unidir_gbps": {"unit": "GB/s", "entities": ["gpu0", "gpu1"],
                                    "values": [[0, 1], [1, 0]]}}
    named, renamed = levels.name_gpus(results, matrices, [4, 6])
    assert [r.entity for r in named] == ["gpu4", "gpu6-gpu4", "node"]
    assert renamed["p2p_unidir_gbps"]["entities"] == ["gpu4", "gpu6"]
    assert renamed["p2p_unidir_gbps"]["values"] == [[0, 1], [1, 0]]
    same, _ = levels.name_gpus(results, matrices, [0, 1])
    assert same is results


@pytest.mark.skipif(platform.machine() not in devices.SYS_MOVE_PAGES,
                    reason="move_pages number unknown here")
def test_page_nodes_reports_touched_pages_only() -> None:
    size = 8 << 20
    with mmap.mmap(-1, size) as mem:
        address = ctypes.addressof(ctypes.c_char.from_buffer(mem))
        assert devices.page_nodes(address, size) == {}  # nothing touched: nothing placed
        mem.write(b"\x01" * size)
        pages = devices.page_nodes(address, size)
        assert sum(pages.values()) == devices.PAGE_SAMPLES
        assert set(pages) <= set(devices.numa_nodes()) | {0}
        node = next(iter(pages))
        assert devices.placed_on(pages, node) is True
        assert devices.placed_on(pages, node + 1) is False
        assert devices.placed_on(pages, None) is None


def test_short_load_leaves_power_unjudged_long_load_judges_it() -> None:
    th = verdicts.thresholds_of({"thresholds": {
        "power_fraction_min": {"min": 0.85, "unit": "ratio", "source": "policy: test"}}})

    def telemetry(seconds: float) -> Telemetry:
        tel = Telemetry(available=True, hz=2, windows=[("gemm", 0.0, seconds)])
        tel.static["gpu0"] = GpuStatic(slowdown_c=87, power_limit_w=700)
        tel.series["gpu0"] = {"temp_c": [[0.1, 50.0]], "power_w": [[0.1, 300.0]],
                              "sm_clock_mhz": [], "clock_event_reasons": [], "mem_temp_c": []}
        return tel

    short = verdicts.telemetry(telemetry(0.6), th, ["gpu0"], power_settle_s=5)
    power = next(r for r in short if r.check == "power_under_load")
    assert power.verdict == Verdict.SKIP
    assert "lasted 0.6 s" in power.evidence["reason"]
    long = verdicts.telemetry(telemetry(30), th, ["gpu0"], power_settle_s=5)
    power = next(r for r in long if r.check == "power_under_load")
    assert power.verdict == Verdict.FAIL and power.measured == pytest.approx(300 / 700, 1e-3)


@pytest.mark.parametrize("shape", [(64, 64), (3, 3), (1, 3)])  # int64, int16/int32 words
def test_gemm_checksum_sees_every_single_bit_flip(shape: tuple[int, int]) -> None:
    torch = pytest.importorskip("torch")
    from nodegate.load.tasks import _checksum

    gen = torch.Generator().manual_seed(7)
    for dtype, bits in ((torch.bfloat16, 16), (torch.float32, 32)):
        out = torch.randn(*shape, generator=gen).to(dtype)
        reference = _checksum(out)
        ints = out.view(-1).view(torch.int16 if bits == 16 else torch.int32)
        for position in sorted({0, 1 % ints.numel(), 777 % ints.numel(), ints.numel() - 1}):
            for bit in (0, 7, bits - 1):  # low mantissa, exponent, sign
                flipped = ints.clone()
                flipped[position] ^= (1 << bit) if bit < bits - 1 else -(1 << bit)
                assert int(_checksum(flipped.view(dtype).view(*shape))) != int(reference)
        assert int(_checksum(out.clone())) == int(reference)


def test_gemm_checksum_makes_no_widened_copy() -> None:
    """The sum runs in the words' own type: a cast to int64 first would write 4x the output's
    bytes per GEMM iteration (the CUDA cost the checksum exists to avoid). Measured by torch's
    profiler in a fresh interpreter (in this one, ansible's sys.intern patch trips torch's
    compiler, which the profiler imports)."""
    pytest.importorskip("torch")
    code = ("import torch\n"
            "from torch.profiler import ProfilerActivity, profile\n"
            "from nodegate.load.tasks import _checksum\n"
            "out = torch.randn(256, 256).to(torch.bfloat16)\n"
            "with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:\n"
            "    _checksum(out)\n"
            "print(sum(e.cpu_memory_usage for e in prof.key_averages() "
            "if e.cpu_memory_usage > 0), out.numel())\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    allocated, elements = map(int, proc.stdout.split()[-2:])
    assert allocated < elements  # a scalar, not a copy (a widened copy is 8 bytes/element)


def test_host_buffer_is_registered_in_place_and_unregistered_after(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The CUDA path's bookkeeping, with CUDA's driver replaced by a recorder."""
    torch = pytest.importorskip("torch")
    calls: list[tuple[str, int]] = []

    class FakeDriver:
        def cuMemHostRegister_v2(self, ptr: int, size: int, flags: int) -> int:
            calls.append(("register", ptr))
            assert (size, flags) == (1 << 20, devices.CU_MEMHOSTREGISTER_PORTABLE)
            return 0

        def cuMemHostUnregister(self, ptr: int) -> int:
            calls.append(("unregister", ptr))
            return 0

    monkeypatch.setattr(devices, "cuda_driver", FakeDriver)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: calls.append(("sync", 0)))
    with devices.host_buffer(1 << 20, pin=True) as (host, pinning):
        assert pinning == "registered"
        assert calls == [("sync", 0), ("register", host.data_ptr())]
        assert int(host[12345]) == 3  # touched before it was pinned
        ptr = host.data_ptr()
    assert calls[2:] == [("sync", 0), ("unregister", ptr)]


def test_the_cuda_driver_binding_is_typed_for_64_bit_pointers_and_sizes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """ctypes' default is a C int per argument: a pointer or a >2 GiB size would be cut."""
    class Lib:
        def __init__(self) -> None:
            self.cuMemHostRegister_v2 = type("F", (), {})()
            self.cuMemHostUnregister = type("F", (), {})()

    lib = Lib()
    monkeypatch.setattr(ctypes, "CDLL", lambda name: lib if name == "libcuda.so.1" else None)
    assert devices.cuda_driver() is lib
    reg = lib.cuMemHostRegister_v2
    assert reg.argtypes == [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]  # type: ignore[attr-defined]
    assert lib.cuMemHostUnregister.argtypes == [ctypes.c_void_p]  # type: ignore[attr-defined]
    monkeypatch.setattr(ctypes, "CDLL", lambda name: (_ for _ in ()).throw(OSError(name)))
    assert devices.cuda_driver() is None  # no driver: the caller falls back to torch's pool


@pytest.mark.parametrize(("nvml_id", "sysfs"), [
    ("00000000:18:00.0", "0000:18:00.0"),
    ("00000001:9A:00.0", "0001:9a:00.0"),
    ("garbage", None),
])
def test_nvml_bus_ids_become_sysfs_names(nvml_id: str, sysfs: str | None) -> None:
    assert devices.sysfs_pci_address(nvml_id) == sysfs


class _Props:
    def __init__(self, **attrs: object) -> None:
        self.__dict__.update(attrs)


def test_a_gpus_numa_node_comes_from_its_pci_function_in_sysfs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    (tmp_path / "0000:9a:00.0").mkdir()
    (tmp_path / "0000:9a:00.0" / "numa_node").write_text("1\n")
    (tmp_path / "0000:1b:00.0").mkdir()
    (tmp_path / "0000:1b:00.0" / "numa_node").write_text("-1\n")
    props = {0: _Props(pci_domain_id=0, pci_bus_id=0x9A, pci_device_id=0),
             1: _Props(pci_domain_id=0, pci_bus_id=0x1B, pci_device_id=0),
             2: _Props(pci_domain_id=0, pci_bus_id=0x42, pci_device_id=0)}
    monkeypatch.setattr(torch.cuda, "get_device_properties", props.__getitem__)
    assert devices.gpu_numa_node(CUDA, 0, sys_pci=tmp_path) == 1
    assert devices.gpu_numa_node(CUDA, 1, sys_pci=tmp_path) is None  # -1: no affinity
    assert devices.gpu_numa_node(CUDA, 2, sys_pci=tmp_path) is None  # no such function
    assert devices.gpu_numa_node(CPU, 0, sys_pci=tmp_path) is None


def test_older_torch_without_pci_fields_asks_nvml_by_uuid(
        monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    def nvml(uuid: str) -> str:
        asked.append(uuid)
        return "0000:18:00.0"

    monkeypatch.setattr(devices, "_nvml_pci_address", nvml)
    assert devices.pci_address(_Props(uuid="3e4b5a1c-0000")) == "0000:18:00.0"
    assert asked == ["GPU-3e4b5a1c-0000"]
    assert devices.pci_address(_Props()) is None


@pytest.mark.slow
def test_nvml_lookup_by_uuid_on_the_simulated_board(tmp_path: Path) -> None:
    """The NVML half for real: the simulated libnvidia-ml under the real pynvml."""
    code = ("import pynvml as n\n"
            "from nodegate.load import devices\n"
            "n.nvmlInit()\n"
            "h = n.nvmlDeviceGetHandleByIndex(3)\n"
            "uuid, bus = n.nvmlDeviceGetUUID(h), n.nvmlDeviceGetPciInfo(h).busId\n"
            "print(devices._nvml_pci_address(uuid), bus)\n")
    nodegate = shutil.which("nodegate") or str(Path(sys.executable).with_name("nodegate"))
    proc = subprocess.run([nodegate, "sim", "run", "h100-hgx", "--", sys.executable, "-c", code],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    found, bus = proc.stdout.split()[-2:]
    assert found == devices.sysfs_pci_address(bus)
    assert found.count(":") == 2 and len(found.split(":")[0]) == 4


def test_one_gpu_runs_its_group_on_gloo_several_on_nccl() -> None:
    assert devices.for_world(CUDA, 1).name == "cuda/gloo"
    assert devices.for_world(CUDA, 4) == CUDA
    assert devices.for_world(CPU, 1) == CPU
