"""Power limits per board SKU: the A100-SXM4-80GB ships on a 400 W board and on a 500 W one
(PCI subsystem 0x147F), and the profile must accept each at its own limit, not one figure."""

from __future__ import annotations

import pytest

from nodegate.judge.gpu import judge_gpu
from nodegate.probes.nvml import GpuState
from nodegate.profiles.loader import resolve_profile
from nodegate.results import CheckResult, Verdict

A100_500W_SKU = 0x147F  # nvidia-smi -q: "Sub System Id : 0x147F10DE", default limit 500 W
OTHER_SKU = 0x1463


def _power(subsystem: int | None, limit_w: float) -> CheckResult:
    gpu = GpuState(index=0, pci_subsystem_id=subsystem, power_limit_w=limit_w,
                   power_default_limit_w=limit_w)
    return next(r for r in judge_gpu(gpu, resolve_profile("hgx-a100-80gb"))
                if r.check == "power_limit")


def test_the_500_w_board_passes_at_500_w_and_names_its_sku() -> None:
    result = _power(A100_500W_SKU, 500.0)
    assert result.verdict == Verdict.PASS
    assert result.evidence["sku"] == "0x147F"
    assert result.evidence["sku_source"].startswith("datasheet: ")


@pytest.mark.parametrize("subsystem", [OTHER_SKU, None, A100_500W_SKU])
def test_a_400_w_board_still_passes(subsystem: int | None) -> None:
    assert _power(subsystem, 400.0).verdict == Verdict.PASS


@pytest.mark.parametrize(("subsystem", "limit_w"), [
    (A100_500W_SKU, 450.0),  # neither of the SKU's limits
    (A100_500W_SKU, 300.0),
    (OTHER_SKU, 500.0),  # 500 W only on the SKU built for it
    (None, 500.0),  # a board whose SKU NVML did not give is held to the model's figure
])
def test_a_wrong_limit_fails(subsystem: int | None, limit_w: float) -> None:
    result = _power(subsystem, limit_w)
    assert result.verdict == Verdict.FAIL
    assert result.measured == limit_w
