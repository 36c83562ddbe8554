"""Every real capture in tests/sim/data/corpus imports and runs, or exits 2 naming the field.

The corpus is public test data of monitoring agents (see its README.md). Each file goes through
the real CLI, as an operator would run it: a traceback is a bug whatever the file holds.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import run_cli

CORPUS = Path(__file__).parent / "data" / "corpus"

# file -> None when it imports, else the XML path the exit-2 message must name
EXPECTED: dict[str, str | None] = {
    "datakit-gtx-1050-1.xml": "gpu[0]/power_readings/power_limit",  # no power management
    "datakit-gtx-1card.xml": None,
    "datakit-gtx-8card.xml": None,
    "nodegate-h200-lent-580.xml": None,
    "telegraf-3090-v13.xml": None,
    "telegraf-a100-sxm4-v12.xml": "attached_gpus",  # 1 of 4 GPUs
    "telegraf-a10g.xml": "gpu[0]/pci/pci_device_id",  # 000000DE: redacted
    "telegraf-dual_2070-v13.xml": None,
    "telegraf-dual_2080-v13.xml": "gpu[1]/uuid",  # both GPUs carry one made-up UUID
    "telegraf-dual_a5000-v13.xml": None,
    "telegraf-gt-1030.xml": None,
    "telegraf-gtx-1070-ti.xml": "attached_gpus",  # a trimmed v10 capture
    "telegraf-gtx-1660-ti.xml": "gpu[0]/product_name",  # "Graphics Device", no architecture
    "telegraf-pro-6000-maxq-blackwell-v13.xml": None,
    "telegraf-quadro-p2000-v12.xml": None,
    "telegraf-quadro-p400.xml": "gpu[0]/power_readings/power_limit",
    "telegraf-rtx-3060-v12.xml": None,
    "telegraf-rtx-3080-v12.xml": None,
    "telegraf-rtx-3080-v13.xml": None,
    "telegraf-rtx-3090-v12.xml": "gpu[0]/pci/pci_device_id",  # [REDACTED]
    "telegraf-rtx-4000-sff-ada-v13.xml": None,
    "telegraf-tesla-t4.xml": None,
    "telegraf-tesla_p4.xml": "gpu[0]/power_readings/power_limit",  # GRID vGPU profile
}

READ = """
H = [n.nvmlDeviceGetHandleByIndex(i) for i in range(n.nvmlDeviceGetCount())]
out["gpus"] = [{"name": n.nvmlDeviceGetName(h), "arch": n.nvmlDeviceGetArchitecture(h),
                "cc": list(n.nvmlDeviceGetCudaComputeCapability(h)),
                "bus": n.nvmlDeviceGetPciInfo(h).busId} for h in H]
"""


def test_expectations_cover_the_corpus() -> None:
    assert sorted(p.name for p in CORPUS.glob("*.xml")) == sorted(EXPECTED)


@pytest.mark.parametrize("capture", sorted(CORPUS.glob("*.xml")), ids=lambda p: p.stem)
def test_capture_imports_or_names_the_field(capture: Path, tmp_path: Path,
                                            nvml: Callable[..., Any]) -> None:
    out = tmp_path / "imported.yaml"
    res = run_cli("sim", "import", str(capture), "-o", str(out))
    assert "Traceback" not in res.stderr, res.stderr
    want = EXPECTED.get(capture.name, "(no expectation: add this file to EXPECTED)")
    if want is not None:
        assert res.returncode == 2, res.stdout + res.stderr
        assert len(res.stderr.strip().splitlines()) == 1, res.stderr
        assert str(capture) in res.stderr and f"key {want}:" in res.stderr, res.stderr
        assert not out.exists()
        return
    assert res.returncode == 0, res.stderr
    data = yaml.safe_load(out.read_text())
    got = nvml(str(out), READ)["gpus"]
    assert [g["name"] for g in got] == [g["name"] for g in data["gpus"]]
    assert len(got) == int(_attached(capture))
    assert [g["cc"] for g in got] == [g["cuda_compute_capability"] for g in data["gpus"]]


def _attached(capture: Path) -> str:
    text = capture.read_text()
    return text.split("<attached_gpus>", 1)[1].split("<", 1)[0].strip()
