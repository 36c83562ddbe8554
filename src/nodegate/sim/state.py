"""Flatten a resolved board into the files the C library and the log probe read.

The C side must not parse YAML, so this writes ``state`` as ``key=value`` lines grouped under
``[system]`` and ``[gpu N]`` (N = the NVML index, after ``gpu-missing`` removals), with every
value already in NVML units (mW, MiB, enum numbers). It also writes the kernel log in dmesg
format and a boot id, which the log probe reads in place of ``journalctl -k``.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pynvml

from nodegate.sim.scenario import Board, Gpu, canonical_bus_id, parse_bus_id

# nvml.h nvmlDeviceArchitecture_t (nvidia-ml-py NVML_DEVICE_ARCH_*)
ARCHITECTURES = {"kepler": 2, "maxwell": 3, "pascal": 4, "volta": 5, "turing": 6, "ampere": 7,
                 "ada": 8, "hopper": 9, "blackwell": 10}
COMPUTE_MODES = {"default": 0, "prohibited": 2, "exclusive_process": 3}
FABRIC_STATES = {"not_started": 1, "in_progress": 2, "completed": 3}
FABRIC_STATUS = {"success": 0, "not_supported": 3, "in_use": 19, "not_ready": 27, "unknown": 999}
REASON_BITS = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
}
NVIDIA_VENDOR = 0x10DE
BRAND_NVIDIA = 14
# fabric health mask with every reported field "false/healthy" (nvml.h shifts 0, 2, 4, 6)
FABRIC_HEALTH_OK = 2 | (2 << 2) | (2 << 4) | (2 << 6)

#: Kernel log text per Xid code, in the driver's wording.
XID_TEXT: dict[int, str] = {
    13: "Graphics SM Warp Exception on (GPC 1, TPC 0, SM 0): Out Of Range Address",
    31: "Ch 00000010, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted "
    "@ 0x7f12_3a000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
    43: "Ch 00000008",
    45: "Ch 00000008",
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer "
    "at partition 6, subpartition 1.",
    61: "Internal micro-controller breakpoint/warning (0x0, 0x0)",
    62: "Internal micro-controller halt (0x0)",
    63: "Row Remapper: New row (0x00000000000a3f40) marked for remapping, reset gpu to activate.",
    64: "Row Remapper: Failed to remap row (0x00000000000a3f40), no spare rows available.",
    74: "NVLink: fatal error detected on link 5(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
    79: "GPU has fallen off the bus.",
    92: "High single-bit ECC error rate",
    94: "Contained: SM (0x1). RST: No, D-RST: No",
    95: "Uncontained: LTC TAG (0x2,0x0). RST: Yes, D-RST: No",
    109: "Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005",
    119: "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 "
    "(GSP_RM_CONTROL) (0x20800a4c 0x4).",
    # the driver names the new action, nvml.h nvmlDeviceGpuRecoveryAction_t value and name
    154: "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
}


def _counter(base: float, rate: float) -> str:
    return f"{base:g} {rate:g}" if rate else f"{base:g}"


def _gpu_lines(board: Board, gpu: Gpu, index: int) -> list[str]:
    dom, bus, dev, fn = parse_bus_id(gpu["pci_bus_id"])
    mem, temp, power, clocks = gpu["memory"], gpu["temperature"], gpu["power"], gpu["clocks"]
    pcie, ecc, rows, pages = gpu["pcie"], gpu["ecc"], gpu["remapped_rows"], gpu["retired_pages"]
    inforom = gpu["inforom"]
    device_id = gpu["pci_device_id"]
    reasons = 0
    for name in gpu["clocks_event_reasons"]:
        reasons |= REASON_BITS[name]
    uptime = board["system"]["uptime_s"]
    kv: dict[str, Any] = {
        "lost": int(gpu["lost"]),
        "hang": int(gpu.get("hang", False)),
        "name": gpu["name"],
        "uuid": gpu["uuid"],
        "serial": gpu["serial"],
        "part_number": gpu["board_part_number"],
        "vbios": gpu["vbios_version"],
        "inforom_image": inforom["image"] or "",
        "inforom_oem": inforom["oem"] or "",
        "inforom_ecc": inforom["ecc"] or "",
        "inforom_power": inforom["power"] or "",
        "inforom_corrupted": int(inforom.get("corrupted", False)),
        "bus_id": f"{dom:08X}:{bus:02X}:{dev:02X}.{fn}",
        "domain": dom,
        "bus": bus,
        "device": dev,
        "function": fn,
        "pci_device_id": hex((device_id << 16) | NVIDIA_VENDOR),
        "pci_subsystem_id": hex(gpu["pci_subsystem_id"]),
        "architecture": ARCHITECTURES[gpu["architecture"]],
        "cc_major": gpu["cuda_compute_capability"][0],
        "cc_minor": gpu["cuda_compute_capability"][1],
        "brand": BRAND_NVIDIA,
        "minor_number": gpu["minor_number"],
        "module_id": gpu["module_id"],
        "board_id": gpu["board_id"],
        "numa_node": gpu["numa_node"],
        "mem_total_mib": mem["total_mib"],
        "mem_reserved_mib": mem["reserved_mib"],
        "mem_used_mib": mem["used_mib"],
        "bar1_mib": mem["bar1_mib"],
        "mem_bus_width": mem["bus_width"],
        "num_cores": gpu["cuda_cores"],
        "temp_idle": temp["idle_c"],
        "temp_load": temp["load_c"],
        "mem_temp_idle": temp["memory_idle_c"],
        "mem_temp_load": temp["memory_load_c"],
        "tau_s": gpu["telemetry"]["tau_s"],
        "temp_slowdown": temp["slowdown_c"],
        "temp_shutdown": temp["shutdown_c"],
        "temp_gpu_max": temp["gpu_max_c"],
        "temp_mem_max": temp["memory_max_c"],
        "power_limit": round(power["limit_w"] * 1000),
        "power_default_limit": round(power["default_limit_w"] * 1000),
        "power_min_limit": round(power["min_limit_w"] * 1000),
        "power_max_limit": round(power["max_limit_w"] * 1000),
        "power_idle": power["idle_w"] * 1000,
        "power_load": power["load_w"] * 1000,
        "power_cap": power.get("cap_w", 0) * 1000,
        "energy0_mj": round(uptime * power["idle_w"] * 1000),
        "clk_graphics_max": clocks["graphics_max_mhz"],
        "clk_sm_max": clocks["sm_max_mhz"],
        "clk_mem_max": clocks["memory_max_mhz"],
        "clk_video_max": clocks["video_max_mhz"],
        "clk_graphics_idle": clocks["graphics_idle_mhz"],
        "clk_mem_idle": clocks["memory_max_mhz"],
        "clk_video_idle": clocks["video_idle_mhz"],
        "clk_app_graphics": clocks["applications_graphics_mhz"],
        "clk_app_mem": clocks["applications_memory_mhz"],
        "clk_default_app_graphics": clocks["default_applications_graphics_mhz"],
        "clk_default_app_mem": clocks["default_applications_memory_mhz"],
        "clk_cap": clocks["cap_mhz"],
        "static_reasons": hex(reasons),
        "util_base": gpu["utilization_pct"],
        "pcie_gen": pcie["gen"],
        "pcie_width": pcie["width"],
        "pcie_max_gen": pcie["max_gen"],
        "pcie_max_width": pcie["max_width"],
        "pcie_gpu_max_gen": pcie["gpu_max_gen"],
        "pcie_idle_gen": pcie["idle_gen"],
        "pcie_replay": _counter(pcie["replay_counter"], pcie["replay_rate_per_s"]),
        "ecc_current": int(ecc["enabled"]),
        "ecc_pending": int(ecc["pending"]),
        "ecc_default": int(ecc["default"]),
        "sbe_vol": _counter(ecc["volatile_sbe"], ecc["volatile_sbe_rate_per_s"]),
        "dbe_vol": _counter(ecc["volatile_dbe"], 0),
        "sbe_agg": _counter(ecc["aggregate_sbe"], ecc["volatile_sbe_rate_per_s"]),
        "dbe_agg": _counter(ecc["aggregate_dbe"], 0),
        "remap_corr": rows["correctable"],
        "remap_unc": rows["uncorrectable"],
        "remap_pending": int(rows["pending"]),
        "remap_failure": int(rows["failure"]),
        "retired_sbe": ",".join(hex(p) for p in pages["sbe"]),
        "retired_dbe": ",".join(hex(p) for p in pages["dbe"]),
        "retired_pending": int(pages["pending"]),
        "nvlink_count": gpu["nvlink"]["links"],
        "persistence": int(gpu["persistence"]),
        "mig_current": int(gpu["mig"]),
        "mig_pending": int(gpu["mig_pending"]),
        "compute_mode": COMPUTE_MODES[gpu["compute_mode"]],
    }
    fabric = gpu["fabric"]
    kv["fabric_supported"] = int(fabric is not None)
    if fabric is not None:
        health = FABRIC_HEALTH_OK
        if fabric["degraded_bandwidth"]:
            health = (health & ~0x3) | 1
        kv.update(
            fabric_state=FABRIC_STATES[fabric["state"]],
            fabric_status=FABRIC_STATUS[fabric["status"]],
            fabric_clique=fabric["clique_id"],
            fabric_health_mask=health,
            fabric_cluster_uuid=uuid.UUID(fabric["cluster_uuid"]).hex
            if _is_uuid(fabric["cluster_uuid"])
            else uuid.uuid5(uuid.NAMESPACE_URL, fabric["cluster_uuid"]).hex,
        )
    action = recovery_action(gpu)
    kv["recovery_supported"] = int(action is not None)
    if action is not None:
        # nvml.h nvmlDeviceGpuRecoveryAction_t, by its name in nvidia-ml-py
        kv["recovery_action"] = int(getattr(pynvml, f"NVML_GPU_RECOVERY_ACTION_{action.upper()}"))
    for function, error in sorted(gpu.get("nvml_errors", {}).items()):
        kv[f"nvml_error.{function}"] = int(getattr(pynvml, error))
    lines = [f"[gpu {index}]"] + [f"{k}={v}" for k, v in kv.items()]
    lines += _link_lines(board, gpu)
    for k, proc in enumerate(gpu["processes"]):
        lines += [
            f"proc.{k}.pid={proc['pid']}",
            f"proc.{k}.name={proc.get('name', 'python3')}",
            f"proc.{k}.used_mib={proc.get('used_mib', 0)}",
        ]
    return lines


def recovery_action(gpu: Gpu) -> str | None:
    """What ``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`` answers: the scenario's
    ``recovery_action`` (null: NOT_SUPPORTED), else ``none`` on Blackwell and NOT_SUPPORTED on
    older architectures (no public source shows a Hopper or Ampere driver answering it)."""
    if "recovery_action" in gpu:
        value: str | None = gpu["recovery_action"]
        return value
    return "none" if gpu["architecture"] == "blackwell" else None


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def _link_lines(board: Board, gpu: Gpu) -> list[str]:
    """Remote end of each link: an NVSwitch round-robin, or a peer GPU on direct boards."""
    nv = gpu["nvlink"]
    links = nv["links"]
    topo = board["topology"]
    switches = topo["nvswitch_bus_ids"] or ["0000:05:00.0", "0000:06:00.0", "0000:07:00.0",
                                            "0000:08:00.0"]
    gpus = board["gpus"]
    errors = {e["link"]: e for e in nv["errors"]}
    slow = {s["link"]: s["speed_mbps"] for s in nv.get("slow", [])}
    out: list[str] = []
    for link in range(links):
        if topo["nvswitch"]:
            remote_bus, remote_type, remote_id = switches[link % len(switches)], 2, (
                topo["nvswitch_device_id"] << 16 | NVIDIA_VENDOR
            )
        else:
            peers = [g for g in gpus if g is not gpu] or [gpu]
            peer = peers[link % len(peers)]
            remote_bus, remote_type = peer["pci_bus_id"], 0
            remote_id = peer["pci_device_id"] << 16 | NVIDIA_VENDOR
        d, b, v, f = parse_bus_id(remote_bus)
        active = link not in nv["inactive"]
        p = f"link.{link}."
        out += [
            f"{p}state={int(active)}",
            f"{p}version={nv['version']}",
            f"{p}remote_type={remote_type}",
            f"{p}remote_bus={d:08X}:{b:02X}:{v:02X}.{f}",
            f"{p}remote_device_id={hex(remote_id)}",
            f"{p}speed_mbps={slow.get(link, nv['speed_mbps']) if active else 0}",
        ]
        err = errors.get(link)
        if err:
            for name in ("replay", "recovery", "crc_flit", "crc_data", "ecc_data"):
                out.append(
                    f"{p}{name}={_counter(err.get(name, 0), err.get(name + '_rate_per_s', 0))}"
                )
    return out


def nvml_gpus(board: Board) -> list[Gpu]:
    """GPUs NVML enumerates, in index order (a missing GPU is skipped, later ones renumber)."""
    return [g for g in board["gpus"] if not g["missing"]]


def render_state(board: Board, epoch: float) -> str:
    """The flat state file text."""
    system = board["system"]
    present = nvml_gpus(board)
    lines = [
        f"# nodegate simulated board: {board['name']} {' '.join(board.get('faults', []))}".rstrip(),
        "[system]",
        f"driver={system['driver_version']}",
        f"nvml={system['nvml_version']}",
        f"cuda={system['cuda_driver_version']}",
        f"epoch={epoch:.6f}",
    ]
    for index, gpu in enumerate(present):
        lines += _gpu_lines(board, gpu, index)
    return "\n".join(lines) + "\n"


def _dmesg(ts: float, text: str) -> str:
    return f"[{ts:12.6f}] {text}"


def render_kernel_log(board: Board) -> str:
    """Kernel ring buffer in ``dmesg`` format: driver load lines, then every Xid event."""
    system = board["system"]
    driver = system["driver_version"]
    uptime = float(system["uptime_s"])
    lines = [
        _dmesg(0.0, f"Linux version {system['kernel']} (debian-kernel@lists.debian.org)"),
        _dmesg(4.112233, "nvidia: loading out-of-tree module taints kernel."),
        _dmesg(
            4.298765,
            f"NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  {driver}  Release Build"
            "  (dvs-builder@U16-I3-B03-4-3)",
        ),
        _dmesg(5.010101, "nvidia-nvlink: Nvlink Core is being initialized, major device number "
               "506"),
    ]
    for i, gpu in enumerate(board["gpus"]):
        if gpu["missing"]:
            continue
        bus = canonical_bus_id(gpu["pci_bus_id"])
        text = f"nvidia {bus.lower()}: enabling device (0000 -> 0002)"
        lines.append(_dmesg(4.5 + 0.01 * i, text))
    for line in board["kernel_log"]:
        lines.append(line if line.startswith("[") else _dmesg(30.0, line))
    for i, event in enumerate(board["xid_events"]):
        gpu = board["gpus"][event["gpu"]]
        dom, bus_no, dev, _ = parse_bus_id(gpu["pci_bus_id"])
        code = int(event["code"])
        text = event.get("message") or XID_TEXT.get(code, "Unknown Xid event")
        ts = float(event.get("uptime_s", uptime - 600.0 + 7.25 * i))
        pid = event.get("pid", 2894 + 17 * i)
        proc = event.get("process", "python3")
        lines.append(
            _dmesg(
                ts,
                f"NVRM: Xid (PCI:{dom:04x}:{bus_no:02x}:{dev:02x}): {code}, pid={pid}, "
                f"name={proc}, {text}",
            )
        )
    return "\n".join(lines) + "\n"


def write(board: Board, state_dir: Path, *, epoch: float | None = None) -> dict[str, Path]:
    """Write ``state``, ``kernel.log``, ``boot_id``, ``load/``, ``scenario.json`` and the
    board's ``sysfs/`` tree (GPUs and rail NICs, ``nodegate.sim.sysfs``)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / "load").mkdir(exist_ok=True)
    epoch = time.time() if epoch is None else epoch
    paths = {
        "state": state_dir / "state",
        "kernel_log": state_dir / "kernel.log",
        "boot_id": state_dir / "boot_id",
        "scenario": state_dir / "scenario.json",
        "sysfs": state_dir / "sysfs",
    }
    for old in (state_dir / "load").iterdir():
        old.unlink()
    paths["state"].write_text(render_state(board, epoch))
    paths["kernel_log"].write_text(render_kernel_log(board))
    paths["boot_id"].write_text(str(uuid.uuid4()) + "\n")
    paths["scenario"].write_text(json.dumps(board, indent=1, sort_keys=True) + "\n")
    from nodegate.sim.sysfs import write_tree

    write_tree(board, paths["sysfs"])
    return paths
