"""Real-shaped results: an 8-GPU H100 HGX node with one NVLink down, a warning, a skip, an error."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from nodegate.report import NodeReport, build
from nodegate.results import CheckResult, Severity, Verdict

START = dt.datetime(2024, 5, 14, 3, 15, 0, tzinfo=dt.timezone.utc)
FINISH = START + dt.timedelta(seconds=412.5)
GPUS = [f"gpu{index}" for index in range(8)]


def _pass(check: str, entity: str, measured: Any, threshold: Any, unit: str = "") -> CheckResult:
    return CheckResult(check, entity, measured, threshold, unit, Verdict.PASS, Severity.INFO)


def hgx_results() -> list[CheckResult]:
    results = [_pass("gpu_count", "node", 8, {"min": 8, "max": 8})]
    for gpu in GPUS:
        results.append(_pass("pcie_link", gpu, "Gen5 x16", "Gen5 x16"))
        results.append(_pass("ecc_remap_pending", gpu, 0, {"max": 0}, "rows"))
        for link in range(18):
            entity = f"{gpu}.link{link}"
            if entity == "gpu3.link5":
                results.append(
                    CheckResult(
                        "nvlink_state",
                        entity,
                        False,
                        True,
                        "",
                        Verdict.FAIL,
                        Severity.HARDWARE,
                        {
                            "message": "NVLink 5 on GPU 3 is inactive",
                            "pci_bus_id": "0000:9A:00.0",
                            "nvml": "nvmlDeviceGetNvLinkState -> NVML_FEATURE_DISABLED",
                        },
                    )
                )
            else:
                results.append(_pass("nvlink_state", entity, True, True))
    results.append(
        CheckResult(
            "p2p_bandwidth",
            "gpu2-gpu3",
            321.4,
            {"min": 335, "source": "peer-tool: azurehpc-health-checks nd96isr_h100_v5.conf"},
            "GB/s",
            Verdict.WARN,
            Severity.WARNING,
            {"message": "below peer-tool floor", "bytes": 4 << 30, "duration_s": 1.75},
        )
    )
    results.append(
        CheckResult(
            "fabricmanager_running",
            "node",
            None,
            "active",
            "",
            Verdict.SKIP,
            Severity.INFO,
            {"reason": "profile sets driver.fabricmanager: false"},
        )
    )
    results.append(
        CheckResult(
            "xid_errors",
            "node",
            None,
            {"max": 0},
            "events",
            Verdict.ERROR,
            Severity.CRITICAL,
            {"error": "journalctl -k timed out after 30 s", "returncode": -9},
        )
    )
    results.append(_pass("hbm_bandwidth", "gpu0", 2897.25, {"min": 2600}, "GB/s"))
    return results


def p2p_matrix() -> dict[str, Any]:
    values: list[list[float | None]] = [
        [None if row == col else 380.0 + row + col / 10 for col in range(8)] for row in range(8)
    ]
    values[2][3] = 321.4
    return {"unit": "GB/s", "entities": GPUS, "values": values}


def telemetry() -> dict[str, Any]:
    return {
        "telemetry": {
            gpu: {
                "power_w": [[float(t), 650.0 + t] for t in range(5)],
                "temperature_c": [[float(t), 61.0 + t / 2] for t in range(5)],
            }
            for gpu in GPUS
        }
    }


@pytest.fixture
def results() -> list[CheckResult]:
    return hgx_results()


@pytest.fixture
def report(results: list[CheckResult]) -> NodeReport:
    return build(
        results,
        node="xe9680-a12",
        profile="xe9680-h100",
        level="acceptance",
        started_at=START,
        finished_at=FINISH,
        backend="cuda/nccl",
        boot_id="6f1c2d9e-2b7a-4c55-9f0e-1d3c8a7b6e54",
        labels={"site": "example-site", "slurm_node": "gpu-a12"},
        series=telemetry(),
        matrices={"p2p_bandwidth": p2p_matrix()},
    )
