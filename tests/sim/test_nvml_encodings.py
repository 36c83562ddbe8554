"""NVML's encodings as nvml.h defines them, and the judge reading them the same way.

The numbers in the assertions are the ones nvml.h and nvidia-ml-py publish; the point is
that nodegate's tables are derived from pynvml, not copied, and that the judge compares the
NVLink *generation*, never the ``nvmlNvlinkVersion_t`` enum a real driver returns.
"""

from __future__ import annotations

import pynvml
import pytest

from nodegate.judge.gpu import _nvlinks
from nodegate.probes import nvml_codes
from nodegate.probes.nvml import GpuState, NvLinkState
from nodegate.profiles.loader import resolve_profile
from nodegate.results import Verdict


@pytest.mark.parametrize(("enum", "generation"), [
    (pynvml.NVML_NVLINK_VERSION_1_0, 1), (pynvml.NVML_NVLINK_VERSION_2_0, 2),
    (pynvml.NVML_NVLINK_VERSION_2_2, 2), (pynvml.NVML_NVLINK_VERSION_3_0, 3),
    (pynvml.NVML_NVLINK_VERSION_3_1, 3), (pynvml.NVML_NVLINK_VERSION_4_0, 4),
    (pynvml.NVML_NVLINK_VERSION_5_0, 5),
])
def test_nvlink_version_enum_to_generation(enum: int, generation: int) -> None:
    assert nvml_codes.nvlink_generation(enum) == generation


def test_nvlink_enum_values_are_nvml_h() -> None:
    """nvml.h: _3_0 = 4, _3_1 = 5, _4_0 = 6, _5_0 = 7: an H100 reads 6, not 4."""
    assert (pynvml.NVML_NVLINK_VERSION_3_0, pynvml.NVML_NVLINK_VERSION_4_0,
            pynvml.NVML_NVLINK_VERSION_5_0) == (4, 6, 7)
    assert nvml_codes.nvlink_generation(6) == 4
    assert nvml_codes.nvlink_generation(pynvml.NVML_NVLINK_VERSION_INVALID) is None
    assert nvml_codes.nvlink_generation(99) is None
    assert nvml_codes.nvlink_generation(None) is None


def test_clock_event_bits_follow_pynvml() -> None:
    bits = nvml_codes.CLOCK_EVENT_BITS
    assert bits[pynvml.nvmlClocksThrottleReasonGpuIdle] == "gpu_idle"
    assert bits[pynvml.nvmlClocksThrottleReasonHwThermalSlowdown] == "hw_thermal_slowdown"
    assert bits[pynvml.nvmlClocksThrottleReasonHwPowerBrakeSlowdown] == \
        "hw_power_brake_slowdown"
    assert bits[pynvml.nvmlClocksThrottleReasonSwPowerCap] == "sw_power_cap"
    assert all(b & (b - 1) == 0 for b in bits)          # one bit each, no masks
    assert nvml_codes.CLOCK_EVENTS_FATAL == 0x8 | 0x40 | 0x80
    assert nvml_codes.FABRIC_STATE_COMPLETED == 3


def _gpu(enums: list[int | None]) -> GpuState:
    gpu = GpuState(index=0)
    gpu.nvlinks = [NvLinkState(link=i, active=True, version_enum=e,
                               generation=nvml_codes.nvlink_generation(e),
                               crc_flit=0, crc_data=0, replay=0, recovery=0)
                   for i, e in enumerate(enums)]
    return gpu


def test_real_h100_links_pass_and_wrong_generation_fails() -> None:
    profile = resolve_profile("xe9680-h100")
    links = profile.data["nvlink"]["links_per_gpu"]
    real = [pynvml.NVML_NVLINK_VERSION_4_0] * links        # what a real H100 driver returns
    states = [r for r in _nvlinks(_gpu(list(real)), profile) if r.check == "nvlink_state"]
    assert len(states) == links and all(r.verdict == Verdict.PASS for r in states)
    assert states[0].evidence["nvml_version_enum"] == 6

    mixed: list[int | None] = list(real)
    mixed[2] = pynvml.NVML_NVLINK_VERSION_3_0              # an NVLink 3 link on an H100
    mixed[5] = None                                        # unreadable
    by_entity = {r.entity: r for r in _nvlinks(_gpu(mixed), profile)
                 if r.check == "nvlink_state"}
    assert by_entity["gpu0.link2"].verdict == Verdict.FAIL
    assert by_entity["gpu0.link5"].verdict == Verdict.ERROR
    assert by_entity["gpu0.link0"].verdict == Verdict.PASS


@pytest.mark.parametrize("prefix", ["NVML_NVLINK_VERSION_", "nvmlClocksEventReason",
                                    "nvmlClocksThrottleReason", "NVML_ERROR_", "NVML_", "zz"])
def test_the_tables_read_every_name_with_their_prefix(prefix: str) -> None:
    assert nvml_codes._named(prefix) == [name for name in dir(pynvml) if name.startswith(prefix)]
