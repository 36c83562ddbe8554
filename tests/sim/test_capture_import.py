"""Capture import on real captures: redacted ids, partial captures, NVLink, architectures.

Each case starts from a real ``nvidia-smi -q -x`` file (tests/sim/data and its corpus) and, where
a case needs a variant, edits one element of it, so the input stays real-shaped.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml
import pytest

from nodegate.errors import ConfigError
from nodegate.sim import state
from nodegate.sim.capture import import_capture, scenario_from_capture
from nodegate.sim.gpu_models import ARCHITECTURE_NAMES, product_model
from tests.conftest import run_cli

DATA = Path(__file__).parent / "data"
CORPUS = DATA / "corpus"

READ = """
H = [n.nvmlDeviceGetHandleByIndex(i) for i in range(n.nvmlDeviceGetCount())]
out["gpus"] = [{"arch": n.nvmlDeviceGetArchitecture(h),
                "cc": list(n.nvmlDeviceGetCudaComputeCapability(h)),
                "links": n.nvmlDeviceGetFieldValues(h, [n.NVML_FI_DEV_NVLINK_LINK_COUNT])[0]
                .value.uiVal} for h in H]
"""


def _edit(tmp_path: Path, source: Path, edit: Callable[[ET.Element], None]) -> Path:
    """A copy of a real capture with one edit applied."""
    tree = ET.parse(source)
    edit(tree.getroot())
    out = tmp_path / source.name
    tree.write(out)
    return out


def _set(path: str, value: str) -> Callable[[ET.Element], None]:
    def edit(root: ET.Element) -> None:
        found = root.find(path)
        assert found is not None, path
        found.text = value
    return edit


def _error(capture: Path, **kwargs: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        scenario_from_capture(capture, name="x", **kwargs)
    assert info.value.file == str(capture)
    return info.value


# --- redacted and malformed ids -------------------------------------------------------------


def test_redacted_device_id_names_the_field() -> None:
    err = _error(CORPUS / "telegraf-rtx-3090-v12.xml")  # <pci_device_id>[REDACTED]
    assert err.key == "gpu[0]/pci/pci_device_id" and "redacted" in err.message


def test_zeroed_vendor_is_not_an_nvidia_id() -> None:
    err = _error(CORPUS / "telegraf-a10g.xml")  # <pci_device_id>000000DE
    assert err.key == "gpu[0]/pci/pci_device_id" and "000000DE" in err.message


@pytest.mark.parametrize(("path", "value", "key"), [
    ("gpu/pci/pci_sub_system_id", "N0T-HEX", "gpu[0]/pci/pci_sub_system_id"),
    ("gpu/pci/pci_bus_id", "0000:zz:00.0", "gpu[0]/pci/pci_bus_id"),
    ("gpu/uuid", "GPU-redacted", "gpu[0]/uuid"),
    ("gpu/board_id", "0xZZ", "gpu[0]/board_id"),
    ("cuda_version", "twelve", "cuda_version"),
    ("attached_gpus", "one", "attached_gpus"),
])
def test_malformed_value_names_the_field(tmp_path: Path, path: str, value: str,
                                         key: str) -> None:
    capture = _edit(tmp_path, CORPUS / "telegraf-rtx-3080-v13.xml", _set(path, value))
    assert _error(capture).key == key


def test_redacted_bus_id_names_the_field(tmp_path: Path) -> None:
    def redact(root: ET.Element) -> None:
        _set("gpu/pci/pci_bus_id", "[REDACTED]")(root)
        gpu = root.find("gpu")
        assert gpu is not None
        gpu.set("id", "[REDACTED]")  # <gpu id="..."> repeats the bus id

    capture = _edit(tmp_path, CORPUS / "telegraf-rtx-3080-v13.xml", redact)
    assert _error(capture).key == "gpu[0]/pci/pci_bus_id"


def test_redacted_serial_is_left_to_the_scenario_default() -> None:
    data = scenario_from_capture(CORPUS / "telegraf-rtx-4000-sff-ada-v13.xml", name="x")
    assert "serial" not in data["gpus"][0]  # <serial>REDACTED</serial> is not a serial


def test_cli_redacted_capture_exits_2_without_traceback(tmp_path: Path) -> None:
    res = run_cli("sim", "import", str(CORPUS / "telegraf-rtx-3090-v12.xml"),
                  "-o", str(tmp_path / "o.yaml"))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "key gpu[0]/pci/pci_device_id" in res.stderr


# --- attached_gpus against the GPUs present --------------------------------------------------


def test_partial_capture_refused_then_accepted(tmp_path: Path) -> None:
    capture = CORPUS / "telegraf-a100-sxm4-v12.xml"  # attached_gpus 4, one <gpu>
    err = _error(capture)
    assert err.key == "attached_gpus" and "4" in err.message and "--allow-partial" in err.message
    data = import_capture(capture, tmp_path / "a100.yaml", name="a100", allow_partial=True)
    assert len(data["gpus"]) == 1 and "partial: 1 of 4" in data["description"]


def test_dropped_gpu_of_an_hgx_capture(tmp_path: Path) -> None:
    def drop_last(root: ET.Element) -> None:
        root.remove(root.findall("gpu")[-1])

    capture = _edit(tmp_path, DATA / "h100-hgx-570.xml", drop_last)
    assert _error(capture).key == "attached_gpus"
    res = run_cli("sim", "import", str(capture), "-o", str(tmp_path / "o.yaml"))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "attached_gpus says 8 but 7" in res.stderr
    res = run_cli("sim", "import", "--allow-partial", str(capture), "-o", str(tmp_path / "o.yaml"))
    assert res.returncode == 0, res.stderr


# --- NVLink only from the capture ------------------------------------------------------------


def test_no_nvlink_data_means_no_links(nvml: Callable[..., Any], tmp_path: Path) -> None:
    hgx = scenario_from_capture(DATA / "h100-hgx-570.xml", name="x")
    assert {g["nvlink"]["links"] for g in hgx["gpus"]} == {0}
    assert hgx["topology"]["nvswitch"] is False
    out = tmp_path / "a5000.yaml"  # two PCIe RTX cards: no NVLink in the capture, none made up
    import_capture(CORPUS / "telegraf-dual_a5000-v13.xml", out, name="a5000")
    assert [g["links"] for g in nvml(str(out), READ)["gpus"]] == [0, 0]


# --- architecture and compute capability -----------------------------------------------------


@pytest.mark.parametrize(("capture", "arch", "cc"), [
    ("telegraf-rtx-4000-sff-ada-v13.xml", pynvml.NVML_DEVICE_ARCH_ADA, [8, 9]),
    ("telegraf-quadro-p2000-v12.xml", pynvml.NVML_DEVICE_ARCH_PASCAL, [6, 1]),
    ("telegraf-gt-1030.xml", pynvml.NVML_DEVICE_ARCH_PASCAL, [6, 1]),  # no architecture string
    ("telegraf-rtx-3080-v13.xml", pynvml.NVML_DEVICE_ARCH_AMPERE, [8, 6]),  # GA102
    ("telegraf-dual_2070-v13.xml", pynvml.NVML_DEVICE_ARCH_TURING, [7, 5]),
    ("datakit-gtx-8card.xml", pynvml.NVML_DEVICE_ARCH_VOLTA, [7, 0]),
    ("telegraf-pro-6000-maxq-blackwell-v13.xml", pynvml.NVML_DEVICE_ARCH_BLACKWELL, [12, 0]),
])
def test_architecture_and_capability(capture: str, arch: int, cc: list[int], tmp_path: Path,
                                     nvml: Callable[..., Any]) -> None:
    out = tmp_path / "board.yaml"
    import_capture(CORPUS / capture, out, name="board")
    got = nvml(str(out), READ)["gpus"]
    assert {g["arch"] for g in got} == {arch}
    assert {tuple(g["cc"]) for g in got} == {tuple(cc)}


def test_a100_keeps_8_0(tmp_path: Path) -> None:
    data = import_capture(CORPUS / "telegraf-a100-sxm4-v12.xml", tmp_path / "o.yaml", name="o",
                          allow_partial=True)
    assert data["gpus"][0]["cuda_compute_capability"] == [8, 0]


@pytest.mark.parametrize(("name", "arch", "cc"), [
    ("NVIDIA A10G", "ampere", (8, 6)),
    ("NVIDIA RTX A5000", "ampere", (8, 6)),
    ("NVIDIA A100-SXM4-80GB", "ampere", (8, 0)),
    ("NVIDIA H100 80GB HBM3", "hopper", (9, 0)),
    ("NVIDIA GeForce RTX 4090", "ada", (8, 9)),
    ("Tesla T4", "turing", (7, 5)),
    ("Quadro RTX 5000", "turing", (7, 5)),  # not an RTX 50 card
    ("Quadro P400", "pascal", (6, 1)),
    ("GRID P4-1Q", "pascal", (6, 1)),
    ("Tesla P100-PCIE-16GB", "pascal", (6, 0)),
    ("NVIDIA B200", "blackwell", (10, 0)),
    ("NVIDIA GeForce RTX 5090", "blackwell", (12, 0)),
])
def test_product_table(name: str, arch: str, cc: tuple[int, int]) -> None:
    assert product_model(name) == (arch, cc)


@pytest.mark.parametrize(("path", "value", "key"), [
    ("gpu/product_architecture", "Rubin", "gpu[0]/product_architecture"),  # not in the table
    ("gpu/product_architecture", "Turing", "gpu[0]/product_architecture"),  # RTX 3080 is Ampere
    ("gpu/product_name", "NVIDIA Mystery GPU", "gpu[0]/product_name"),  # Ampere: 8.0 or 8.6?
])
def test_unknown_model_is_an_error_not_hopper(tmp_path: Path, path: str, value: str,
                                              key: str) -> None:
    capture = _edit(tmp_path, CORPUS / "telegraf-rtx-3080-v13.xml", _set(path, value))
    assert _error(capture).key == key


def test_unknown_name_with_single_capability_architecture(tmp_path: Path) -> None:
    capture = _edit(tmp_path, CORPUS / "telegraf-rtx-4000-sff-ada-v13.xml",
                    _set("gpu/product_name", "NVIDIA Future Ada Card"))
    data = scenario_from_capture(capture, name="x")
    assert data["gpus"][0]["architecture"] == "ada"
    assert data["gpus"][0]["cuda_compute_capability"] == [8, 9]


def test_architecture_encoding_is_nvml_h() -> None:
    """Scenario architectures map to nvmlDeviceArchitecture_t as nvidia-ml-py names it."""
    for key, value in state.ARCHITECTURES.items():
        assert value == getattr(pynvml, f"NVML_DEVICE_ARCH_{key.upper()}"), key
    assert set(ARCHITECTURE_NAMES.values()) <= set(state.ARCHITECTURES)
