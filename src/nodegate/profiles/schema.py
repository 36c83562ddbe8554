"""JSON Schema for hardware profiles, in two strengths.

A *layer* file (GPU model, platform, site or host override) may set any subset of keys; the
*resolved* profile must have every section a check needs. Both reject unknown keys so a typo
(``nvlink.links_per_gpus``) fails at load time instead of silently falling back to a default.
"""

from __future__ import annotations

import copy
from typing import Any

from nodegate.profiles.threshold_keys import GPU_FEATURES, NVLINK_VERSION_NAMES, THRESHOLD_KEYS
from nodegate.vocabulary import DTYPES as LOAD_DTYPES

SOURCE_PATTERN = r"^(datasheet|peer-tool|measured|policy): \S.*$"

_INT = {"type": "integer"}
_NUM = {"type": "number"}
_BOOL = {"type": "boolean"}
_STR = {"type": "string", "minLength": 1}
_VERSION = {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)*([-+~][0-9A-Za-z.+~-]+)?$"}


def _section(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": properties,
        "x-required": required,
    }


#: Every threshold catalogued is a count, temperature, rate, ratio or margin: below zero it
#: means nothing (NaN and infinities are refused for every number by the loader).
_BOUND = {"type": "number", "minimum": 0}

_THRESHOLD = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "min": _BOUND,
        "max": _BOUND,
        "unit": _STR,
        "source": {"type": "string", "pattern": SOURCE_PATTERN},
        "note": _STR,
    },
    "required": ["unit", "source"],
    "oneOf": [{"required": ["min"]}, {"required": ["max"]}],
}

def _threshold(bound: str, unit: str) -> dict[str, Any]:
    """One catalogued threshold: its own bound only (``min`` on a ``_max`` name is an unknown
    key, not a silently inverted check) and its catalogued unit."""
    schema: dict[str, Any] = copy.deepcopy(_THRESHOLD)
    properties: dict[str, Any] = schema["properties"]
    del properties["max" if bound == "min" else "min"], schema["oneOf"]
    properties["unit"] = {"const": unit}
    schema["required"] = ["unit", "source", bound]
    return schema


#: A firmware pin: the versions this fleet accepts (several while a flash rolls out) and where
#: they come from. With a pin each GPU is judged against it; without, GPUs must agree.
_FIRMWARE_PIN = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "versions": {"type": "array", "items": _STR, "minItems": 1, "uniqueItems": True},
        "source": {"type": "string", "pattern": SOURCE_PATTERN},
    },
    "required": ["versions", "source"],
}

#: What the GPU model has, as NVML exposes it (``GpuFeatures``): NOT_SUPPORTED on a feature
#: declared true is ERROR; on one declared false its checks SKIP. Every key, with its source,
#: once the profile is resolved.
_GPU_FEATURES = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        **{name: _BOOL for name in GPU_FEATURES},
        "nvlink_links": {"type": "integer", "minimum": 0, "maximum": 36},
        "nvlink_versions": {"type": "array", "uniqueItems": True,
                            "items": {"enum": list(NVLINK_VERSION_NAMES)}},
        "source": {"type": "string", "pattern": SOURCE_PATTERN},
    },
    "x-required": [*GPU_FEATURES, "nvlink_links", "nvlink_versions", "source"],
}

#: Power limits by board SKU (the PCI subsystem device id, the high 16 bits of NVML's
#: ``pciSubSystemId``): one GPU model ships on boards with different power envelopes.
_POWER_SKUS = {
    "type": "array",
    "items": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "pci_subsystem_id": {"type": "integer", "minimum": 0, "maximum": 0xFFFF},
            "power_limit_w": {"type": "array", "minItems": 1,
                              "items": {"type": "number", "minimum": 1}},
            "source": {"type": "string", "pattern": SOURCE_PATTERN},
        },
        "required": ["pci_subsystem_id", "power_limit_w", "source"],
    },
}

#: Per-port data rates sysfs can show (``rate``: lanes x lane speed), in Gb/s. InfiniBand:
#: 1X/2X/4X/8X/12X widths of SDR 2.5, DDR 5, QDR 10, FDR10 10, FDR 14, EDR 25, HDR 50, NDR
#: 100, XDR 200 (the kernel's ib_rate/ib_width tables; IBTA). Ethernet (RoCE): the IEEE 802.3
#: rates an RDMA NIC runs. A profile rate outside its link layer's list is a typo or a guess.
IB_RATES_GBPS = (2.5, 5, 10, 14, 20, 25, 28, 30, 40, 50, 56, 60, 80, 100, 112, 120, 168, 200,
                 300, 400, 600, 800, 1200, 1600)
ETHERNET_RATES_GBPS = (1, 2.5, 5, 10, 25, 40, 50, 100, 200, 400, 800)

_RAILS = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "count": {"type": "integer", "minimum": 1, "maximum": 64},
        "link_layer": {"enum": ["InfiniBand", "Ethernet"]},
        "rate_gbps": {"type": "number"},
        # same-switch: each GPU's rail NIC(s) below its closest PCIe switch; any: not judged
        "pairing": {"enum": ["same-switch", "any"]},
        "nics_per_gpu": {"type": "integer", "minimum": 1, "maximum": 8},
        "numa": {"enum": ["same-as-gpu", "any"]},
        "mtu": {"type": "integer", "minimum": 1280, "maximum": 9216},  # RoCE netdev MTU
        "devices": {"type": "array", "items": _STR, "minItems": 1},  # rail HCA name globs
        "firmware": _FIRMWARE_PIN,
        # the rails are software RDMA devices (rdma_rxe: the Soft-RoCE testbed, never a
        # production node): no PCIe function, no PMA counters; those checks SKIP
        "soft_roce": {"type": "boolean"},
        "source": {"type": "string", "pattern": SOURCE_PATTERN},
    },
    "x-required": ["count", "link_layer", "rate_gbps", "pairing", "source"],
    "allOf": [
        {"if": {"properties": {"link_layer": {"const": "InfiniBand"}},
                "required": ["link_layer"]},
         "then": {"properties": {"rate_gbps": {"enum": list(IB_RATES_GBPS)}}}},
        {"if": {"properties": {"link_layer": {"const": "Ethernet"}}, "required": ["link_layer"]},
         "then": {"properties": {"rate_gbps": {"enum": list(ETHERNET_RATES_GBPS)}}}},
    ],
}

SECTIONS: dict[str, dict[str, Any]] = {
    "gpu": _section(
        {
            "model": _STR,
            "pci_device_id": {"type": "integer", "minimum": 0, "maximum": 0xFFFF},
            "count": {"type": "integer", "minimum": 1, "maximum": 16},
            "architecture": {"enum": ["ampere", "hopper", "blackwell"]},
            "memory_mib": {"type": "integer", "minimum": 1},
            "mig": {"enum": ["disabled", "enabled"]},
            "compute_mode": {"enum": ["default", "exclusive_process", "prohibited"]},
            "persistence": _BOOL,
            "ecc": _BOOL,
            "power_limit_w": {"type": "number", "minimum": 1},
            "power_limits_by_sku": _POWER_SKUS,
            "tdp_w": {"type": "number", "minimum": 1},
            "idle_temp_margin_c": {"type": "number", "minimum": 0},
            "vbios": _FIRMWARE_PIN,  # nvmlDeviceGetVbiosVersion
            "inforom": _FIRMWARE_PIN,  # nvmlDeviceGetInforomImageVersion
            "features": _GPU_FEATURES,
        },
        ["model", "pci_device_id", "count", "architecture", "memory_mib", "mig",
         "compute_mode", "persistence", "ecc", "power_limit_w", "tdp_w", "features"],
    ),
    "nvlink": _section(
        {
            "generation": {"type": "integer", "minimum": 0, "maximum": 5},
            "links_per_gpu": {"type": "integer", "minimum": 0},
            "link_gbps": {"type": "number", "minimum": 0},
            "nvswitch": _BOOL,
        },
        ["generation", "links_per_gpu", "link_gbps", "nvswitch"],
    ),
    "pcie": _section(
        {"gen": {"type": "integer", "minimum": 1, "maximum": 6},
         "width": {"enum": [1, 2, 4, 8, 16]}},
        ["gen", "width"],
    ),
    "driver": _section(
        {
            "branch": {"type": "string", "pattern": r"^[0-9]{3}$"},
            "version": _VERSION,
            "kernel_modules": {"enum": ["open", "proprietary"]},
            "fabricmanager": _BOOL,
            "nvlsm": _BOOL,
            "persistenced": _BOOL,
        },
        ["branch", "version", "kernel_modules", "fabricmanager"],
    ),
    "nccl": _section({"version": _VERSION}, ["version"]),
    "host": _section(
        {
            "iommu": {"enum": ["pt", "on", "off", "any"]},
            "acs_disabled": _BOOL,
            "infiniband": _BOOL,
            "nccl_conf_keys": {"type": "array", "items": _STR},
            # how GPUDirect RDMA is provided (nodegate.profiles.gpudirect: default when absent)
            "gpudirect": {
                "type": "object", "additionalProperties": False,
                "properties": {"mode": {"enum": ["dmabuf", "peermem", "none"]},
                               "source": {"type": "string", "pattern": SOURCE_PATTERN}},
                "required": ["mode", "source"],
            },
        },
        ["iommu", "acs_disabled", "infiniband"],
    ),
    "nvme": _section(
        {
            "devices": {"type": "integer", "minimum": 0},
            "raid_level": {"enum": [0, 1, 10]},
            "mountpoint": {"type": "string", "pattern": "^/"},
            "filesystem": {"enum": ["xfs", "ext4"]},
            "mount_options": {"type": "array", "items": _STR},
            # storage checks (nodegate.judge.storage): SMART health per device with nvme-cli,
            # fio throughput on the array at the load levels; absent: those checks SKIP
            "smart": _BOOL,
            "firmware": {"type": "array", "items": _STR, "minItems": 1},  # pinned revisions
            "drive": {
                "type": "object", "additionalProperties": False,
                "required": ["model", "source"],
                "properties": {
                    "model": _STR,  # id-ctrl mn, as the drive reports it
                    "namespace_bytes": {"type": "integer", "minimum": 1},
                    "seq_read_gbps": {"type": "number", "exclusiveMinimum": 0},
                    "seq_write_gbps": {"type": "number", "exclusiveMinimum": 0},
                    "rand_read_kiops": {"type": "number", "exclusiveMinimum": 0},
                    "source": {"type": "string", "pattern": SOURCE_PATTERN},
                },
            },
            "fio": {
                "type": "object", "additionalProperties": False,
                "properties": {
                    "runtime_s": {"type": "integer", "minimum": 1, "maximum": 600},
                    "size_mib": {"type": "integer", "minimum": 16},
                    "efficiency": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                    "source": {"type": "string", "pattern": SOURCE_PATTERN},
                },
            },
        },
        ["devices", "raid_level", "mountpoint", "filesystem", "mount_options"],
    ),
    "power": _section(
        {
            "psu_count": {"type": "integer", "minimum": 1},
            "psu_redundant": {"type": "integer", "minimum": 0},
            "psu_watts": {"type": "number", "minimum": 1},
            "circuit_amps": {"type": "number", "minimum": 1},
            "circuit_volts": {"type": "number", "minimum": 1},
            "source": {"type": "string", "pattern": SOURCE_PATTERN},
        },
        ["psu_count", "psu_redundant", "psu_watts"],
    ),
    "load": _section(
        {
            "dtypes": {"type": "array", "items": {"enum": list(LOAD_DTYPES)},
                       "minItems": 1},
            "gemm_size": {"type": "integer", "minimum": 16},
            "gemm_seconds": {"type": "number", "exclusiveMinimum": 0},
            "hbm_bytes": {"type": "integer", "minimum": 1},
            "copy_bytes": {"type": "integer", "minimum": 1},
            "p2p_bytes": {"type": "integer", "minimum": 1},
            "allreduce_max_bytes": {"type": "integer", "minimum": 1},
            "burnin_steps": {"type": "integer", "minimum": 1},
            "burnin_seconds": {"type": "number", "exclusiveMinimum": 0},
            "soak_seconds": {"type": "number", "minimum": 0},
            "sample_hz": {"type": "number", "minimum": 1},
            "collective_timeout_s": {"type": "number", "exclusiveMinimum": 0},
            "multinode_max_bytes": {"type": "integer", "minimum": 4096},
            "multinode_ranks_per_node": {"type": "integer", "minimum": 1},
            # ib_write_bw per rail (nodegate netload, and per rail in nodegate multinode)
            "rail_bw_bytes": {"type": "integer", "minimum": 1},
            "rail_bw_seconds": {"type": "integer", "minimum": 1},
            "multinode_rail_bw": {"type": "boolean"},
            "min_phase_seconds": {"type": "number", "minimum": 0},
            "soak_min_seconds": {"type": "number", "minimum": 0},
            "burnin_min_steps": {"type": "integer", "minimum": 1},
            "copy_iters": {"type": "integer", "minimum": 1},
            "allreduce_steps": {"type": "integer", "minimum": 1},
            "power_settle_s": {"type": "number", "minimum": 0},
            # the FSDP burn-in (nodegate.load.fsdp_size, which checks the same bound on
            # profiles given as plain data)
            "fsdp_hbm_fraction": {"type": "number", "exclusiveMinimum": 0, "maximum": 0.98},
            "fsdp_seconds": {"type": "number", "exclusiveMinimum": 0},
            "fsdp_steps": {"type": "integer", "minimum": 1},
            "fsdp_min_steps": {"type": "integer", "minimum": 1},
            "fsdp_checkpoint_every": {"type": "integer", "minimum": 1},
            "fsdp_checkpoint_dir": {"type": "string", "pattern": "^/"},
            "fsdp_model": {
                "type": "object", "additionalProperties": False,
                "properties": {**{k: {"type": "integer", "minimum": 1} for k in (
                    "vocab", "d_model", "layers", "heads", "seq_len", "batch")},
                    "lr": {"type": "number", "exclusiveMinimum": 0}},
            },
            "acceptance_dtypes": {"type": "array", "items": {"enum": list(LOAD_DTYPES)}},
            "dtype_gemm_seconds": {"type": "number", "exclusiveMinimum": 0},
            "hbm_test_fraction": {"type": "number", "exclusiveMinimum": 0, "maximum": 0.98},
            "hbm_test_seconds": {"type": "number", "exclusiveMinimum": 0},
            "hbm_test_cpu_bytes": {"type": "integer", "minimum": 4096},
            "hbm_test_chunk_bytes": {"type": "integer", "minimum": 4096},
            "burnin_model": {
                "type": "object", "additionalProperties": False,
                "properties": {**{k: {"type": "integer", "minimum": 1} for k in (
                    "vocab", "d_model", "layers", "heads", "seq_len", "batch")},
                    "lr": {"type": "number", "exclusiveMinimum": 0}},
            },
        },
        ["dtypes", "gemm_size", "gemm_seconds"],
    ),
    # DCGM's active diagnostic (nodegate.judge.dcgm): the ``dcgmi diag -r`` level per load
    # level; absent or 0: not run
    "dcgm": _section(
        {
            "diag_level": {
                "type": "object", "additionalProperties": False,
                "properties": {lvl: {"type": "integer", "minimum": 0, "maximum": 4}
                               for lvl in ("standard", "acceptance")},
            },
            "timeout_s": {"type": "number", "exclusiveMinimum": 0},
        },
        [],
    ),
    "thresholds": {
        "type": "object",
        "additionalProperties": False,
        "properties": {name: _threshold(key.bound, key.unit)
                       for name, key in THRESHOLD_KEYS.items()},
        "x-required": [],
    },
    # the RDMA fabric the node joins through (nodegate.judge.network)
    "network": _section({"rails": _RAILS}, []),
    # per-code exceptions to NVIDIA's Xid catalogue: {13: ignore, 31: escalate}
    "xid": _section(
        {
            "overrides": {
                "type": "object",
                "propertyNames": {"pattern": r"^[0-9]+$"},
                "additionalProperties": {"enum": ["ignore", "escalate"]},
            },
        },
        [],
    ),
    # automatic remediation (nodegate.remediation, docs/remediation.md): off unless enabled
    "remediation": _section(
        {
            "enabled": _BOOL,
            "gpu_reset": _BOOL,  # false: never reset a GPU, reboot instead
            # a window past ten years counts nothing more, and 1e8 h overflows a datetime
            "window_h": {"type": "number", "exclusiveMinimum": 0, "maximum": 87600},
            "max_per_gpu": {"type": "integer", "minimum": 0, "maximum": 1000},
            "source": {"type": "string", "pattern": SOURCE_PATTERN},
        },
        [],
    ),
}

#: Sections a resolved profile may leave out (the judge has a default for them).
OPTIONAL_SECTIONS = ("xid", "network", "dcgm", "remediation")

#: Keys allowed at the top of a profile file besides the sections.
META = {
    "schema": {"const": "nodegate.profile/1"},
    "name": {"type": "string", "pattern": r"^[a-z0-9][a-z0-9._-]*$"},
    "layer": {"enum": ["gpu", "platform", "profile"]},
    "description": _STR,
    "extends": {"type": "array", "items": {"type": "string", "pattern": r"^[a-z0-9/._-]+$"}},
    "source": {"type": "string", "pattern": SOURCE_PATTERN},
}


def _strip_markers(node: Any, *, resolved: bool) -> Any:
    """Turn our ``x-required`` marker into ``required`` (resolved) or drop it (layer)."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "x-required":
                if resolved and value:
                    out["required"] = list(value)
                continue
            out[key] = _strip_markers(value, resolved=resolved)
        return out
    if isinstance(node, list):
        return [_strip_markers(item, resolved=resolved) for item in node]
    return node


def layer_schema() -> dict[str, Any]:
    """Schema for one profile file or override: any subset, no unknown keys."""
    props = {**copy.deepcopy(META), **SECTIONS}
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "nodegate.profile/1#layer",
        "type": "object",
        "additionalProperties": False,
        "properties": props,
    }
    return dict(_strip_markers(schema, resolved=False))


def override_schema() -> dict[str, Any]:
    """Schema for a site or host ``profile_overrides`` mapping: sections only."""
    schema = layer_schema()
    schema["properties"] = {k: v for k, v in schema["properties"].items() if k in SECTIONS}
    schema["$id"] = "nodegate.profile/1#override"
    return schema


def resolved_schema() -> dict[str, Any]:
    """Schema for a fully layered profile: every section present and complete."""
    props = {**copy.deepcopy(META), **SECTIONS}
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "nodegate.profile/1#resolved",
        "type": "object",
        "additionalProperties": False,
        "properties": props,
        "required": ["name", *(s for s in SECTIONS if s not in OPTIONAL_SECTIONS)],
    }
    return dict(_strip_markers(schema, resolved=True))
