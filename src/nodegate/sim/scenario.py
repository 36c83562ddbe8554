"""Scenario files: load, validate against the schema, resolve into one dict per GPU.

A scenario holds board-wide defaults (``gpu:``) and a per-GPU list (``gpus:``) that overrides
them key by key; :func:`resolve` deep-merges built-in defaults, then ``gpu:``, then each entry,
so a file states only what differs from a typical healthy part. Errors are ``ConfigError``
naming the file and the key, because a bad scenario must fail before anything runs.
"""

from __future__ import annotations

import copy
import json
import re
import uuid
from functools import cache
from pathlib import Path
from typing import Any

from nodegate.errors import ConfigError
from nodegate.mapping import deep_merge
from nodegate.schema_check import first_problem
from nodegate.yamlio import json_path, load_yaml, shorten

SCENARIO_DIR = Path(__file__).resolve().parent / "scenarios"
SCHEMA_PATH = Path(__file__).resolve().parent / "scenario.schema.json"

Board = dict[str, Any]
Gpu = dict[str, Any]

#: Values a scenario may leave out; documented in docs/simulator.md.
GPU_DEFAULTS: Gpu = {
    "architecture": "hopper",
    "cuda_compute_capability": [9, 0],
    "pci_subsystem_id": 0,
    "board_part_number": "",
    "numa_node": -1,
    "inforom": {"image": None, "oem": None, "ecc": None, "power": None, "corrupted": False},
    "memory": {"reserved_mib": 0, "used_mib": 0, "bar1_mib": 131072, "bus_width": 5120},
    "cuda_cores": 0,
    "temperature": {
        "idle_c": 34,
        "memory_idle_c": 31,
        "slowdown_c": 87,
        "shutdown_c": 92,
        "gpu_max_c": 85,
        "memory_max_c": 95,
    },
    "power": {"min_limit_w": 200, "idle_w": 70},
    "clocks": {"graphics_idle_mhz": 345, "video_idle_mhz": 765, "cap_mhz": 0},
    "clocks_event_reasons": [],
    "utilization_pct": 0,
    # idle_gen: the current generation of an idle GPU, which trains its link down to save
    # power (NVML: the current gen "may be reduced when the GPU is not in use")
    "pcie": {"replay_counter": 0, "replay_rate_per_s": 0, "idle_gen": 1},
    "nvlink": {"links": 0, "version": 4, "speed_mbps": 26562, "inactive": [], "errors": [],
               "slow": []},
    "ecc": {
        "enabled": True,
        "volatile_sbe": 0,
        "volatile_dbe": 0,
        "aggregate_sbe": 0,
        "aggregate_dbe": 0,
        "volatile_sbe_rate_per_s": 0,
    },
    "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
    "retired_pages": {"sbe": [], "dbe": [], "pending": False},
    "persistence": True,
    "mig": False,
    "compute_mode": "default",
    "fabric": None,
    "processes": [],
    "telemetry": {"tau_s": 2.0},
    "lost": False,
    "missing": False,
    # nvmlDevice function -> the nvml.h error it returns on this GPU (NVML_ERROR_TIMEOUT, ...,
    # NVML_ERROR_NOT_SUPPORTED for a field the GPU does not report)
    "nvml_errors": {},
}

SYSTEM_DEFAULTS: dict[str, Any] = {
    "uptime_s": 86400.0,
    "kernel": "6.1.0-31-amd64",
}

#: Keys every GPU must have once defaults and overrides are merged.
REQUIRED_GPU_KEYS: tuple[str, ...] = (
    "name",
    "pci_bus_id",
    "pci_device_id",
    "vbios_version",
    "memory.total_mib",
    "power.limit_w",
    "clocks.graphics_max_mhz",
    "clocks.memory_max_mhz",
    "pcie.gen",
    "pcie.width",
)
REQUIRED_SYSTEM_KEYS: tuple[str, ...] = ("driver_version", "cuda_driver_version")

BUS_ID_RE = re.compile(r"^([0-9A-Fa-f]{4,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-7])$")


@cache
def schema() -> dict[str, Any]:
    """The scenario JSON schema (shipped next to this module)."""
    data: dict[str, Any] = json.loads(SCHEMA_PATH.read_text())
    return data


def shipped() -> dict[str, Path]:
    """Shipped scenario names mapped to their files."""
    return {p.stem: p for p in sorted(SCENARIO_DIR.glob("*.yaml"))}


def validate(data: Any, *, source: str) -> None:
    """Schema-check a parsed scenario; raise ConfigError naming the first bad key."""
    if not isinstance(data, dict):
        raise ConfigError("a scenario must be a YAML mapping", file=source)
    problem = first_problem(schema(), data)
    if problem is not None:
        message = "unknown scenario key" if problem.unknown_key else shorten(problem.message)
        raise ConfigError(message, file=source, key=json_path(problem.path))


def load_file(path: Path) -> Board:
    """Parse and schema-check one scenario file."""
    data = load_yaml(path, kind="scenario")  # bounded, strict UTF-8, duplicate keys refused
    validate(data, source=str(path))
    board: Board = data
    return board


def find(name_or_path: str) -> Path:
    """A shipped scenario by name, or a YAML file by path."""
    table = shipped()
    if name_or_path in table:
        return table[name_or_path]
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or "/" in name_or_path:
        if not candidate.is_file():
            raise ConfigError("scenario file not found", file=name_or_path)
        return candidate
    known = ", ".join(table) or "none"
    raise ConfigError(f"unknown scenario {name_or_path!r} (shipped: {known})", key="scenario")


def _get(d: dict[str, Any], dotted: str) -> Any:
    cur: Any = d
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def parse_bus_id(bus_id: str) -> tuple[int, int, int, int]:
    """(domain, bus, device, function) from ``0000:18:00.0`` or ``00000000:18:00.0``."""
    m = BUS_ID_RE.match(bus_id)
    if not m:
        raise ValueError(bus_id)
    dom, bus, dev, fn = m.groups()
    return int(dom, 16), int(bus, 16), int(dev, 16), int(fn)


def canonical_bus_id(bus_id: str) -> str:
    """Short upper-case form ``0000:18:00.0`` used in scenarios and the kernel log."""
    dom, bus, dev, fn = parse_bus_id(bus_id)
    return f"{dom:04X}:{bus:02X}:{dev:02X}.{fn}"


def _fill_identity(board: Board, gpu: Gpu, slot: int) -> None:
    """Stable UUID, serial and numbering when a scenario does not pin them."""
    seed = f"nodegate-sim/{board['name']}/{gpu['pci_bus_id'].upper()}"
    ident = uuid.uuid5(uuid.NAMESPACE_URL, seed)
    gpu.setdefault("uuid", f"GPU-{ident}")
    gpu.setdefault("serial", f"16549{int(ident.hex[:10], 16) % 10**8:08d}")
    gpu.setdefault("minor_number", slot)
    gpu.setdefault("module_id", slot + 1)
    _, bus, dev, _ = parse_bus_id(gpu["pci_bus_id"])
    gpu.setdefault("board_id", (bus << 8) | dev)
    mem = gpu["memory"]
    mem.setdefault("reserved_mib", 0)
    temp = gpu["temperature"]
    temp.setdefault("load_c", min(temp["idle_c"] + 34, temp["slowdown_c"] - 12))
    temp.setdefault("memory_load_c", temp["memory_idle_c"] + 28)
    power = gpu["power"]
    power.setdefault("default_limit_w", power["limit_w"])
    power.setdefault("max_limit_w", power["default_limit_w"])
    power.setdefault("load_w", power["limit_w"] * 0.98)
    clocks = gpu["clocks"]
    clocks.setdefault("sm_max_mhz", clocks["graphics_max_mhz"])
    clocks.setdefault("video_max_mhz", clocks["graphics_max_mhz"] * 78 // 100)
    clocks.setdefault("applications_graphics_mhz", clocks["graphics_max_mhz"])
    clocks.setdefault("applications_memory_mhz", clocks["memory_max_mhz"])
    clocks.setdefault("default_applications_graphics_mhz", clocks["applications_graphics_mhz"])
    clocks.setdefault("default_applications_memory_mhz", clocks["applications_memory_mhz"])
    pcie = gpu["pcie"]
    pcie.setdefault("max_gen", pcie["gen"])
    pcie.setdefault("gpu_max_gen", pcie["max_gen"])
    pcie.setdefault("max_width", pcie["width"])
    ecc = gpu["ecc"]
    ecc.setdefault("pending", ecc["enabled"])
    ecc.setdefault("default", True)
    gpu.setdefault("mig_pending", gpu["mig"])
    if gpu["fabric"] is not None:
        fabric = {
            "state": "completed",
            "status": "success",
            "clique_id": 0,
            "cluster_uuid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"nodegate-sim/{board['name']}")),
            "degraded_bandwidth": False,
        }
        fabric.update(gpu["fabric"])
        gpu["fabric"] = fabric


def resolve(data: Board, *, source: str) -> Board:
    """Merge defaults into every GPU and check what the schema cannot (required, unique, ranges).

    Returns ``{"name", "description", "system", "topology", "gpus": [...], "kernel_log",
    "xid_events"}`` where every GPU dict is complete; faults then edit this structure.
    """
    board: Board = {
        "name": data["name"],
        "description": data.get("description", ""),
        "system": deep_merge(SYSTEM_DEFAULTS, data.get("system", {})),
        "topology": deep_merge(
            {"nvswitch": False, "nvswitch_bus_ids": [], "nvswitch_device_id": 0x22A3},
            data.get("topology", {}),
        ),
        "kernel_log": list(data.get("kernel_log", [])),
        "xid_events": copy.deepcopy(data.get("xid_events", [])),
        "gpus": [],
    }
    system = board["system"]
    for key in REQUIRED_SYSTEM_KEYS:
        if key not in system:
            raise ConfigError("missing required key", file=source, key=f"system.{key}")
    # NVML's version is the CUDA major and the driver (13.580.159.04 beside CUDA 13.0)
    cuda_major = int(system.get("cuda_driver_version") or 12000) // 1000
    system.setdefault("nvml_version", f"{cuda_major}.{system['driver_version']}")
    base = deep_merge(GPU_DEFAULTS, data.get("gpu", {}))
    seen: dict[str, str] = {}
    for slot, entry in enumerate(data["gpus"]):
        board["gpus"].append(_resolve_gpu(board, base, entry, slot, seen, source=source))
    for i, event in enumerate(board["xid_events"]):
        if event["gpu"] >= len(board["gpus"]):
            raise ConfigError(
                f"GPU {event['gpu']} not on this board", file=source, key=f"xid_events[{i}].gpu"
            )
    return board


def _resolve_gpu(board: Board, base: Gpu, entry: Gpu, slot: int,
                 seen: dict[str, str], *, source: str) -> Gpu:
    """One complete GPU: the board's defaults under ``entry``, checked; ``seen`` collects the
    identities that must be unique on the board."""
    gpu = deep_merge(base, entry)
    for key in REQUIRED_GPU_KEYS:
        if _get(gpu, key) is None:
            raise ConfigError("missing required key", file=source, key=f"gpus[{slot}].{key}")
    _fill_identity(board, gpu, slot)
    for unique in ("pci_bus_id", "uuid", "serial"):
        value = str(gpu[unique]).upper()
        where = f"gpus[{slot}].{unique}"
        if f"{unique}:{value}" in seen:
            raise ConfigError(
                f"duplicate {unique} {gpu[unique]} (also {seen[f'{unique}:{value}']})",
                file=source,
                key=where,
            )
        seen[f"{unique}:{value}"] = where
    _check_links(gpu, slot, source=source)
    _check_nvml_errors(gpu, slot, source=source)
    if gpu["memory"]["used_mib"] + gpu["memory"]["reserved_mib"] > gpu["memory"]["total_mib"]:
        raise ConfigError(
            "used + reserved exceeds total", file=source, key=f"gpus[{slot}].memory"
        )
    gpu["slot"] = slot
    return gpu


def _check_links(gpu: Gpu, slot: int, *, source: str) -> None:
    """Inactive links and link errors must name links the GPU has."""
    links = gpu["nvlink"]["links"]
    for i, link in enumerate(gpu["nvlink"]["inactive"]):
        if link >= links:
            raise ConfigError(
                f"link {link} out of range (GPU has {links} links)",
                file=source,
                key=f"gpus[{slot}].nvlink.inactive[{i}]",
            )
    for i, err in enumerate(gpu["nvlink"]["errors"]):
        if err["link"] >= links:
            raise ConfigError(
                f"link {err['link']} out of range (GPU has {links} links)",
                file=source,
                key=f"gpus[{slot}].nvlink.errors[{i}].link",
            )


_EXPORTED = re.compile(r"^EXPORT nvmlReturn_t (nvmlDevice\w+)\(", re.MULTILINE)


@cache
def exported_device_functions() -> frozenset[str]:
    """The ``nvmlDevice*`` functions the simulator's C library exports (its source says)."""
    from nodegate.sim.build import SOURCE

    return frozenset(_EXPORTED.findall(SOURCE.read_text()))


def _check_nvml_errors(gpu: Gpu, slot: int, *, source: str) -> None:
    """Each injected error names a function the library exports (or its unversioned name,
    which covers its ``_vN``) and an nvml.h error: a typo must not inject nothing."""
    import pynvml

    exported = exported_device_functions()
    for function, error in gpu["nvml_errors"].items():
        key = f"gpus[{slot}].nvml_errors.{function}"
        if function not in exported and not any(
                re.fullmatch(re.escape(function) + r"_v\d+", name) for name in exported):
            raise ConfigError(f"{function} is not an NVML device function the simulator "
                              "exports", file=source, key=key)
        if not isinstance(getattr(pynvml, error, None), int) or error == "NVML_SUCCESS":
            raise ConfigError(f"{error} is not an nvml.h error (NVML_ERROR_TIMEOUT, ...)",
                              file=source, key=key)


def load(name_or_path: str) -> Board:
    """Find, parse, validate and resolve a scenario."""
    path = find(name_or_path)
    return resolve(load_file(path), source=str(path))
