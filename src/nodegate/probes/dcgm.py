"""DCGM's active diagnostic, ``dcgmi diag -r <level> -j``, read into one entry per test and
entity.

Two JSON shapes exist, both written by dcgmi itself (NVIDIA/DCGM dcgmi/Diag.cpp and
nvvs/include/NvvsJsonStrings.h):

* DCGM 2.x/3.x: ``{"DCGM GPU Diagnostic": {"test_categories": [{"category", "tests":
  [{"name", "results": [{"gpu_ids", "status", "warnings": [str], "info": [str]}]}]}]}}``;
  ``gpu_ids`` is a GPU index or, for the deployment (software) tests, a comma list of them.
  Real output can carry ``null`` entries in ``tests`` and a banner before the JSON (DCGM's
  own JsonResult test keeps such a capture).
* DCGM 4.x: the root key is ``"DCGM Diagnostic"``; each result names its entity
  (``entity_group``, ``entity_group_id``, ``entity_id``), ``warnings`` are objects
  (``warning``, ``error_id``, ``error_category``, ``error_severity``), and each test has a
  ``test_summary``. A run that could not start has only ``runtime_error``.

Statuses are DCGM's words (Diag.cpp ``HelperDisplayDiagResult``: Pass, Skip, Warn, Fail,
Not Run; 2.x/3.x wrote PASS/FAIL/WARN/SKIPPED): the judge maps them, this module only reads.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nodegate.probes.nvme import Runner, ToolFailed, local_runner, parse_json_text

ROOT_KEYS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")


@dataclass(frozen=True)
class DcgmEntry:
    """One test's result for one entity (``gpu3``, or ``node`` for a test of the node)."""

    category: str
    test: str
    entity: str
    status: str  # DCGM's word, as printed
    messages: tuple[str, ...] = ()
    info: tuple[str, ...] = ()
    error_ids: tuple[int, ...] = ()
    error_severities: tuple[int, ...] = ()


@dataclass
class DcgmDiag:
    entries: list[DcgmEntry] = field(default_factory=list)
    version: str = ""
    runtime_error: str | None = None
    level: int = 0


def _entity(result: Mapping[str, Any]) -> list[str]:
    """The entities one result is about: 4.x names one; 2.x/3.x ``gpu_ids`` may list many."""
    if "entity_id" in result:
        group = str(result.get("entity_group", "GPU"))
        prefix = "gpu" if group.upper() == "GPU" else group.lower().replace(" ", "_")
        return [f"{prefix}{result['entity_id']}"]
    ids = result.get("gpu_ids", result.get("gpu_id"))
    if ids is None or ids == "":
        return ["node"]
    if isinstance(ids, int):
        return [f"gpu{ids}"]
    parts = [p.strip() for p in str(ids).split(",") if p.strip()]
    return [f"gpu{p}" for p in parts] or ["node"]


def _warnings(raw: Any) -> tuple[tuple[str, ...], tuple[int, ...], tuple[int, ...]]:
    messages: list[str] = []
    ids: list[int] = []
    severities: list[int] = []
    for item in raw or []:
        if isinstance(item, Mapping):
            messages.append(str(item.get("warning", item.get("message", ""))))
            if isinstance(item.get("error_id"), int):
                ids.append(item["error_id"])
            if isinstance(item.get("error_severity"), int):
                severities.append(item["error_severity"])
        elif item is not None:
            messages.append(str(item))
    return tuple(messages), tuple(ids), tuple(severities)


def parse_diag(doc: Any) -> DcgmDiag:
    """DcgmDiag from dcgmi's JSON (either shape)."""
    if not isinstance(doc, Mapping):
        raise ToolFailed("dcgmi diag: expected a JSON object")
    root = next((doc[k] for k in ROOT_KEYS if isinstance(doc.get(k), Mapping)), None)
    if root is None:
        raise ToolFailed(f"dcgmi diag: none of {', '.join(ROOT_KEYS)} in its JSON "
                         f"(keys: {', '.join(sorted(doc)) or 'none'})")
    raw_meta = doc.get("metadata")
    meta: Mapping[str, Any] = raw_meta if isinstance(raw_meta, Mapping) else {}
    out = DcgmDiag(version=str(root.get("version", meta.get("version", ""))),
                   runtime_error=root.get("runtime_error") or doc.get("runtime_error"))
    for category in root.get("test_categories") or []:
        if not isinstance(category, Mapping):
            continue
        name = str(category.get("category", ""))
        for test in category.get("tests") or []:
            if not isinstance(test, Mapping):
                continue  # real 3.x output holds nulls between tests
            for result in test.get("results") or []:
                if not isinstance(result, Mapping):
                    continue
                messages, ids, severities = _warnings(result.get("warnings"))
                info = tuple(str(i) for i in result.get("info") or [] if i is not None)
                for entity in _entity(result):
                    out.entries.append(DcgmEntry(
                        category=name, test=str(test.get("name", "")), entity=entity,
                        status=str(result.get("status", "")), messages=messages, info=info,
                        error_ids=ids, error_severities=severities))
    return out


def run_diag(level: int, *, run: Runner = local_runner, timeout_s: float) -> DcgmDiag:
    """Run ``dcgmi diag -r <level> -j``. dcgmi exits non-zero when a test fails, so its exit
    code is not an error here; output without DCGM's JSON is (ToolFailed)."""
    argv = ["dcgmi", "diag", "-r", str(level), "-j"]
    try:
        proc = run(argv, timeout_s)
    except FileNotFoundError:
        raise ToolFailed("dcgmi not found") from None
    except subprocess.TimeoutExpired:
        raise ToolFailed(f"dcgmi diag -r {level} did not finish within {timeout_s:g} s") \
            from None
    diag = parse_diag(parse_json_text(proc.stdout or proc.stderr, what="dcgmi diag"))
    diag.level = level
    return diag
