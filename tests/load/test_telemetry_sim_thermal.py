"""Telemetry under our own load on the simulated board: cooling-failure@gpu4 FAILs gpu4's
thermal checks, the healthy board passes (the sampler marks load via nodegate.sim.runtime)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.slow]

SCRIPT = """
import json
from nodegate.battery import load_levels as levels
if __name__ == "__main__":
    prof = {"gpu": {"count": 5}, "load": {"gemm_size": 64, "gemm_seconds": 5, "hbm_bytes": 65536,
            "copy_bytes": 65536, "p2p_bytes": 16384, "allreduce_max_bytes": 16384,
            "allreduce_steps": 1, "copy_iters": 1, "sample_hz": 4, "collective_timeout_s": 20},
            "thresholds": {"thermal_margin_c_min": {"min": 5, "unit": "C", "source": "policy: t"},
                           "power_fraction_min": {"min": 0.85, "unit": "ratio", "source": "p"},
                           "clock_floor_mhz_min": {"min": 1400, "unit": "MHz", "source": "p"}}}
    out = levels.run(prof, "standard", workers=5)
    print("RESULT " + json.dumps({f"{r.check}[{r.entity}]": r.verdict.value for r in out.results
                                  if r.check in ("thermal_peak", "thermal_events",
                                                 "power_under_load", "clock_floor")}))
"""


def run_on(spec: str, tmp_path: Path) -> dict[str, str]:
    nodegate = shutil.which("nodegate") or str(Path(sys.executable).with_name("nodegate"))
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    proc = subprocess.run([nodegate, "sim", "run", spec, "--", sys.executable, str(script)],
                          capture_output=True, text=True, timeout=240, check=False)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line, proc.stdout[-2000:] + proc.stderr[-4000:]
    return dict(json.loads(line[len("RESULT "):]))


def test_cooling_failure_fails_gpu4_thermal_and_healthy_board_passes(tmp_path: Path) -> None:
    faulty = run_on("h100-hgx+cooling-failure@gpu4", tmp_path)
    assert faulty["thermal_peak[gpu4]"] == "FAIL"
    assert faulty["thermal_events[gpu4]"] == "FAIL"
    assert faulty["thermal_peak[gpu0]"] == "PASS"
    healthy = run_on("h100-hgx", tmp_path)
    assert {v for k, v in healthy.items() if k.startswith("thermal")} == {"PASS"}
    assert healthy["power_under_load[gpu4]"] == "PASS"


def test_power_brake_and_stuck_clocks_fail_their_gpus_only(tmp_path: Path) -> None:
    verdicts = run_on("h100-hgx+clocks-stuck-low@gpu2+power-brake@gpu3", tmp_path)
    failing = {k for k, v in verdicts.items() if v == "FAIL"}
    assert failing == {"clock_floor[gpu2]", "clock_floor[gpu3]", "thermal_events[gpu3]",
                       "power_under_load[gpu3]"}
