"""The simulator against a real board: a real H200's capture, replayed, must be judged as the
real board was.

On 2026-12-04 a lent H200 ran ``nodegate health --profile h200-single`` against its real driver
(580.159.04) and wrote ``nvidia-smi -q -x`` the same minute (``bench/h200_device.sh run``;
docs/hardware-runs/2026-12-04-h200-health.md). Both are kept under tests/sim/data. Replaying
the capture through ``nodegate sim import`` and the simulated libnvidia-ml must give every GPU
check the verdict and the value the real board got: where they differ, the simulator (or the
import) is wrong, never the real board. Host checks (services, the loaded module, nccl.conf)
describe the machine the run was on, not the board, and are not compared.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conftest import run_cli

DATA = Path(__file__).parent / "data"
CAPTURE = DATA / "corpus" / "nodegate-h200-lent-580.xml"
REAL_REPORT = DATA / "hardware" / "h200-lent-2026-12-04-health.json"


def _by_key(report: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["check"], r["entity"]): r for r in report["results"]}


def test_replayed_capture_is_judged_as_the_real_board(tmp_path: Path) -> None:
    scenario = tmp_path / "h200-real.yaml"
    res = run_cli("sim", "import", str(CAPTURE), "-o", str(scenario))
    assert res.returncode == 0, res.stderr
    res = run_cli("sim", "run", str(scenario), "--", "nodegate", "health", "--profile",
                  "h200-single", "--checks", "gpu", "--report-dir", str(tmp_path),
                  "--no-textfile", "--quiet", "--node-name", "lent-h200",
                  env={"NODEGATE_LOCK_FILE": str(tmp_path / "lock")})
    assert res.returncode in (0, 1), res.stderr
    simulated = _by_key(json.loads((tmp_path / "quick-latest.json").read_text()))
    real = _by_key(json.loads(REAL_REPORT.read_text()))
    assert len(simulated) >= 25  # the whole gpu group ran
    missing = set(simulated) - set(real)
    assert not missing, f"checks the real run did not make: {sorted(missing)}"
    differ = {key: (real[key]["verdict"], real[key].get("measured"),
                    sim["verdict"], sim.get("measured"))
              for key, sim in simulated.items()
              if (sim["verdict"], sim.get("measured"))
              != (real[key]["verdict"], real[key].get("measured"))}
    assert not differ, f"(real verdict, real value, simulated verdict, value): {differ}"


def test_real_board_passed_every_gpu_check_it_could_read() -> None:
    """The real report's own shape: a healthy card, so every GPU check passed or (page
    retirement on Hopper) did not apply. A FAIL here would mean the profile or the judge
    fails healthy hardware."""
    real = json.loads(REAL_REPORT.read_text())
    gpu_results = [r for r in real["results"] if r["entity"].startswith("gpu")]
    assert {r["verdict"] for r in gpu_results} == {"PASS", "SKIP"}
    assert [r["check"] for r in gpu_results if r["verdict"] == "SKIP"] == ["retired_pages"]
