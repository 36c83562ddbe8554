"""Import an ``nvidia-smi -q -x`` capture as a scenario, to replay a sick production node.

Operators already collect this XML. Every GPU in it becomes one ``gpus:`` entry holding what
the capture says; what it does not say (NUMA node, telemetry under load) gets the defaults
documented in docs/simulator.md. Both the 535 layout (``power_readings``,
``clocks_throttle_reasons``) and the 550+ layout (``gpu_power_readings``,
``clocks_event_reasons``) are read. A capture is untrusted input: anything the importer cannot
read (a redacted PCI id, a GPU count that does not match, an unknown product) is a
ConfigError naming the file and the XML path, never a traceback and never a guess.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml

from nodegate.bounds import digits, parse_number
from nodegate.errors import ConfigError
from nodegate.fileio import atomic_write_text, read_bytes
from nodegate.sim.gpu_models import SINGLE_CAPABILITY, architecture_key, product_model
from nodegate.sim.scenario import canonical_bus_id, resolve, validate

_NUM = re.compile(r"-?\d+(\.\d+)?")
_HEX = re.compile(r"^(0[xX])?[0-9a-fA-F]+$")
_UUID = re.compile(r"^GPU-[0-9a-fA-F-]{36}$")
NVIDIA_VENDOR = 0x10DE
LINK = "pci/pci_gpu_link_info"
#: Scenario keys every GPU needs, with the capture element each comes from (the XML path an
#: error names). A capture without them cannot drive the simulated board.
REQUIRED: tuple[tuple[str, str, str], ...] = (
    ("vbios_version", "", "vbios_version"),
    ("memory", "total_mib", "fb_memory_usage/total"),
    ("power", "limit_w", "{power_limit}"),
    ("clocks", "graphics_max_mhz", "max_clocks/graphics_clock"),
    ("clocks", "memory_max_mhz", "max_clocks/mem_clock"),
    ("pcie", "gen", f"{LINK}/pcie_gen/current_link_gen"),
    ("pcie", "width", f"{LINK}/link_widths/current_link_width"),
)
#: Identity values that must differ between GPUs (an anonymised capture repeats them).
UNIQUE = (("pci_bus_id", "pci/pci_bus_id"), ("uuid", "uuid"), ("serial", "serial"))
# what nvidia-smi prints for "no value", and what people put in place of a redacted one
ABSENT = ("", "N/A", "Unknown Error", "[N/A]", "Not Available", "Unknown", "[REDACTED]",
          "REDACTED")
#: What nvidia-smi prints for an NVML answer that is not a value, and that answer: N/A is
#: NOT_SUPPORTED, any other text the driver's nvmlErrorString. Such a field is replayed as that
#: answer (the scenario's ``nvml_errors``), never as a default value.
NVML_ANSWERS: dict[str, str] = {
    "N/A": "NVML_ERROR_NOT_SUPPORTED",
    "[N/A]": "NVML_ERROR_NOT_SUPPORTED",
    "Not Supported": "NVML_ERROR_NOT_SUPPORTED",
    "Requested functionality has been deprecated": "NVML_ERROR_DEPRECATED",
    "Unknown Error": "NVML_ERROR_UNKNOWN",
    "Insufficient Permissions": "NVML_ERROR_NO_PERMISSION",
    "Timeout": "NVML_ERROR_TIMEOUT",
    "GPU is lost": "NVML_ERROR_GPU_IS_LOST",
}
# nvidia-smi reason element suffix -> scenario reason name (gpu_idle is dynamic, not replayed)
REASONS = ("applications_clocks_setting", "sw_power_cap", "hw_slowdown", "sync_boost",
           "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
           "display_clock_setting")


def _text(node: ET.Element | None, path: str) -> str | None:
    """Element text, with nvidia-smi's N/A / empty / Unknown and redactions turned into None."""
    if node is None:
        return None
    found = node.find(path)
    if found is None or found.text is None:
        return None
    value = found.text.strip()
    if value in ABSENT:
        return None
    return value


def _answer(node: ET.Element | None, *paths: str) -> str | None:
    """The NVML error a field's text stands for (``N/A`` -> NOT_SUPPORTED) when every one of
    ``paths`` that is present says so (an element whose own text is N/A, with no children,
    counts for the paths below it); None when any holds a value or none is present."""
    if node is None:
        return None
    found: list[str] = []
    for path in paths:
        element = node.find(path)
        parent = path.rsplit("/", 1)[0] if "/" in path else None
        if element is None and parent is not None:
            element = node.find(parent)
            if element is not None and len(element):
                element = None  # the parent has children, just not this one
        if element is None:
            continue
        answer = NVML_ANSWERS.get((element.text or "").strip())
        if answer is None:
            return None
        found.append(answer)
    return found[0] if found and len(set(found)) == 1 else None


def _hex(node: ET.Element, path: str, *, slot: int, source: str) -> int | None:
    """A hex field (``233010DE``, ``0x1e``); anything else is a ConfigError naming the field."""
    value = _text(node, path)
    if value is None:
        return None
    if not _HEX.match(value):
        raise ConfigError(f"not a hex value: {value!r}", file=source, key=f"gpu[{slot}]/{path}")
    return int(value, 16)


def _num(node: ET.Element | None, path: str) -> float | None:
    """First number in an element such as ``81559 MiB``, ``700.00 W``, ``33 C``, ``16x``."""
    value = _text(node, path)
    if value is None:
        return None
    m = _NUM.search(value)
    return parse_number(m.group(0), float, low=-1e18, high=1e18, key=path) if m else None


def _int(node: ET.Element | None, path: str) -> int | None:
    value = _num(node, path)
    return None if value is None else round(value)


def _flag(node: ET.Element | None, path: str) -> bool | None:
    value = _text(node, path)
    if value is None:
        return None
    return value.lower() in ("enabled", "yes", "active", "true")


def _first(*values: Any) -> Any:
    for value in values:
        if value is not None:
            return value
    return None


def _put(d: dict[str, Any], key: str, value: Any) -> None:
    if value is not None:
        d[key] = value


#: How one field is read: its key, the reader (``_int``, ``_num``, ``_flag``...), its path.
Field = tuple[str, Callable[[ET.Element | None, str], Any], str]


def _read(node: ET.Element | None, fields: Iterable[Field]) -> dict[str, Any]:
    """key -> value of each field ``node`` holds; absent ones are left out."""
    out: dict[str, Any] = {}
    for key, reader, path in fields:
        _put(out, key, reader(node, path))
    return out


def _ecc_counts(errors: ET.Element | None, scope: str) -> tuple[int | None, int | None]:
    """(correctable, uncorrectable) from either the sram/dram or the single/double-bit layout."""
    if errors is None or errors.find(scope) is None:
        return None, None
    node = errors.find(scope)
    dram_c, dram_u = _int(node, "dram_correctable"), _int(node, "dram_uncorrectable")
    if dram_c is not None or dram_u is not None:
        sram_c = _int(node, "sram_correctable") or 0
        sram_u = (_int(node, "sram_uncorrectable") or 0) + (
            _int(node, "sram_uncorrectable_parity") or 0
        ) + (_int(node, "sram_uncorrectable_secded") or 0)
        return (dram_c or 0) + sram_c, (dram_u or 0) + sram_u
    return _int(node, "single_bit/total"), _int(node, "double_bit/total")


#: Retired pages per cause the simulator holds (scenario.schema.json maxItems, MAX_PAGES in C)
MAX_RETIRED_PAGES = 64


def _pages(node: ET.Element | None, *, key: str, source: str) -> list[int]:
    if node is None:
        return []
    addrs = []
    for a in node.iter("retired_page_address"):
        text = (a.text or "").strip()
        if text in ABSENT:
            continue
        if not _HEX.match(text):
            raise ConfigError(f"not a hex page address: {text!r}", file=source, key=key)
        addrs.append(int(text, 16))
    count = _int(node, "retired_count") or 0
    if count > MAX_RETIRED_PAGES:
        # checked before the pages are made up below: a corrupt count would fill the memory
        raise ConfigError(f"{count} retired pages: the simulator holds at most "
                          f"{MAX_RETIRED_PAGES} per cause (scenario schema, nvml_sim.c MAX_PAGES)",
                          file=source, key=f"{key}/retired_count")
    base = 0x1A0000
    while len(addrs) < count:  # count without a page list: synthesize distinct pages
        addrs.append(base + len(addrs))
    return addrs


def gpu_model(node: ET.Element, slot: int, *, source: str) -> tuple[str, list[int]]:
    """(architecture, compute capability) from ``product_architecture`` and ``product_name``.

    The product name decides the capability (Ampere is 8.0 or 8.6); the architecture string,
    where the capture has one, must agree with it. Unknown names are errors, not Hopper.
    """
    name = _text(node, "product_name")
    arch_text = _text(node, "product_architecture")
    arch = architecture_key(arch_text) if arch_text else None
    if arch_text and arch is None:
        raise ConfigError(f"unknown architecture {arch_text!r}", file=source,
                          key=f"gpu[{slot}]/product_architecture")
    model = product_model(name) if name else None
    if model is not None:
        if arch is not None and arch != model[0]:
            raise ConfigError(f"architecture {arch_text!r} does not match product {name!r} "
                              f"({model[0]})", file=source,
                              key=f"gpu[{slot}]/product_architecture")
        return model[0], list(model[1])
    if arch is not None and arch in SINGLE_CAPABILITY:
        return arch, list(SINGLE_CAPABILITY[arch])
    what = f"architecture {arch_text!r} has more than one compute capability and " if arch \
        else ""
    raise ConfigError(f"{what}product {name!r} is not in the compute capability table "
                      "(nodegate.sim.gpu_models)", file=source, key=f"gpu[{slot}]/product_name")


def gpu_from_xml(node: ET.Element, slot: int, count: int, *, source: str = "capture"
                 ) -> dict[str, Any]:
    """One ``gpus:`` entry from a ``<gpu>`` element, one section of the capture at a time."""
    gpu = _identity(node, slot, source=source)
    gpu["numa_node"] = 0 if slot < max(1, count // 2) else 1
    gpu["inforom"] = {
        "image": _text(node, "inforom_version/img_version"),
        "oem": _text(node, "inforom_version/oem_object"),
        "ecc": _text(node, "inforom_version/ecc_object"),
        "power": _text(node, "inforom_version/pwr_object"),
    }
    gpu["memory"], gpu["processes"] = _memory(node)
    gpu["temperature"] = _temperature(node.find("temperature"))
    gpu["power"] = _power(node)
    errors: dict[str, str] = {}
    gpu["clocks"] = _clocks(node, errors)
    gpu["clocks_event_reasons"] = [
        reason for reason in REASONS
        if _first(_flag(node, f"clocks_event_reasons/clocks_event_reason_{reason}"),
                  _flag(node, f"clocks_throttle_reasons/clocks_throttle_reason_{reason}"))]
    _put(gpu, "utilization_pct", _int(node, "utilization/gpu_util"))
    gpu["pcie"] = _pcie(node, busy=bool(gpu.get("utilization_pct")))
    gpu["ecc"] = _ecc(node, errors)
    gpu["remapped_rows"] = _remapped_rows(node, errors)
    _retired_pages_answer(node, errors)
    gpu["retired_pages"] = {
        "sbe": _pages(node.find("retired_pages/multiple_single_bit_retirement"),
                      key=f"gpu[{slot}]/retired_pages/multiple_single_bit_retirement",
                      source=source),
        "dbe": _pages(node.find("retired_pages/double_bit_retirement"),
                      key=f"gpu[{slot}]/retired_pages/double_bit_retirement", source=source),
        "pending": bool(_flag(node, "retired_pages/pending_retirement")),
    }
    _put(gpu, "persistence", _flag(node, "persistence_mode"))
    _put(gpu, "mig", _flag(node, "mig_mode/current_mig"))
    _put(gpu, "mig_pending", _flag(node, "mig_mode/pending_mig"))
    mode = (_text(node, "compute_mode") or "Default").lower()
    gpu["compute_mode"] = {"exclusive_process": "exclusive_process",
                           "prohibited": "prohibited"}.get(mode, "default")
    gpu["fabric"] = _fabric(node)
    new_layout = node.find("gpu_power_readings") is not None
    _require(gpu, slot, source=source, power_limit="gpu_power_readings/current_power_limit"
             if new_layout else "power_readings/power_limit")
    # NVLink: `nvidia-smi -q -x` has no NVLink section (none in the DTDs v10-v13 nor in any
    # public capture we found; NVLink state comes from `nvidia-smi nvlink`, which has no XML
    # form). Links are not invented from the product name: a capture holds none, so the
    # scenario has none. Add `nvlink:` to the scenario by hand to replay them.
    gpu["nvlink"] = {"links": 0}
    if errors:
        gpu["nvml_errors"] = errors
    return gpu


def _identity(node: ET.Element, slot: int, *, source: str) -> dict[str, Any]:
    """Name, architecture, PCI ids and the card's identity; refuses what cannot be a GPU."""
    gpu: dict[str, Any] = {}
    name = _text(node, "product_name")
    if name is None:
        raise ConfigError("GPU has no product name", file=source, key=f"gpu[{slot}]/product_name")
    gpu["name"] = name
    arch, capability = gpu_model(node, slot, source=source)
    gpu["architecture"] = arch
    gpu["cuda_compute_capability"] = capability
    gpu["pci_bus_id"], gpu["pci_device_id"] = _pci_ids(node, slot, source=source)
    _put(gpu, "pci_subsystem_id", _hex(node, "pci/pci_sub_system_id", slot=slot, source=source))
    uuid = _text(node, "uuid")
    if uuid is not None and not _UUID.match(uuid):
        raise ConfigError(f"not a GPU UUID: {uuid!r}", file=source, key=f"gpu[{slot}]/uuid")
    _put(gpu, "uuid", uuid)
    for key, path in (("serial", "serial"), ("vbios_version", "vbios_version"),
                      ("board_part_number", "board_part_number")):
        _put(gpu, key, _text(node, path))
    _put(gpu, "minor_number", _int(node, "minor_number"))
    _put(gpu, "module_id", _int(node, "gpu_module_id"))
    board_id = _text(node, "board_id")
    if board_id:
        if (decimal := digits(board_id, max_chars=19)) is not None:
            gpu["board_id"] = decimal
        else:
            gpu["board_id"] = _hex(node, "board_id", slot=slot, source=source)
    return gpu


def _pci_ids(node: ET.Element, slot: int, *, source: str) -> tuple[str, int]:
    """(canonical bus id, PCI device id): both required, the device id an NVIDIA one."""
    bus_id = _text(node, "pci/pci_bus_id") or node.get("id")
    key = f"gpu[{slot}]/pci/pci_bus_id"
    if not bus_id:
        raise ConfigError("GPU has no PCI bus id", file=source, key=key)
    try:
        canonical = canonical_bus_id(bus_id)
    except ValueError:
        raise ConfigError(f"not a PCI bus id: {bus_id!r}", file=source, key=key) from None
    dev_id = _hex(node, "pci/pci_device_id", slot=slot, source=source)
    key = f"gpu[{slot}]/pci/pci_device_id"
    if dev_id is None:
        raise ConfigError("PCI device id missing or redacted; the simulated board needs it",
                          file=source, key=key)
    # nvidia-smi prints NVML's pciDeviceId: device id in the high 16 bits, vendor in the low
    if dev_id & 0xFFFF != NVIDIA_VENDOR or not dev_id >> 16:
        raise ConfigError(f"{dev_id:08X} is not an NVIDIA device id (vendor 10DE in the low "
                          "16 bits): redacted?", file=source, key=key)
    return canonical, dev_id >> 16


def _memory(node: ET.Element) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(memory sizes, processes); ``used_mib`` is what no listed process accounts for."""
    mem: dict[str, Any] = {}
    _put(mem, "total_mib", _int(node, "fb_memory_usage/total"))
    _put(mem, "reserved_mib", _int(node, "fb_memory_usage/reserved"))
    _put(mem, "bar1_mib", _int(node, "bar1_memory_usage/total"))
    procs: list[dict[str, Any]] = []
    for proc in node.findall("processes/process_info"):
        pid = _int(proc, "pid")
        if pid:
            procs.append({"pid": pid, "name": _text(proc, "process_name") or "unknown",
                          "used_mib": _int(proc, "used_memory") or 0})
    used = _int(node, "fb_memory_usage/used")
    if used is not None:
        mem["used_mib"] = max(0, used - sum(p["used_mib"] for p in procs))
    return mem, procs


def _temperature(t: ET.Element | None) -> dict[str, Any]:
    return _read(t, (("idle_c", _num, "gpu_temp"), ("memory_idle_c", _num, "memory_temp"),
                     ("shutdown_c", _int, "gpu_temp_max_threshold"),
                     ("slowdown_c", _int, "gpu_temp_slow_threshold"),
                     ("gpu_max_c", _int, "gpu_temp_max_gpu_threshold"),
                     ("memory_max_c", _int, "gpu_temp_max_mem_threshold")))


def _power(node: ET.Element) -> dict[str, Any]:
    """Limits and idle draw from the 550+ (``gpu_power_readings``) or the 535 layout."""
    p = node.find("gpu_power_readings")
    if p is None:
        p = node.find("power_readings")
    power: dict[str, Any] = {}
    _put(power, "limit_w", _first(_num(p, "current_power_limit"), _num(p, "enforced_power_limit"),
                                  _num(p, "power_limit")))
    _put(power, "default_limit_w", _num(p, "default_power_limit"))
    _put(power, "min_limit_w", _num(p, "min_power_limit"))
    _put(power, "max_limit_w", _num(p, "max_power_limit"))
    _put(power, "idle_w", _first(_num(p, "instant_power_draw"), _num(p, "average_power_draw"),
                                 _num(p, "power_draw")))
    return power


def _clocks(node: ET.Element, errors: dict[str, str]) -> dict[str, Any]:
    """Max and application clocks; application clocks nvidia-smi prints as N/A or
    "deprecated" (newer drivers) stay that answer, never the max clocks."""
    for function, section in (("nvmlDeviceGetApplicationsClock", "applications_clocks"),
                              ("nvmlDeviceGetDefaultApplicationsClock",
                               "default_applications_clocks")):
        answer = _answer(node, f"{section}/graphics_clock", f"{section}/mem_clock")
        if answer is not None:
            errors[function] = answer
    return _read(node, (
        ("graphics_max_mhz", _int, "max_clocks/graphics_clock"),
        ("sm_max_mhz", _int, "max_clocks/sm_clock"),
        ("memory_max_mhz", _int, "max_clocks/mem_clock"),
        ("video_max_mhz", _int, "max_clocks/video_clock"),
        ("applications_graphics_mhz", _int, "applications_clocks/graphics_clock"),
        ("applications_memory_mhz", _int, "applications_clocks/mem_clock"),
        ("default_applications_graphics_mhz", _int,
         "default_applications_clocks/graphics_clock"),
        ("default_applications_memory_mhz", _int, "default_applications_clocks/mem_clock"),
    ))


def _pcie(node: ET.Element, *, busy: bool) -> dict[str, Any]:
    """The PCIe link. max_link_gen is NVML's link max (the lower of GPU and host),
    max_device_link_gen the GPU's own. The captured current gen is what the board read then:
    kept as its reading when idle; when the capture was idle, the link is taken to train to
    its max when busy."""
    pcie: dict[str, Any] = {}
    current = _int(node, f"{LINK}/pcie_gen/current_link_gen")
    link_max = _first(_int(node, f"{LINK}/pcie_gen/max_link_gen"),
                      _int(node, f"{LINK}/pcie_gen/max_device_link_gen"))
    _put(pcie, "gen", current if busy or link_max is None else link_max)
    _put(pcie, "idle_gen", current)
    _put(pcie, "max_gen", link_max)
    _put(pcie, "gpu_max_gen", _first(_int(node, f"{LINK}/pcie_gen/max_device_link_gen"),
                                     link_max))
    _put(pcie, "width", _int(node, f"{LINK}/link_widths/current_link_width"))
    _put(pcie, "max_width", _int(node, f"{LINK}/link_widths/max_link_width"))
    _put(pcie, "replay_counter", _int(node, "pci/replay_counter"))
    return pcie


_ECC_COUNTERS = ("nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetMemoryErrorCounter")


def _ecc(node: ET.Element, answers: dict[str, str]) -> dict[str, Any]:
    """ECC mode and counters. An ECC mode nvidia-smi could not read (N/A on a card without
    ECC) is that answer from every ECC call, never "enabled" with zero counters; counters it
    could not read are that answer from the counter calls."""
    ecc: dict[str, Any] = {}
    mode = _answer(node, "ecc_mode/current_ecc")
    if mode is not None:
        answers["nvmlDeviceGetEccMode"] = answers["nvmlDeviceGetDefaultEccMode"] = mode
        for function in _ECC_COUNTERS:
            answers[function] = mode
        ecc["enabled"] = False  # no ECC path of the simulated card reports a count
        return ecc
    _put(ecc, "enabled", _flag(node, "ecc_mode/current_ecc"))
    _put(ecc, "pending", _flag(node, "ecc_mode/pending_ecc"))
    errors = node.find("ecc_errors")
    vol_c, vol_u = _ecc_counts(errors, "volatile")
    agg_c, agg_u = _ecc_counts(errors, "aggregate")
    _put(ecc, "volatile_sbe", vol_c)
    _put(ecc, "volatile_dbe", vol_u)
    _put(ecc, "aggregate_sbe", agg_c)
    _put(ecc, "aggregate_dbe", agg_u)
    counters = _ecc_counters_answer(node)
    if all(v is None for v in (vol_c, vol_u, agg_c, agg_u)) and counters is not None:
        for function in _ECC_COUNTERS:
            answers[function] = counters
    return ecc


def _ecc_counters_answer(node: ET.Element) -> str | None:
    """The NVML answer every ECC counter element of the capture stands for, if one."""
    counters = node.find("ecc_errors")
    if counters is None:
        return None
    leaves = [e for e in counters.iter() if not len(e)]
    answers = {NVML_ANSWERS.get((e.text or "").strip()) for e in leaves}
    return answers.pop() if len(answers) == 1 and None not in answers else None


def _remapped_rows(node: ET.Element, errors: dict[str, str]) -> dict[str, Any]:
    """Remapped rows; ``<remapped_rows>N/A</remapped_rows>`` (before Ampere, or a card that
    does not report them) is NVML's NOT_SUPPORTED, never 0 rows."""
    answer = _answer(node, "remapped_rows/remapped_row_corr", "remapped_rows/remapped_row_unc",
                     "remapped_rows/remapped_row_pending", "remapped_rows/remapped_row_failure")
    if answer is not None:
        errors["nvmlDeviceGetRemappedRows"] = answer
        return {}
    return _read(node, (("correctable", _int, "remapped_rows/remapped_row_corr"),
                        ("uncorrectable", _int, "remapped_rows/remapped_row_unc"),
                        ("pending", _flag, "remapped_rows/remapped_row_pending"),
                        ("failure", _flag, "remapped_rows/remapped_row_failure")))


def _retired_pages_answer(node: ET.Element, errors: dict[str, str]) -> None:
    """Page retirement nvidia-smi printed as N/A (Ampere and later) is NOT_SUPPORTED from the
    retirement calls, never "no pages retired"."""
    sbe = "retired_pages/multiple_single_bit_retirement/retired_count"
    dbe = "retired_pages/double_bit_retirement/retired_count"
    answer = _answer(node, sbe, dbe)
    if answer is not None:
        errors["nvmlDeviceGetRetiredPages"] = answer
    pending = _answer(node, "retired_pages/pending_retirement")
    if pending is not None:
        errors["nvmlDeviceGetRetiredPagesPendingStatus"] = pending


def _fabric(node: ET.Element) -> dict[str, Any] | None:
    """NVLink fabric state (Hopper and later); None where the capture has none."""
    state = (_text(node, "fabric/state") or "").lower().replace(" ", "_")
    if state not in ("completed", "in_progress", "not_started"):
        return None
    status = (_text(node, "fabric/status") or "success").lower().replace(" ", "_")
    fabric: dict[str, Any] = {"state": state,
                              "status": status if status in ("success", "not_ready", "in_use")
                              else ("success" if state == "completed" else "not_ready")}
    _put(fabric, "clique_id", _int(node, "fabric/cliqueId"))
    _put(fabric, "cluster_uuid", _text(node, "fabric/clusterUuid"))
    bandwidth = _text(node, "fabric/health/bandwidth")
    if bandwidth:
        fabric["degraded_bandwidth"] = bandwidth.lower() != "full"
    return fabric


def _require(gpu: dict[str, Any], slot: int, *, source: str, power_limit: str) -> None:
    """ConfigError naming the capture element behind the first required value it lacks."""
    for section, key, path in REQUIRED:
        value = gpu.get(section) if not key else gpu.get(section, {}).get(key)
        if value is None:
            where = path.format(power_limit=power_limit)
            raise ConfigError("missing, N/A or redacted; the simulated board needs it",
                              file=source, key=f"gpu[{slot}]/{where}")


def _unique(entries: list[dict[str, Any]], *, source: str) -> None:
    """Two GPUs with one bus id, UUID or serial: an anonymised capture, not a board."""
    for key, path in UNIQUE:
        seen: dict[str, int] = {}
        for slot, gpu in enumerate(entries):
            value = str(gpu.get(key, "")).upper()
            if value and value in seen:
                raise ConfigError(f"{key} {gpu[key]} repeats gpu[{seen[value]}]'s "
                                  "(anonymised capture?)", file=source, key=f"gpu[{slot}]/{path}")
            seen.setdefault(value, slot)


def _gpu_count(root: ET.Element, present: int, *, source: str, allow_partial: bool) -> str:
    """Compare ``attached_gpus`` with the ``<gpu>`` elements; '' or a note for the description."""
    attached = _text(root, "attached_gpus")
    if attached is not None and not attached.isdigit():
        raise ConfigError(f"not a GPU count: {attached!r}", file=source, key="attached_gpus")
    if attached is not None and int(attached) == present:
        return ""
    said = f"attached_gpus says {attached}" if attached else "the capture has no attached_gpus"
    if not allow_partial:
        raise ConfigError(f"{said} but {present} <gpu> elements are present: a partial capture "
                          "(use --allow-partial to import the GPUs it has)", file=source,
                          key="attached_gpus")
    return f"; partial: {present} of {attached or 'an unknown number of'} GPUs"


def scenario_from_capture(path: Path, *, name: str, allow_partial: bool = False
                          ) -> dict[str, Any]:
    """Parse the capture at ``path`` into a scenario mapping (validated and resolvable)."""
    try:
        root = ET.fromstring(read_bytes(path, kind="capture"))
    except (OSError, ET.ParseError) as exc:
        raise ConfigError(
            f"not a readable nvidia-smi -q -x capture: {exc}", file=str(path)
        ) from exc
    if root.tag != "nvidia_smi_log":
        raise ConfigError(f"root element is <{root.tag}>, expected <nvidia_smi_log>",
                          file=str(path))
    gpus = root.findall("gpu")
    if not gpus:
        raise ConfigError("capture lists no <gpu>", file=str(path))
    source = str(path)
    partial = _gpu_count(root, len(gpus), source=source, allow_partial=allow_partial)
    driver = _text(root, "driver_version")
    if driver is None:
        raise ConfigError("capture has no driver_version", file=source, key="driver_version")
    cuda = _text(root, "cuda_version") or "12.0"
    major, _, minor = cuda.partition(".")
    if not (major.isdigit() and (minor.isdigit() or not minor)):
        raise ConfigError(f"not a CUDA version: {cuda!r}", file=source, key="cuda_version")
    entries = [_gpu_entry(node, i, len(gpus), source=source) for i, node in enumerate(gpus)]
    _unique(entries, source=source)
    safe_name = re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-") or "capture"
    data: dict[str, Any] = {
        "name": safe_name,
        "description": f"imported from {path.name} ({len(gpus)}x {entries[0]['name']}, "
        f"driver {driver}{partial})",
        "system": {
            "driver_version": driver,
            # NVML's version is the CUDA major and the driver ("13.580.159.04" beside CUDA
            # 13.0 on a real H200, docs/hardware-runs/2026-12-04-h200-health.md)
            "nvml_version": f"{int(major)}.{driver}",
            "cuda_driver_version": int(major) * 1000 + int(minor or 0) * 10,
        },
        "topology": {"nvswitch": False},
        "gpus": entries,
    }
    validate(data, source=str(path))
    resolve(data, source=str(path))
    return data


def _gpu_entry(node: ET.Element, slot: int, count: int, *, source: str) -> dict[str, Any]:
    """gpu_from_xml, with any value it could not convert reported as the GPU's ConfigError."""
    try:
        return gpu_from_xml(node, slot, count, source=source)
    except (ValueError, TypeError, KeyError, IndexError, OverflowError) as exc:
        raise ConfigError(f"cannot read this GPU: {exc}", file=source,
                          key=f"gpu[{slot}]") from exc


def import_capture(path: Path, output: Path, *, name: str, allow_partial: bool = False
                   ) -> dict[str, Any]:
    """Write the scenario for capture ``path`` to ``output`` and return it."""
    data = scenario_from_capture(path, name=name, allow_partial=allow_partial)
    header = (f"# Imported by `nodegate sim import` from {path.name}.\n"
              "# Fields the capture lacks use the defaults in docs/simulator.md; it has no\n"
              "# NVLink data, so add `nvlink:` per GPU to replay links.\n")
    try:
        atomic_write_text(output, header + yaml.safe_dump(data, sort_keys=False, width=100))
    except OSError as exc:
        raise ConfigError(f"cannot write the scenario: {exc.strerror}", file=str(output)
                          ) from exc
    return data
