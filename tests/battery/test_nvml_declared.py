"""Unmeasured is ERROR, NOT_SUPPORTED is declared (docs/verdicts.md): any NVML error but
NOT_SUPPORTED on any read is ERROR on that entity with NVML's error name in the evidence, and
NOT_SUPPORTED is a SKIP only where the GPU model (``gpu.features``) lacks the feature."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from nodegate.judge.gpu import judge_board, judge_gpu
from nodegate.probes.nvml import BoardSnapshot, GpuState, NvLinkState, _read_nvlinks, _Reader
from nodegate.profiles.cache import resolve_profile_cached
from nodegate.results import CheckResult, Verdict

TIMEOUT = "NVML_ERROR_TIMEOUT (Timeout)"


def _by(results: list[CheckResult], check: str, entity: str = "gpu0") -> CheckResult:
    return next(r for r in results if r.check == check and r.entity == entity)


def _healthy_h100(**changes: Any) -> GpuState:
    """A GPU state as a healthy H100 reads, with ``changes`` applied."""
    links = [NvLinkState(link=i, active=True, version_enum=6, generation=4, crc_flit=0,
                         crc_data=0, replay=0, recovery=0, speed_mbps=26562)
             for i in range(18)]
    base: dict[str, Any] = dict(
        index=0, name="NVIDIA H100 80GB HBM3", pci_device_id=0x2330, vbios="96.00.A5.00.01",
        inforom_image="G520.0200.00.05", inforom_ecc="7.0", inforom_valid=True,
        memory_total_mib=81559, temperature_c=34, power_limit_w=700.0, clock_event_reasons=1,
        pcie_gen_max=5, pcie_width=16, pcie_replays=0, ecc_enabled=True, ecc_pending=True,
        dbe_volatile=0, dbe_aggregate=0, sbe_volatile=0, sbe_aggregate=0, remap_correctable=0,
        remap_uncorrectable=0, remap_pending=False, remap_failure=False, persistence=True,
        mig_enabled=False, compute_mode=0, fabric_state=3, fabric_status=0,
        fabric_health_mask=0, utilization_pct=0, nvlinks=links,
        unsupported=["retired_pages_sbe", "retired_pages_dbe", "retired_pages_pending"])
    base.update(changes)
    return GpuState(**base)


def test_the_healthy_state_passes() -> None:
    """The fixture itself: every check PASS but the page retirement Hopper does not have."""
    results = judge_gpu(_healthy_h100(), resolve_profile_cached("xe9680-h100"))
    assert {(r.check, r.verdict) for r in results if r.verdict is not Verdict.PASS} == {
        ("retired_pages", Verdict.SKIP)}


def test_a_timed_out_process_list_is_error_not_zero_processes() -> None:
    """The process list TIMEOUT read as "no process": PASS with a measured 0 (fails before)."""
    gpu = _healthy_h100(read_errors={"processes": TIMEOUT})
    result = _by(judge_gpu(gpu, resolve_profile_cached("xe9680-h100")), "foreign_processes")
    assert result.verdict is Verdict.ERROR and result.measured is None
    assert result.evidence["nvml_errors"] == {"processes": TIMEOUT}


def test_one_timed_out_crc_counter_is_error_not_the_other_counter() -> None:
    """crc = flit + data: a TIMEOUT on flit with data 0 passed as 0 CRC errors."""
    gpu = _healthy_h100(read_errors={"nvlink2.crc_flit": TIMEOUT})
    gpu.nvlinks[2].crc_flit = None
    result = _by(judge_gpu(gpu, resolve_profile_cached("xe9680-h100")), "nvlink_crc_errors",
                 "gpu0.link2")
    assert result.verdict is Verdict.ERROR
    assert "NVML_ERROR_TIMEOUT" in result.evidence["reason"]


def test_an_error_on_a_field_only_in_evidence_is_error_too() -> None:
    """The GPU's utilization decides whether its temperature is an idle one."""
    gpu = _healthy_h100(utilization_pct=None,
                        read_errors={"utilization": "NVML_ERROR_UNKNOWN (Unknown Error)"})
    result = _by(judge_gpu(gpu, resolve_profile_cached("xe9680-h100")), "idle_temperature")
    assert result.verdict is Verdict.ERROR
    assert result.evidence["nvml_errors"] == {"utilization": "NVML_ERROR_UNKNOWN (Unknown Error)"}


class _Error(Exception):
    def __init__(self, value: int) -> None:
        super().__init__({2: "Invalid Argument", 3: "Not Supported", 10: "Timeout"}[value])
        self.value = value


def _fake_nvml(state: dict[int, int | Exception]) -> Any:
    def link_state(handle: object, link: int) -> int:
        value = state.get(link, _Error(2))
        if isinstance(value, Exception):
            raise value
        return value

    return SimpleNamespace(
        NVMLError=_Error, NVML_ERROR_GPU_IS_LOST=15, NVML_ERROR_NOT_SUPPORTED=3,
        NVML_ERROR_FUNCTION_NOT_FOUND=13, NVML_ERROR_INVALID_ARGUMENT=2, NVML_SUCCESS=0,
        nvmlDeviceGetNvLinkState=link_state,
        nvmlDeviceGetFieldValues=lambda handle, fields: [  # every link's speed, H100's
            SimpleNamespace(nvmlReturn=0, value=SimpleNamespace(uiVal=26562)) for _ in fields],
        nvmlDeviceGetNvLinkVersion=lambda handle, link: 6,
        nvmlDeviceGetNvLinkRemotePciInfo=lambda handle, link: SimpleNamespace(busId=b"x"))


def test_an_nvlink_state_error_is_error_naming_nvml_not_an_absent_link() -> None:
    """A link whose state read timed out was "absent" (FAIL) with empty evidence."""
    nvml = _fake_nvml({**{i: 1 for i in range(18)}, 4: _Error(10)})
    gpu = _healthy_h100(nvlinks=[])
    _read_nvlinks(nvml, _Reader(nvml, gpu), object(), with_counters=False)
    assert gpu.read_errors == {"nvlink4.state": "NVML_ERROR_TIMEOUT (Timeout)"}
    for link in gpu.nvlinks:
        link.crc_flit = link.crc_data = link.replay = link.recovery = 0
    result = _by(judge_gpu(gpu, resolve_profile_cached("xe9680-h100")), "nvlink_state",
                 "gpu0.link4")
    assert result.verdict is Verdict.ERROR
    assert "NVML_ERROR_TIMEOUT" in result.evidence["reason"]


def test_a_link_past_the_last_one_is_absent_with_the_reason() -> None:
    nvml = _fake_nvml({i: 1 for i in range(17)})  # link 17: INVALID_ARGUMENT
    gpu = _healthy_h100(nvlinks=[])
    _read_nvlinks(nvml, _Reader(nvml, gpu), object(), with_counters=False)
    assert gpu.read_errors == {}
    result = _by(judge_gpu(gpu, resolve_profile_cached("xe9680-h100")), "nvlink_state",
                 "gpu0.link17")
    assert result.verdict is Verdict.FAIL and result.measured == "absent"
    assert "no such link" in result.evidence["reason"]


@pytest.mark.parametrize(("fields", "checks"), [
    ({"dbe_volatile": None, "sbe_volatile": None},
     ("ecc_dbe_volatile", "ecc_sbe_volatile")),
    ({"remap_pending": None, "remap_failure": None, "remap_uncorrectable": None,
      "remap_correctable": None}, ("remap_pending", "remap_failure", "remap_uncorrectable")),
    ({"fabric_state": None, "fabric_status": None}, ("fabric_state",)),
    ({"mig_enabled": None}, ("mig_mode",)),
])
def test_not_supported_on_a_feature_the_model_declares_is_error(
        fields: dict[str, None], checks: tuple[str, ...]) -> None:
    """ECC counters with ECC on, row remapping, fabric state on Hopper, MIG: the H100 has
    them all (gpu.features), so NOT_SUPPORTED is the GPU not answering (SKIP before)."""
    labels = {"dbe_volatile": "dbe_volatile", "sbe_volatile": "sbe_volatile",
              "remap_pending": "remapped_rows", "fabric_state": "fabric",
              "mig_enabled": "mig_mode"}
    unsupported = sorted({labels[k] for k in fields if k in labels})
    gpu = _healthy_h100(**fields)
    gpu.unsupported += unsupported
    results = judge_gpu(gpu, resolve_profile_cached("xe9680-h100"))
    for check in checks:
        result = _by(results, check)
        assert result.verdict is Verdict.ERROR, (check, result.evidence)
        assert "NVML_ERROR_NOT_SUPPORTED" in result.evidence["reason"]
        assert "pre-Hopper" not in result.evidence["reason"]
        assert "gpu.features." in result.evidence["reason"]


def test_not_supported_where_the_model_lacks_the_feature_is_skip_naming_it() -> None:
    """A model layer that declares no row remapping: its SKIP says so."""
    profile = resolve_profile_cached("xe9680-h100")
    data = {**profile.data, "gpu": {**profile.data["gpu"], "features": {
        **profile.data["gpu"]["features"], "row_remapping": False}}}
    without = type(profile)(**{**vars(profile), "data": data})
    gpu = _healthy_h100(remap_pending=None, remap_failure=None, remap_uncorrectable=None,
                        remap_correctable=None)
    gpu.unsupported.append("remapped_rows")
    result = _by(judge_gpu(gpu, without), "remap_pending")
    assert result.verdict is Verdict.SKIP
    assert "gpu.features.row_remapping: false" in result.evidence["reason"]


def test_nvlink_encodings_the_model_declares_pass() -> None:
    """A100 boards return NVLink 3_1 as well as 3_0; H100 drivers 5_0 as well as 4_0."""
    a100 = resolve_profile_cached("hgx-a100-80gb")
    links = [NvLinkState(link=i, active=True, version_enum=5 if i % 2 else 4,
                         generation=3, crc_flit=0, crc_data=0, replay=0, recovery=0)
             for i in range(12)]
    states = [r for r in judge_gpu(_healthy_h100(nvlinks=links), a100)
              if r.check == "nvlink_state"]
    assert len(states) == 12 and {r.verdict for r in states} == {Verdict.PASS}
    h100 = resolve_profile_cached("xe9680-h100")
    gpu = _healthy_h100()
    gpu.nvlinks[0].version_enum, gpu.nvlinks[0].generation = 7, 5
    gpu.nvlinks[1].version_enum, gpu.nvlinks[1].generation = 4, 3
    results = judge_gpu(gpu, h100)
    assert _by(results, "nvlink_state", "gpu0.link0").verdict is Verdict.PASS
    wrong = _by(results, "nvlink_state", "gpu0.link1")
    assert wrong.verdict is Verdict.FAIL
    assert "NVML_NVLINK_VERSION_4_0" in wrong.evidence["accepted"]


def test_an_inforom_check_that_timed_out_is_error_not_valid() -> None:
    """nvmlDeviceValidateInforom TIMEOUT was taken as a valid InfoROM (PASS)."""
    gpu = _healthy_h100(inforom_valid=None,
                        read_errors={"inforom_validate": "NVML_ERROR_TIMEOUT (Timeout)"})
    board = BoardSnapshot(driver_version="570.133.20", nvml_version=None,
                          cuda_driver_version=None, device_count=1, gpus=[gpu])
    result = _by(judge_board(board, resolve_profile_cached("h200-single")), "inforom_uniform")
    assert result.verdict is Verdict.ERROR
    assert "NVML_ERROR_TIMEOUT" in result.evidence["reason"]


def test_ecc_not_reported_is_no_corrupt_inforom() -> None:
    """A capture's ECC N/A (no ECC object either) was a "corrupt InfoROM" ERROR; it is the
    ECC mode's ERROR, and the InfoROM is judged on what it has."""
    gpu = _healthy_h100(ecc_enabled=None, ecc_pending=None, inforom_ecc=None)
    gpu.unsupported += ["ecc_mode", "inforom_ecc"]
    board = BoardSnapshot(driver_version="570.133.20", nvml_version=None,
                          cuda_driver_version=None, device_count=1, gpus=[gpu])
    results = judge_board(board, resolve_profile_cached("h200-single"))
    assert _by(results, "inforom_uniform").verdict is Verdict.PASS
    assert _by(results, "ecc_mode").verdict is Verdict.ERROR


def test_remapped_rows_not_supported_under_mig_is_explained() -> None:
    """nvml.h: no remapped rows on a MIG-enabled GPU with active instances (a real MIG A100
    capture, telegraf-a100-sxm4-v12.xml, shows N/A); mig_mode judges that mode."""
    gpu = _healthy_h100(mig_enabled=True, remap_pending=None, remap_failure=None,
                        remap_uncorrectable=None, remap_correctable=None)
    gpu.unsupported.append("remapped_rows")
    results = judge_gpu(gpu, resolve_profile_cached("xe9680-h100"))
    assert _by(results, "mig_mode").verdict is Verdict.FAIL
    remap = _by(results, "remap_pending")
    assert remap.verdict is Verdict.SKIP and "MIG" in remap.evidence["reason"]
