"""PCIe as real boards behave: an idle GPU trains its link down (NVML: the current generation
"may be reduced when the GPU is not in use"), so the quick level judges the link's max
generation and the current width, and the load levels judge the current generation while
the GPU is busy.

Three boards, each through the simulator -> nvidia-ml-py -> our probe/sampler -> judge:
a healthy idle H100 (Gen1 now, Gen5 under load) passes both; ``pcie-downtrain`` fails both
(link max Gen4 at quick, Gen4 under load); ``pcie-slow-under-load`` (max Gen5, Gen3 when
busy) passes quick and fails under load.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nodegate.judge import load as verdicts
from nodegate.load.telemetry import GpuStatic, Telemetry
from nodegate.results import Verdict
from tests.conftest import run_cli

NvmlRun = Callable[..., Any]

# Raw NVML readings of gpu0 idle, then busy (a load mark, as our sampler sets one).
READ = """
h = n.nvmlDeviceGetHandleByIndex(0)
def link():
    return {"gen": n.nvmlDeviceGetCurrPcieLinkGeneration(h),
            "speed": n.nvmlDeviceGetPcieSpeed(h),
            "width": n.nvmlDeviceGetCurrPcieLinkWidth(h),
            "max_gen": n.nvmlDeviceGetMaxPcieLinkGeneration(h),
            "gpu_max_gen": n.nvmlDeviceGetGpuMaxPcieLinkGeneration(h),
            "max_width": n.nvmlDeviceGetMaxPcieLinkWidth(h),
            "max_speed": n.nvmlDeviceGetPcieLinkMaxSpeed(h)}
out["idle"] = link()
runtime.set_load(0, 100)
out["busy"] = link()
runtime.clear_load(0)
out["idle_again"] = link()
"""

# Our own sampler around a short load phase, judged against the profile's Gen5.
UNDER_LOAD = """
from nodegate.judge import load as verdicts
from nodegate.load.telemetry import Sampler
idx = list(range(n.nvmlDeviceGetCount()))
s = Sampler(idx, hz=20)
s.start()
time.sleep(0.15)
s.begin_phase(idx)
time.sleep(0.3)
s.end_phase(idx)
time.sleep(0.15)
tel = s.stop()
res = verdicts.pcie_under_load(tel, [f"gpu{i}" for i in idx], 5)
out["results"] = {r.entity: [r.verdict.value, r.measured, r.evidence.get("lowest")]
                  for r in res}
out["all_gpu0"] = sorted({int(v) for v in tel.samples("gpu0", "pcie_gen")})
"""

GEN5_MBPS = 32000  # nvmlDeviceGetPcieSpeed: Mbps per lane; PCIe 5.0 signals at 32 GT/s


def test_healthy_idle_board_reads_gen1_and_gen5_when_busy(nvml: NvmlRun) -> None:
    import pynvml

    got = nvml("h100-hgx", READ)
    idle, busy = got["idle"], got["busy"]
    assert idle["gen"] == 1 and idle["speed"] == 2500  # trained down, as a real idle H100
    assert busy["gen"] == 5 and busy["speed"] == GEN5_MBPS
    assert got["idle_again"]["gen"] == 1
    for reading in (idle, busy):
        assert (reading["max_gen"], reading["gpu_max_gen"]) == (5, 5)
        assert reading["width"] == reading["max_width"] == 16  # width does not downtrain
        assert reading["max_speed"] == pynvml.NVML_PCIE_LINK_MAX_SPEED_32000MBPS


def test_downtrain_fault_shows_at_max_and_under_load(nvml: NvmlRun) -> None:
    got = nvml("h100-hgx+pcie-downtrain@gpu0", READ)
    assert got["idle"]["max_gen"] == 4 and got["idle"]["gpu_max_gen"] == 5  # slot, not GPU
    assert got["idle"]["width"] == 8 and got["idle"]["max_width"] == 16
    assert got["idle"]["gen"] == 1 and got["busy"]["gen"] == 4  # never above the link's max


def test_slow_under_load_fault_reads_right_at_idle(nvml: NvmlRun) -> None:
    got = nvml("h100-hgx+pcie-slow-under-load@gpu0", READ)
    assert (got["idle"]["max_gen"], got["idle"]["gpu_max_gen"], got["idle"]["gen"]) == (5, 5, 1)
    assert got["busy"]["gen"] == 3


def _quick(spec: str, tmp_path: Path) -> dict[str, dict[str, Any]]:
    result = run_cli("sim", "run", spec, "--", "nodegate", "health", "--profile", "xe9680-h100",
                     "--checks", "gpu", "--report-dir", str(tmp_path), "--no-textfile",
                     "--quiet", env={"NODEGATE_LOCK_FILE": str(tmp_path / "lock")})
    assert result.returncode in (0, 1), result.stderr
    report = json.loads((tmp_path / "quick-latest.json").read_text())
    return {r["entity"]: r for r in report["results"] if r["check"] == "pcie_link"}


@pytest.mark.parametrize(("spec", "failing"), [
    ("h100-hgx", set()),
    ("h100-hgx+pcie-downtrain@gpu2", {"gpu2"}),
    ("h100-hgx+pcie-slow-under-load@gpu2", set()),
])
def test_quick_judges_max_gen_and_current_width(spec: str, failing: set[str],
                                                tmp_path: Path) -> None:
    links = _quick(spec, tmp_path)
    assert len(links) == 8
    assert {e for e, r in links.items() if r["verdict"] != "PASS"} == failing
    for entity, r in links.items():
        assert r["evidence"]["current_gen"] == 1  # idle Gen1 is evidence, never a verdict
        if entity in failing:
            assert r["verdict"] == "FAIL" and r["measured"] == "Gen4 x8"
            assert r["evidence"]["gpu_max_gen"] == 5 and "slot" in r["evidence"]["hint"]
        else:
            assert r["measured"] == "Gen5 x16"


@pytest.mark.parametrize(("spec", "failing", "under_load"), [
    ("h100-hgx", set(), "Gen5"),
    ("h100-hgx+pcie-downtrain@gpu2", {"gpu2"}, "Gen4"),
    ("h100-hgx+pcie-slow-under-load@gpu2", {"gpu2"}, "Gen3"),
])
def test_under_load_judges_current_gen_while_busy(nvml: NvmlRun, spec: str, failing: set[str],
                                                  under_load: str) -> None:
    got = nvml(spec, UNDER_LOAD)
    results = got["results"]
    assert {e for e, (v, _, _) in results.items() if v != "PASS"} == failing
    assert {v for e, (v, _, _) in results.items() if e in failing} <= {"FAIL"}
    for entity in failing:
        assert results[entity][1] == under_load
    assert results["gpu0"][1] == "Gen5"
    assert got["all_gpu0"] == [1, 5]  # idle samples read Gen1: the judge only counts busy ones


def test_unsampled_is_error_and_missing_gen_skips() -> None:
    off = verdicts.pcie_under_load(Telemetry(available=False, reason="NVML unavailable: x"),
                                   ["gpu0"], 5)
    assert [r.verdict for r in off] == [Verdict.ERROR] and "NVML unavailable" in str(off[0])
    idle_only = Telemetry(available=True, hz=1, loaded=[(10.0, 20.0)])
    idle_only.static["gpu0"] = GpuStatic()
    idle_only.series["gpu0"] = {"pcie_gen": [[1.0, 1.0], [25.0, 1.0]]}  # none while busy
    assert [r.verdict for r in verdicts.pcie_under_load(idle_only, ["gpu0"], 5)] == [
        Verdict.ERROR]
    assert [r.verdict for r in verdicts.pcie_under_load(idle_only, ["gpu0"], None)] == [
        Verdict.SKIP]


STANDARD = """
import json
import sys
from nodegate.battery import load_levels as levels
if __name__ == "__main__":
    prof = {"gpu": {"count": 3}, "pcie": {"gen": 5, "width": 16},
            "load": {"dtypes": ["bf16"], "gemm_size": 64, "gemm_seconds": 0.3,
                     "hbm_bytes": 65536, "copy_bytes": 65536, "p2p_bytes": 16384,
                     "allreduce_max_bytes": 16384, "allreduce_steps": 1, "copy_iters": 1,
                     "sample_hz": 4, "collective_timeout_s": 20, "min_phase_seconds": 0.3}}
    out = levels.run(prof, "standard", workers=3, duration_scale=0.02)
    print("RESULT " + json.dumps({r.entity: [r.verdict.value, r.measured] for r in out.results
                                  if r.check == "pcie_gen_under_load"}))
"""


@pytest.mark.torch
def test_standard_level_fails_a_link_slow_under_load(tmp_path: Path) -> None:
    """The whole standard level on CPU workers against the simulated board (about 3 s)."""
    pytest.importorskip("torch")
    script = tmp_path / "run.py"
    script.write_text(STANDARD)
    result = run_cli("sim", "run", "h100-hgx+pcie-slow-under-load@gpu1", "--", sys.executable,
                     str(script), timeout=240)
    line = next((x for x in result.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line, result.stdout[-2000:] + result.stderr[-4000:]
    got = json.loads(line[len("RESULT "):])
    assert got == {"gpu0": ["PASS", "Gen5"], "gpu1": ["FAIL", "Gen3"], "gpu2": ["PASS", "Gen5"]}
