"""Bad input around NVML answers (docs/verdicts.md "Unmeasured is ERROR, NOT_SUPPORTED is
declared"): a scenario's injected NVML errors, a profile's GPU model features and captures
with N/A where a value is needed. Each ends in exit 2 naming the file and key, writes nothing
and prints no traceback (the runner of tests/badinput/test_corpus.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from nodegate.sim import scenario
from tests.badinput.test_corpus import CORPUS, HEADER, Case, check_case


def _board(errors: object) -> dict[str, bytes | str]:
    """The shipped one-GPU H200 board with ``errors`` as its GPU's ``nvml_errors``."""
    data = yaml.safe_load(scenario.shipped()["h200-single"].read_text())
    data["gpus"][0]["nvml_errors"] = errors
    return {"s.yaml": yaml.safe_dump(data)}


def _features(body: str) -> dict[str, bytes | str]:
    return {"p.yaml": HEADER + "gpu:\n  features:\n" + body}


RUN = ("sim", "run", "{d}/s.yaml", "--", "true")
CHECK = ("profiles", "check", "{d}/p.yaml")
IMPORT = ("sim", "import", "{d}/c.xml", "-o", "{d}/out.yaml")
T4 = (CORPUS / "telegraf-tesla-t4.xml").read_text()

CASES = [
    Case("nvml-error-unknown-function", RUN, 2,
         ("s.yaml", "gpus[0].nvml_errors.nvmlDeviceGetTotalEccErorrs", "exports"),
         _board({"nvmlDeviceGetTotalEccErorrs": "NVML_ERROR_TIMEOUT"})),
    Case("nvml-error-unknown-code", RUN, 2,
         ("s.yaml", "gpus[0].nvml_errors.nvmlDeviceGetTotalEccErrors", "nvml.h error"),
         _board({"nvmlDeviceGetTotalEccErrors": "NVML_ERROR_TIMEOUTT"})),
    Case("nvml-error-success-is-no-error", RUN, 2,
         ("s.yaml", "gpus[0].nvml_errors.nvmlDeviceGetTotalEccErrors", "does not match"),
         _board({"nvmlDeviceGetTotalEccErrors": "NVML_SUCCESS"})),
    Case("nvml-error-not-a-device-function", RUN, 2, ("s.yaml", "gpus[0].nvml_errors"),
         _board({"nvmlInit; rm -rf /": "NVML_ERROR_UNKNOWN"})),
    Case("nvml-error-not-a-mapping", RUN, 2, ("s.yaml", "gpus[0].nvml_errors", "object"),
         _board(["nvmlDeviceGetTotalEccErrors"])),
    Case("nvml-error-too-many", RUN, 2, ("s.yaml", "gpus[0].nvml_errors"),
         _board({f"nvmlDeviceGetX{i}": "NVML_ERROR_UNKNOWN" for i in range(65)})),
    Case("nvml-error-numeric-code", RUN, 2,
         ("s.yaml", "gpus[0].nvml_errors.nvmlDeviceGetTotalEccErrors"),
         _board({"nvmlDeviceGetTotalEccErrors": 10})),
    Case("features-unknown-key", CHECK, 2, ("p.yaml", "gpu.features.hbm"),
         _features("    hbm: true\n")),
    Case("features-unknown-nvlink-version", CHECK, 2,
         ("p.yaml", "gpu.features.nvlink_versions"),
         _features("    nvlink_versions: ['4_1']\n")),
    Case("features-flag-not-boolean", CHECK, 2, ("p.yaml", "gpu.features.ecc"),
         _features("    ecc: 'N/A'\n")),
    Case("features-unsourced", CHECK, 2, ("p.yaml", "gpu.features.source"),
         _features("    source: somebody said so\n")),
    Case("features-negative-links", CHECK, 2, ("p.yaml", "gpu.features.nvlink_links"),
         _features("    nvlink_links: -18\n")),
    # a capture's N/A is never a value: where the board needs one, the import refuses
    Case("capture-fb-total-na", IMPORT, 2, ("c.xml", "gpu[0]/fb_memory_usage/total"),
         {"c.xml": T4.replace("<total>15360 MiB</total>", "<total>N/A</total>", 1)}),
    Case("capture-max-clock-deprecated", IMPORT, 2, ("c.xml", "max_clocks/graphics_clock"),
         {"c.xml": T4.replace("<graphics_clock>1590 MHz</graphics_clock>",
                              "<graphics_clock>Requested functionality has been deprecated"
                              "</graphics_clock>")}),
]


def test_the_captures_cases_change_the_capture() -> None:
    """The replaced text is in the T4 capture, so the cases test what they say."""
    assert "<total>15360 MiB</total>" in T4
    assert "<graphics_clock>1590 MHz</graphics_clock>" in T4


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_nvml_input_exits_naming_it(case: Case, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    check_case(case, tmp_path, capsys)
