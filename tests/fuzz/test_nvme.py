"""Fuzz nvme-cli JSON: hostile SMART logs, id-ctrl documents and listings. Never an exception
other than the documented ``ToolFailed`` (nothing could be read); only the checks that need a
field that could not be read are ERROR; bounded time."""

from __future__ import annotations

import json
import math
import time
from typing import Any

import pytest

pytest.importorskip("hypothesis")

from hypothesis import given
from hypothesis import strategies as st

from nodegate.judge.storage import SMART_CHECKS, judge_devices
from nodegate.probes import nvme
from nodegate.results import Verdict
from tests.storage.test_storage import FakeNode, profile, text

pytestmark = pytest.mark.fuzz

SMART = json.loads(text("qemu-nvme-cli-2.3-smart-log.json"))
IDENT = json.loads(text("qemu-nvme-cli-2.3-id-ctrl.json"))
LISTING = text("qemu-nvme-cli-2.3-list.json")
#: SMART log key -> the checks that need it (the others must never ERROR because of it)
NEEDS: dict[str, str] = {
    "critical_warning": "nvme_critical_warning", "temperature": "nvme_temperature",
    "avail_spare": "nvme_spare", "spare_thresh": "nvme_spare", "percent_used": "nvme_wear",
    "media_errors": "nvme_media_errors", "unsafe_shutdowns": "nvme_unsafe_shutdowns",
}
LIMITS = {"nvme_temperature_max_c": {"max": 70, "unit": "C", "source": "policy: test"}}
MISSING = object()
OTHER_DIGITS = st.text(st.sampled_from("\u0660\u0661\u0663\u0969\uff10\uff17\u09e6\u1040"),
                       min_size=1, max_size=6)
#: values that are never a reading: each must make its own check ERROR
HOSTILE: st.SearchStrategy[Any] = st.one_of(
    st.just(MISSING), st.none(), st.booleans(), st.integers(max_value=-1),
    st.integers(min_value=2**128, max_value=2**200), OTHER_DIGITS,
    st.integers(41, 5000).map(lambda n: "9" * n), st.just(""), st.just("12a"),
    st.floats(allow_nan=True).filter(lambda f: not math.isfinite(f) or not f.is_integer()),
    st.lists(st.integers(0, 9), max_size=3), st.dictionaries(st.text(max_size=3), st.none(),
                                                             max_size=2),
)


def clean(key: str) -> st.SearchStrategy[Any]:
    """A reading as nvme-cli writes it: a number or a decimal string."""
    top = 255 if key == "critical_warning" else 2**64
    number = st.integers(0, top)
    return st.one_of(number, number.map(str))


@st.composite
def smart_logs(draw: st.DrawFn) -> tuple[dict[str, Any], set[str]]:
    """(SMART log, the checks that must be ERROR)."""
    doc = dict(SMART)
    broken: set[str] = set()
    for key, check in NEEDS.items():
        if draw(st.booleans()):
            value = draw(HOSTILE)
            broken.add(check)
        else:
            value = draw(clean(key))
        if value is MISSING:
            del doc[key]
        else:
            doc[key] = value
    return doc, broken


def _judge(smart: Any, ident: Any = IDENT) -> list[Any]:
    node = FakeNode(LISTING, {p: json.dumps(smart) for p in ("/dev/nvme0n1", "/dev/nvme1n1")},
                    {p: json.dumps(ident) for p in ("/dev/nvme0n1", "/dev/nvme1n1")})
    return judge_devices(nvme.read_devices(node), profile(thresholds=LIMITS))


@given(smart_logs())
def test_only_the_checks_that_need_an_unreadable_field_are_error(
        case: tuple[dict[str, Any], set[str]]) -> None:
    smart, broken = case
    started = time.monotonic()
    results = _judge(smart)
    for device in ("nvme0", "nvme1"):
        errors = {r.check for r in results if r.entity == device and r.verdict == Verdict.ERROR}
        assert errors == broken, (smart, errors)
    assert {r.verdict for r in results if r.check in ("nvme_firmware",
                                                       "nvme_namespace_size")} == {Verdict.PASS}
    assert time.monotonic() - started < 2.0


@given(st.dictionaries(st.sampled_from(["mn", "sn", "fr", "wctemp", "vid"]),
                       st.one_of(HOSTILE.filter(lambda v: v is not MISSING), st.text()),
                       max_size=5))
def test_a_hostile_id_ctrl_never_touches_the_smart_checks(changes: dict[str, Any]) -> None:
    started = time.monotonic()
    results = _judge(SMART, {**IDENT, **changes})
    smart = [r for r in results if r.check in SMART_CHECKS]
    assert smart and all(r.verdict != Verdict.ERROR for r in smart)
    assert time.monotonic() - started < 2.0


JSON = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8),
                              st.floats(allow_nan=False)),
                    lambda inner: st.one_of(st.lists(inner, max_size=4),
                                            st.dictionaries(st.text(max_size=8), inner,
                                                            max_size=4)),
                    max_leaves=20)


@given(JSON, JSON, JSON)
def test_any_json_document_is_read_or_refused_never_crashed_on(listing: Any, ident: Any,
                                                               smart: Any) -> None:
    started = time.monotonic()
    node = FakeNode(json.dumps({"Devices": listing}) if not isinstance(listing, dict)
                    else json.dumps(listing),
                    {}, {})
    node.smart = _Every(json.dumps(smart))
    node.ident = _Every(json.dumps(ident))
    try:
        devices = nvme.read_devices(node)
    except nvme.ToolFailed:
        return
    results = judge_devices(devices, profile(thresholds=LIMITS))
    assert all(isinstance(r.verdict, Verdict) for r in results)
    assert time.monotonic() - started < 2.0


class _Every(dict[str, str]):
    """The same document for every device path."""

    def __init__(self, document: str) -> None:
        super().__init__()
        self.document = document

    def __missing__(self, key: str) -> str:
        return self.document
