"""Hostile ``nvidia-smi -q -x`` XML through the capture import (``nodegate sim import``):
it returns a scenario or raises ConfigError (exit 2), never another exception, answers in
bounded time, and an N/A (or a driver error text) never becomes a number."""

from __future__ import annotations

import contextlib
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from nodegate.errors import ConfigError  # noqa: E402
from nodegate.sim.capture import NVML_ANSWERS, scenario_from_capture  # noqa: E402

pytestmark = pytest.mark.fuzz

CORPUS = Path(__file__).resolve().parents[1] / "sim" / "data" / "corpus"
#: Real captures (telegraf testdata, MIT): a data-centre Turing card and an Ampere consumer one.
BASES = {name: (CORPUS / name).read_text() for name in
         ("telegraf-tesla-t4.xml", "telegraf-3090-v13.xml")}
BOUND_S = 5.0

#: Elements whose text the fuzzer replaces, and what each must never become when it is N/A.
TARGETS = ("ecc_mode/current_ecc", "remapped_rows/remapped_row_corr",
           "remapped_rows/remapped_row_unc", "applications_clocks/graphics_clock",
           "retired_pages/multiple_single_bit_retirement/retired_count",
           "fb_memory_usage/total", "max_clocks/graphics_clock", "pci/pci_device_id",
           "temperature/gpu_temp", "pci/pci_gpu_link_info/pcie_gen/current_link_gen",
           "ecc_errors/volatile/single_bit/total", "ecc_errors/volatile/dram_correctable")

hostile_text = st.one_of(
    st.sampled_from([*NVML_ANSWERS, "", " ", "[REDACTED]", "0x", "-1", "1e309", "NaN",
                     "9" * 5000, "١٢٣", "<", "&amp;", "]]>", "\x00"]),
    st.text(max_size=60),
    st.integers().map(str),
)


def _import(xml: str) -> dict[str, Any] | None:
    """Import ``xml``; None when refused with the documented ConfigError."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "c.xml"
        path.write_text(xml, encoding="utf-8", errors="surrogatepass")
        start = time.monotonic()
        try:
            return scenario_from_capture(path, name="fuzz", allow_partial=True)
        except ConfigError:
            return None
        finally:
            assert time.monotonic() - start < BOUND_S


def _replace(xml: str, path: str, text: str) -> str:
    """``xml`` with the first element at ``path`` (last tag, inside its parent) holding
    ``text``, XML-escaped; unchanged when the capture has no such element."""
    parent, _, tag = path.rpartition("/")
    escaped = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    anchor = xml.find(f"<{parent.rsplit('/', 1)[-1]}>") if parent else 0
    if anchor < 0:
        return xml
    pattern = re.compile(rf"<{tag}>[^<]*</{tag}>")
    found = pattern.search(xml, anchor)
    if found is None:
        return xml
    return xml[:found.start()] + f"<{tag}>{escaped}</{tag}>" + xml[found.end():]


@given(base=st.sampled_from(sorted(BASES)),
       edits=st.lists(st.tuples(st.sampled_from(TARGETS), hostile_text), max_size=6))
def test_hostile_field_values_import_or_refuse(base: str, edits: list[tuple[str, str]]) -> None:
    xml = BASES[base]
    for path, text in edits:
        xml = _replace(xml, path, text)
    _import(xml)  # any exception but ConfigError fails the test


@given(base=st.sampled_from(sorted(BASES)), na=st.sampled_from(sorted(NVML_ANSWERS)))
def test_na_never_becomes_a_number(base: str, na: str) -> None:
    """ECC mode, remapped rows and application clocks that say N/A (or an NVML error text)
    come out as that NVML answer, with no counter, row count or clock in their place."""
    xml = BASES[base]
    xml = _replace(xml, "ecc_mode/current_ecc", na)
    for tag in ("remapped_row_corr", "remapped_row_unc", "remapped_row_pending",
                "remapped_row_failure"):
        xml = _replace(xml, f"remapped_rows/{tag}", na)
    xml = re.sub(r"<remapped_rows>[^<]*</remapped_rows>", f"<remapped_rows>{na}</remapped_rows>",
                 xml)
    for tag in ("graphics_clock", "mem_clock"):
        xml = _replace(xml, f"applications_clocks/{tag}", na)
    data = _import(xml)
    assert data is not None, "a readable capture with N/A fields must import"
    answer = NVML_ANSWERS[na]
    for gpu in data["gpus"]:
        errors = gpu.get("nvml_errors", {})
        assert errors.get("nvmlDeviceGetEccMode") == answer
        assert errors.get("nvmlDeviceGetTotalEccErrors") == answer
        assert not {"volatile_sbe", "volatile_dbe", "aggregate_sbe", "aggregate_dbe"} & set(
            gpu.get("ecc", {}))
        assert errors.get("nvmlDeviceGetRemappedRows") == answer
        assert not gpu.get("remapped_rows")
        assert errors.get("nvmlDeviceGetApplicationsClock") == answer
        assert "applications_graphics_mhz" not in gpu.get("clocks", {})


@given(st.binary(max_size=2000))
def test_arbitrary_bytes_are_a_config_error_or_a_scenario(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "c.xml"
        path.write_bytes(raw)
        start = time.monotonic()
        with contextlib.suppress(ConfigError):  # the documented refusal
            scenario_from_capture(path, name="fuzz")
        assert time.monotonic() - start < BOUND_S
