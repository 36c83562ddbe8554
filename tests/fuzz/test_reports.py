"""Hostile report and summary JSON through the report loader/validator and the fleet reader.

Promise (docs/report-format.md, docs/exit-codes.md): ``nodegate.report.load`` either returns a
report or raises ConfigError naming the file; ``decode`` raises only ValueError; the fleet
reader turns any file into an entry or ``{"path", "error"}``, and a summary into an entry or
None; the order of a node's reports never raises. Each example answers in bounded time.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("hypothesis")

from hypothesis import given
from hypothesis import strategies as st

from nodegate.errors import ConfigError
from nodegate.fleet.aggregate import build_view
from nodegate.fleet.read import from_report_file, from_summary
from nodegate.report import fleet_summary, to_json
from nodegate.report.model import NodeReport, decode, load
from nodegate.report.order import dict_key
from nodegate_lab.synthetic_fleet import synthetic_report

pytestmark = pytest.mark.fuzz

#: "Does not hang": far above what one example takes.
BOUND_S = 5.0

def _small_report() -> NodeReport:
    """A few of the synthetic node's results (its full quick report validates ~150, too
    slow to load 60 times a test)."""
    full = synthetic_report("n1", level="quick", seed=11, samples=2, faults=("xid",),
                            started_at=dt.datetime(2026, 12, 1, 3, 0, tzinfo=dt.timezone.utc))
    keep = [r for r in full.results if r.check in ("gpu_count", "xid_events", "gpu_temp")][:4]
    return dataclasses.replace(full, results=tuple(keep), sequence=4, boottime_s=812.5,
                               machine_id="c" * 32)


_BASE_TEXT = to_json(_small_report())
_BASE: dict[str, Any] = json.loads(_BASE_TEXT)
_SUMMARY: dict[str, Any] = json.loads(fleet_summary.text_for(_BASE, _BASE_TEXT))

_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=40),
    st.sampled_from(["PASS", "pass", "FAIL", "ERROR", "", "NaN", "0" * 40,
                     "2099-01-01T00:00:00.000Z", "0001-01-01T00:00:00Z", "a" * 32]))
_json = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)),
    max_leaves=12)
_TOP_KEYS = sorted({*_BASE, "machine_id", "boottime_s", "sequence"})
_edits = st.dictionaries(st.sampled_from(_TOP_KEYS), _json, min_size=1, max_size=4)
_literals = st.sampled_from(["NaN", "Infinity", "-Infinity", "1e400", "-0", "9" * 5000,
                             "[" * 3000, '"\\ud800"', "\u0661\u0662"])


def _apply(base: dict[str, Any], edits: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    out.update(edits)
    return out


def _timed(call: Any, *args: Any) -> Any:
    start = time.monotonic()
    try:
        return call(*args)
    finally:
        assert time.monotonic() - start < BOUND_S


@given(edits=_edits)
def test_an_edited_report_loads_or_is_a_config_error(edits: dict[str, Any]) -> None:
    data = _apply(_BASE, edits)
    try:
        report = _timed(NodeReport.from_dict, data)
    except ConfigError as exc:
        assert exc.file == "<report>" and exc.message
        return
    assert isinstance(report, NodeReport)
    assert report.verdict.value in {"PASS", "WARN", "FAIL", "SKIP", "ERROR"}


@given(edits=_edits, literal=_literals, where=st.sampled_from(["sequence", "boottime_s",
                                                                "duration_s", "measured"]))
def test_a_hostile_report_file_is_a_config_error_naming_it(
        tmp_path_factory: pytest.TempPathFactory, edits: dict[str, Any], literal: str,
        where: str) -> None:
    data = _apply(_BASE, edits)
    text = json.dumps(data, default=str)
    if where == "measured" and isinstance(data.get("results"), list) and data["results"] \
            and isinstance(data["results"][0], dict):
        data["results"][0]["measured"] = "__X__"
        text = json.dumps(data, default=str).replace('"__X__"', literal)
    else:
        text = text[:-1] + f', "{where}": {literal}}}' if text.endswith("}") else text
    path = tmp_path_factory.mktemp("r") / "quick-latest.json"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        report = _timed(load, path)
    except ConfigError as exc:
        assert exc.file == str(path) and exc.message and "Traceback" not in exc.message
        return
    assert isinstance(report, NodeReport)


@given(raw=st.binary(max_size=400))
def test_decode_raises_only_value_error(raw: bytes) -> None:
    try:
        _timed(decode, raw)
    except ValueError as exc:
        assert str(exc)


@given(edits=_edits)
def test_the_fleet_reader_never_raises_on_a_report(tmp_path_factory: pytest.TempPathFactory,
                                                   edits: dict[str, Any]) -> None:
    path = tmp_path_factory.mktemp("f") / "n1.json"
    path.write_text(json.dumps(_apply(_BASE, edits), default=str), encoding="utf-8")
    for strict in (False, True):
        entry = _timed(from_report_file, path, "n1.json", strict)
        assert entry["path"] == "n1.json"
        if "error" in entry:
            assert isinstance(entry["error"], str) and entry["error"]
        else:
            assert entry["verdict"] in {"PASS", "WARN", "FAIL", "SKIP", "ERROR"}
            dict_key(entry)


@given(edits=st.dictionaries(st.sampled_from(sorted({*_SUMMARY, "sequence", "boottime_s",
                                                     "machine_id", "boot_id"})),
                             _json, min_size=1, max_size=4))
def test_a_hostile_summary_is_trusted_only_when_sound(edits: dict[str, Any]) -> None:
    raw = json.dumps(_apply(_SUMMARY, edits), default=str).encode()
    size = _SUMMARY["report_bytes"] if "report_bytes" not in edits else edits["report_bytes"]
    entry = _timed(from_summary, raw, "n1.json", size if isinstance(size, int) else 0)
    if entry is not None:
        assert entry["verdict"] in {"PASS", "WARN", "FAIL", "SKIP", "ERROR"}
        assert isinstance(entry["order"], tuple)


_order = st.fixed_dictionaries({}, optional={
    "sequence": st.integers(min_value=1, max_value=6),
    "boot_id": st.sampled_from(["a", "b", "c"]),
    "machine_id": st.sampled_from(["a" * 32, "b" * 32]),
    "boottime_s": st.floats(min_value=0, max_value=1e6)})


@given(items=st.lists(_order, max_size=8))
def test_the_fleet_view_orders_any_mix_of_numbered_reports(items: list[dict[str, Any]]) -> None:
    """Entries with and without order fields, repeated numbers and boots: the view groups
    them, and a node is ERROR exactly when its reports cannot be one machine's."""
    raw = json.dumps(_SUMMARY).encode()
    entries = []
    for index, fields in enumerate(items):
        entry = from_summary(raw, f"n1/{index}.json", _SUMMARY["report_bytes"])
        assert entry is not None
        for key in fleet_summary.ORDER_TYPES:
            entry.pop(key, None)
        entry.update(report_id=f"r{index}", **fields)
        entry["order"] = dict_key({**entry, "finished_at": entry["finished_at"]})
        entries.append(entry)
    view = _timed(build_view, Path("."), entries)
    for node in view.nodes:
        assert node.verdict in {"PASS", "WARN", "FAIL", "SKIP", "ERROR"}
        if node.conflict:  # ERROR, or FAIL where a report fails (FAIL ranks above ERROR)
            assert node.verdict in {"ERROR", "FAIL"} and "two machines" in node.conflict
            assert node.failing()[0][0] == node.conflict
