"""Per-link NVLink speed: the simulator answers ``NVML_FI_DEV_NVLINK_GET_SPEED`` for the link
in ``scopeId``, the probe reads every active link in one call, and the judge holds each link to
the GPU layer's per-link speed, by generation (H100 and B200 both have 18 links)."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pynvml

from nodegate.judge.gpu import judge_gpu
from nodegate.probes.nvml import GpuState, NvLinkState, _read_link_speeds, _Reader
from nodegate.profiles.cache import resolve_profile_cached
from nodegate.results import CheckResult, Verdict

NvmlRun = Callable[..., Any]


def test_speed_field_is_per_link(nvml: NvmlRun) -> None:
    got = nvml("b200-hgx+nvlink-slow@gpu1.link17", """
h = n.nvmlDeviceGetHandleByIndex(1)
values = n.nvmlDeviceGetFieldValues(
    h, [(n.NVML_FI_DEV_NVLINK_GET_SPEED, link) for link in (0, 17, 18)])
out["speeds"] = [[v.nvmlReturn, v.value.uiVal] for v in values]
""")
    ok, bad = pynvml.NVML_SUCCESS, pynvml.NVML_ERROR_INVALID_ARGUMENT
    assert got["speeds"][:2] == [[ok, 53125], [ok, 26562]]  # link 17 at half speed
    assert got["speeds"][2][0] == bad  # past the last link


def _gpu(speed: int | None, *, unsupported: bool = False) -> GpuState:
    links = [NvLinkState(link=i, active=True, version_enum=7, generation=5, crc_flit=0,
                         crc_data=0, replay=0, recovery=0, speed_mbps=53125)
             for i in range(18)]
    links[9].speed_mbps = speed
    gpu = GpuState(index=2, nvlinks=links)
    if unsupported:
        gpu.unsupported.append("nvlink9.speed")
    return gpu


def _speed(results: list[CheckResult], entity: str) -> CheckResult:
    return next(r for r in results if r.check == "nvlink_speed" and r.entity == entity)


def test_a_link_at_the_previous_generation_speed_fails_naming_gpu_and_link() -> None:
    """26562 MB/s is a healthy NVLink 4 link and half an NVLink 5 one: the layer decides."""
    results = judge_gpu(_gpu(26562), resolve_profile_cached("xe9680l-b200"))
    slow = _speed(results, "gpu2.link9")
    assert (slow.verdict, slow.measured, slow.unit) == (Verdict.FAIL, 26562, "MB/s")
    assert slow.threshold["min"] == 50000.0 and "NVLink 5" in slow.threshold["source"]
    assert _speed(results, "gpu2.link8").verdict is Verdict.PASS
    h100 = [NvLinkState(link=i, active=True, version_enum=6, generation=4, speed_mbps=26562)
            for i in range(18)]
    results = judge_gpu(GpuState(index=0, nvlinks=h100), resolve_profile_cached("xe9680-h100"))
    assert {r.verdict for r in results if r.check == "nvlink_speed"} == {Verdict.PASS}


def test_an_unreported_speed_is_error_never_pass() -> None:
    result = _speed(judge_gpu(_gpu(None, unsupported=True),
                              resolve_profile_cached("xe9680l-b200")), "gpu2.link9")
    assert result.verdict is Verdict.ERROR
    assert "NVML_ERROR_NOT_SUPPORTED" in result.evidence["reason"]


def _fake(answer: Any) -> Any:
    def field_values(handle: object, fields: list[tuple[int, int]]) -> Any:
        if isinstance(answer, Exception):
            raise answer
        return [SimpleNamespace(nvmlReturn=answer(link), value=SimpleNamespace(uiVal=53125))
                for _, link in fields]

    return SimpleNamespace(NVMLError=pynvml.NVMLError, NVML_SUCCESS=0, NVML_ERROR_GPU_IS_LOST=15,
                           NVML_ERROR_NOT_SUPPORTED=3, NVML_ERROR_FUNCTION_NOT_FOUND=13,
                           nvmlDeviceGetFieldValues=field_values)


def test_probe_records_each_links_own_answer() -> None:
    gpu = GpuState(index=0, nvlinks=[NvLinkState(link=i, active=i != 2) for i in range(4)])
    _read_link_speeds(_fake(lambda link: 10 if link == 3 else 0), _Reader(None, gpu), None)
    assert [link.speed_mbps for link in gpu.nvlinks] == [53125, 53125, None, None]
    assert gpu.read_errors == {"nvlink3.speed": "NVML_ERROR_TIMEOUT"}
    whole = GpuState(index=0, nvlinks=[NvLinkState(link=i, active=True) for i in range(2)])
    _read_link_speeds(_fake(pynvml.NVMLError(3)), _Reader(None, whole), None)
    assert whole.unsupported == ["nvlink0.speed", "nvlink1.speed"]
