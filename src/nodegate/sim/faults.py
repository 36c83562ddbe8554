"""The fault catalog: named overlays applied to a resolved scenario.

Each fault edits the board dict the way the broken hardware would look through NVML (and the
kernel log), so faults compose: ``h100-hgx+nvlink-down@gpu3.link5+xid79@gpu6`` applies two
overlays in order. Targets name GPUs by their slot on the healthy board (``gpu6`` stays the
seventh GPU of the scenario even when ``gpu-missing`` removes an earlier one).

The registry is explicit (one table, no register-on-import).

What a power cycle does to a fault (``Fault.clears_on_power_cycle``): every fault persists
across warm reboots and resets, because the lab re-applies the board's spec at each boot. A
fault marked to clear stands for a condition that lives only while the board is powered and
that NVIDIA says a power cycle cures: a GPU that fell off the bus (its PCIe link lost; the
slot's power removed and restored, the card re-initialises and the link trains again at the
next cold boot; nvidia-smi(1): "If any GPU is not healthy a complete reset should be
instigated by power cycling the node"). After a power cycle the lab boots the board without
it (``nodegate.sim.runtime.power_cycled``). Everything else persists, power cycles included:
it stands for what is stored in the card or broken in it, e.g. a row-remapping failure (no
spare rows left in the bank: the remap table lives in the GPU's memory and InfoROM, and NVIDIA
defines it as an RMA condition).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from nodegate.errors import ConfigError
from nodegate.sim.scenario import Board, Gpu, parse_bus_id
from nodegate.sim.state import ARCHITECTURES

Scope = Literal["node", "gpu", "link", "nic"]


@dataclass(frozen=True)
class Target:
    """Where a fault lands: a GPU slot, optionally a link, optionally an argument (``:CODE``)."""

    gpu: int | None = None
    link: int | None = None
    arg: str | None = None
    nic: int | None = None  # rail NIC slot (one per GPU on the simulated board)

    def label(self) -> str:
        out = "" if self.gpu is None else f"gpu{self.gpu}"
        if self.nic is not None:
            out = f"nic{self.nic}"
        if self.link is not None:
            out += f".link{self.link}"
        if self.arg is not None:
            out += f":{self.arg}"
        return out


@dataclass(frozen=True)
class Fault:
    name: str
    scope: Scope
    description: str
    apply: Callable[[Board, Target], None]
    arg: str | None = None  # name of the required ``:ARG``, when the fault takes one
    clears_on_power_cycle: bool = False  # lives only while the board is powered (module doc)

    def usage(self) -> str:
        target = {"node": "", "gpu": "@gpuN", "link": "@gpuN.linkM", "nic": "@nicN"}[self.scope]
        return f"{self.name}{target}{':' + self.arg if self.arg else ''}"


def _gpu(board: Board, target: Target) -> Gpu:
    assert target.gpu is not None
    gpu: Gpu = board["gpus"][target.gpu]
    return gpu


def _xid(board: Board, target: Target, code: int, message: str | None = None) -> None:
    event: dict[str, object] = {"gpu": target.gpu, "code": code}
    if message:
        event["message"] = message
    board["xid_events"].append(event)


# --------------------------------------------------------------------------- GPU presence


def gpu_missing(board: Board, t: Target) -> None:
    _gpu(board, t)["missing"] = True


def xid79(board: Board, t: Target) -> None:
    """The GPU fell off the bus (NVRM Xid 79): its PCIe link is lost, every call on it
    returns GPU_IS_LOST. Cleared by a power cycle (the link trains again at the cold boot)."""
    _gpu(board, t)["lost"] = True
    _xid(board, t, 79)


def fallen_off_bus(board: Board, t: Target) -> None:
    """The GPU is lost and the driver says so without an Xid line: the three-line probe
    message of open-gpu-kernel-modules ``nv.c`` (seen on 570 drivers:
    github.com/NVIDIA/NVSentinel/issues/155), continuation lines indented as ``dmesg`` prints
    one multi-line record."""
    gpu = _gpu(board, t)
    gpu["lost"] = True
    dom, bus, dev, fn = parse_bus_id(gpu["pci_bus_id"])
    at = float(board["system"]["uptime_s"]) - 300.0
    pad = " " * 15
    board["kernel_log"].append(
        f"[{at:12.6f}] NVRM: The NVIDIA GPU {dom:04x}:{bus:02x}:{dev:02x}.{fn:x}\n"
        f"{pad}NVRM: (PCI ID: 10de:{gpu['pci_device_id']:04x}) installed in this system has\n"
        f"{pad}NVRM: fallen off the bus and is not responding to commands.")


def xid_code(board: Board, t: Target) -> None:
    assert t.arg is not None
    if not t.arg.isdigit() or int(t.arg) < 1:
        raise ConfigError(f"Xid code must be a positive integer, not {t.arg!r}", key="fault")
    _xid(board, t, int(t.arg))


def nvml_hang(board: Board, t: Target) -> None:
    """A GPU whose driver calls never return (a wedged GPU: the RM stuck waiting on GSP, the
    ioctl blocked). Every per-device NVML call on it blocks; enumeration still answers, as a
    wedged card is still on the bus. No NVML return code models this: it is the absence of one.
    """
    _gpu(board, t)["hang"] = True


def nvml_missing(board: Board, t: Target) -> None:
    """The driver's user-space library is gone (package removed, driver half-uninstalled):
    ``nodegate sim run`` does not put the simulator's libnvidia-ml.so.1 on the loader path,
    so pynvml's nvmlInit fails with NVML_ERROR_LIBRARY_NOT_FOUND as on a real node."""
    board["nvml_missing"] = True


def _recovery(board: Board, t: Target, action: str, line: str) -> None:
    """The driver asks for a recovery: NVML's recovery action field answers it (supported from
    then on, whatever the architecture) and the kernel logs Xid 154 naming the new action."""
    _gpu(board, t)["recovery_action"] = action
    _xid(board, t, 154, line)


def recovery_reset(board: Board, t: Target) -> None:
    _recovery(board, t, "gpu_reset",
              "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)")


def recovery_reboot(board: Board, t: Target) -> None:
    _recovery(board, t, "node_reboot",
              "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)")


# --------------------------------------------------------------------------- NVLink


def nvlink_down(board: Board, t: Target) -> None:
    inactive = _gpu(board, t)["nvlink"]["inactive"]
    if t.link not in inactive:
        inactive.append(t.link)


def nvlink_slow(board: Board, t: Target) -> None:
    """One link up at the right version but trained at half its speed: NVML's per-link speed
    (``NVML_FI_DEV_NVLINK_GET_SPEED`` for that link) reads half the board's."""
    nv = _gpu(board, t)["nvlink"]
    nv["slow"] = [s for s in nv.get("slow", []) if s["link"] != t.link] + [
        {"link": t.link, "speed_mbps": int(nv["speed_mbps"]) // 2}]


def nvlink_errors(board: Board, t: Target) -> None:
    _gpu(board, t)["nvlink"]["errors"].append(
        {
            "link": t.link,
            "replay": 180,
            "recovery": 6,
            "crc_flit": 1450,
            "crc_data": 96,
            "replay_rate_per_s": 3.0,
            "recovery_rate_per_s": 1.0,
            "crc_flit_rate_per_s": 25.0,
            "crc_data_rate_per_s": 2.0,
        }
    )


def _with_fabric(board: Board, fault: str) -> list[Gpu]:
    """The GPUs that report fabric info; a board without any cannot take a fabric fault."""
    with_fabric = [g for g in board["gpus"] if g["fabric"] is not None]
    if not with_fabric:
        raise ConfigError(
            f"scenario {board['name']} has no GPU fabric (only NVSwitch Hopper and later "
            "boards do)",
            key=f"fault {fault}",
        )
    return with_fabric


def fabric_not_running(board: Board, t: Target) -> None:
    for gpu in _with_fabric(board, "fabric-not-running"):
        gpu["fabric"].update(state="not_started", status="not_ready")


def nvlsm_missing(board: Board, t: Target) -> None:
    """Fabric Manager up but NVLSM (or, from FM 570, ib_umad) missing on an NVLink 5 board:
    FM never completes the GPUs' registration, so each stays In Progress (nvml.h
    NVML_GPU_FABRIC_STATE_IN_PROGRESS) and CUDA answers cudaErrorSystemNotReady while NVML,
    the links and the rest look up. Applies to any board with fabric info; only a profile
    that declares ``driver.nvlsm`` makes the judge name NVLSM."""
    for gpu in _with_fabric(board, "nvlsm-missing"):
        gpu["fabric"].update(state="in_progress", status="not_ready")


def fabric_degraded(board: Board, t: Target) -> None:
    gpu = _gpu(board, t)
    if gpu["fabric"] is None:
        raise ConfigError(f"gpu{t.gpu} has no GPU fabric", key="fault fabric-degraded")
    gpu["fabric"]["degraded_bandwidth"] = True


# --------------------------------------------------------------------------- memory


def ecc_dbe(board: Board, t: Target) -> None:
    ecc = _gpu(board, t)["ecc"]
    ecc["volatile_dbe"] += 2
    ecc["aggregate_dbe"] += 2
    _xid(board, t, 48)


def ecc_sbe_storm(board: Board, t: Target) -> None:
    ecc = _gpu(board, t)["ecc"]
    ecc["volatile_sbe"] += 12000
    ecc["aggregate_sbe"] += 12000
    ecc["volatile_sbe_rate_per_s"] = 150.0
    _xid(board, t, 92)


def ecc_off(board: Board, t: Target) -> None:
    _gpu(board, t)["ecc"].update(enabled=False, pending=False)


def remap_pending(board: Board, t: Target) -> None:
    rows = _gpu(board, t)["remapped_rows"]
    rows["uncorrectable"] += 1
    rows["pending"] = True
    _xid(board, t, 63)


def remap_failure(board: Board, t: Target) -> None:
    """Row remapping failed: the bank has no spare row left (Xid 64). Persists across resets,
    reboots and power cycles: the remaps are kept by the card, so no reset cures it (RMA)."""
    rows = _gpu(board, t)["remapped_rows"]
    rows["uncorrectable"] += 1
    rows["failure"] = True
    _xid(board, t, 64)


def retired_pages(board: Board, t: Target) -> None:
    gpu = _gpu(board, t)
    if ARCHITECTURES[gpu["architecture"]] >= ARCHITECTURES["ampere"]:
        # the driver answers NOT_SUPPORTED there (nvml_sim.c, PAGE_RETIREMENT_SUPPORTED): a
        # fault that NVML could never show would test nothing
        raise ConfigError(
            f"gpu{t.gpu} is {gpu['architecture']}: page retirement does not exist on Ampere and "
            "later (row remapping replaced it); use remap-pending or remap-failure, or a "
            "pre-Ampere board", key="fault retired-pages")
    pages = gpu["retired_pages"]
    pages["sbe"] = [*pages["sbe"], 0x1A3F40, 0x1A3F41]
    pages["dbe"] = [*pages["dbe"], 0x7C0022]
    pages["pending"] = True


# --------------------------------------------------------------------------- PCIe


def pcie_downtrain(board: Board, t: Target) -> None:
    """A link that cannot train what the GPU can (a bad riser or slot): the link's max
    generation one below the GPU's, so the GPU never runs faster, idle or busy, and half
    the lanes. The GPU's own max and the max width stay: they say what it should be."""
    pcie = _gpu(board, t)["pcie"]
    pcie["max_gen"] = max(1, pcie["gpu_max_gen"] - 1)
    pcie["gen"] = min(pcie["gen"], pcie["max_gen"])
    pcie["width"] = max(1, pcie["max_width"] // 2)


def pcie_slow_under_load(board: Board, t: Target) -> None:
    """A link whose max reads right but that only trains two generations below it when the
    GPU is busy (marginal signal integrity): invisible at idle, seen only under load."""
    pcie = _gpu(board, t)["pcie"]
    pcie["gen"] = max(1, pcie["max_gen"] - 2)


def pcie_replays(board: Board, t: Target) -> None:
    pcie = _gpu(board, t)["pcie"]
    pcie["replay_counter"] += 1532
    pcie["replay_rate_per_s"] = 12.0


# --------------------------------------------------------------------------- thermal, power, clocks


def _reasons(gpu: Gpu, *names: str) -> None:
    gpu["clocks_event_reasons"] = sorted({*gpu["clocks_event_reasons"], *names})


def thermal_slowdown(board: Board, t: Target) -> None:
    gpu = _gpu(board, t)
    temp = gpu["temperature"]
    temp["idle_c"] = temp["slowdown_c"] + 2
    temp["load_c"] = max(temp["load_c"], temp["slowdown_c"] + 4)
    _reasons(gpu, "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_slowdown")


def cooling_failure(board: Board, t: Target) -> None:
    # Idle looks healthy; only under load does the temperature overshoot the slowdown point.
    temp = _gpu(board, t)["temperature"]
    temp["load_c"] = temp["slowdown_c"] + 8
    temp["memory_load_c"] = temp["memory_max_c"] + 2


def hot_idle(board: Board, t: Target) -> None:
    temp = _gpu(board, t)["temperature"]
    temp["idle_c"] = 62
    temp["memory_idle_c"] = 58


def power_brake(board: Board, t: Target) -> None:
    gpu = _gpu(board, t)
    _reasons(gpu, "hw_power_brake_slowdown", "hw_slowdown")
    power = gpu["power"]
    power["cap_w"] = power["idle_w"] + 0.25 * (power["load_w"] - power["idle_w"])


def clocks_stuck_low(board: Board, t: Target) -> None:
    clocks = _gpu(board, t)["clocks"]
    clocks["cap_mhz"] = max(clocks["graphics_idle_mhz"], clocks["graphics_max_mhz"] * 3 // 10)


def power_limit_low(board: Board, t: Target) -> None:
    power = _gpu(board, t)["power"]
    power["limit_w"] = round(power["default_limit_w"] * 0.6)


# --------------------------------------------------------------------------- modes, software


def persistence_off(board: Board, t: Target) -> None:
    for gpu in board["gpus"]:
        gpu["persistence"] = False


def mig_on(board: Board, t: Target) -> None:
    gpu = _gpu(board, t)
    gpu["mig"] = True
    gpu["mig_pending"] = True


def exclusive_process(board: Board, t: Target) -> None:
    _gpu(board, t)["compute_mode"] = "exclusive_process"


def vbios_mismatch(board: Board, t: Target) -> None:
    gpu = _gpu(board, t)
    parts = gpu["vbios_version"].split(".")
    # Keep the family prefix, step the build field back: an older flash of the same part.
    if len(parts) >= 3:
        parts[2] = "30" if parts[2] != "30" else "31"
        gpu["vbios_version"] = ".".join(parts)
    else:
        gpu["vbios_version"] = gpu["vbios_version"] + ".old"


DRIVER_MISMATCH = {"driver_version": "550.127.05", "cuda_driver_version": 12040}


def driver_mismatch(board: Board, t: Target) -> None:
    system = board["system"]
    if system["driver_version"] == DRIVER_MISMATCH["driver_version"]:
        system.update(driver_version="535.230.02", cuda_driver_version=12020)
    else:
        system.update(DRIVER_MISMATCH)
    system["nvml_version"] = f"{system['cuda_driver_version'] // 1000}.{system['driver_version']}"


def foreign_process(board: Board, t: Target) -> None:
    gpu = _gpu(board, t)
    gpu["processes"] = [*gpu["processes"], {"pid": 48213, "name": "python3", "used_mib": 10240}]


def inforom_corrupt(board: Board, t: Target) -> None:
    # A corrupted InfoROM fails nvmlDeviceValidateInforom's checksum and loses its objects;
    # nvidia-smi then prints N/A for them.
    _gpu(board, t)["inforom"].update(oem=None, ecc=None, power=None, corrupted=True)


# --------------------------------------------------------------------------- RDMA rails (sysfs)


def _nic(board: Board, t: Target) -> dict[str, object]:
    assert t.nic is not None
    nic: dict[str, object] = board.setdefault("nic_faults", {}).setdefault(str(t.nic), {})
    return nic


def rail_down(board: Board, t: Target) -> None:
    """Cable pulled or switch port down: DOWN/Polling, the netdev down."""
    _nic(board, t)["down"] = True


def rail_rate(board: Board, t: Target) -> None:
    """The port trained below its speed (an HDR cable or switch port on an NDR card)."""
    from nodegate.sim.sysfs import IB_4X

    if t.arg is None or not t.arg.isdigit() or int(t.arg) not in IB_4X:
        raise ConfigError(f"rate must be one of {', '.join(map(str, IB_4X))} Gb/s (4X IB), "
                          f"not {t.arg!r}", key="fault rail-rate")
    _nic(board, t)["rate"] = int(t.arg)


def nic_numa(board: Board, t: Target) -> None:
    """The HCA reports the other socket's NUMA node (wrong ACPI proximity, or a NIC moved to
    a slot of the other CPU)."""
    assert t.nic is not None
    node = int(board["gpus"][t.nic].get("numa_node", 0))
    _nic(board, t)["numa_node"] = 1 if node == 0 else 0


def nic_switch(board: Board, t: Target) -> None:
    """The HCA sits in a slot on its own root port, not behind its GPU's PCIe switch."""
    _nic(board, t)["wrong_switch"] = True


def link_flap(board: Board, t: Target) -> None:
    """The link went down and came back: link_downed counts the flaps, the port is ACTIVE."""
    counters = _nic(board, t).setdefault("counters", {})
    assert isinstance(counters, dict)
    counters["link_downed"] = counters.get("link_downed", 0) + 4


def rail_missing(board: Board, t: Target) -> None:
    """The HCA is gone from the bus (dead card, or not enumerated)."""
    _nic(board, t)["removed"] = True


CATALOG: dict[str, Fault] = {
    f.name: f
    for f in (
        Fault("gpu-missing", "gpu", "GPU absent from the bus: NVML counts one fewer", gpu_missing),
        Fault("xid79", "gpu", "GPU fell off the bus: calls return GPU_IS_LOST, Xid 79", xid79,
              clears_on_power_cycle=True),
        Fault("fallen-off-bus", "gpu", "GPU lost: the driver's fallen-off-the-bus message, "
              "no Xid line", fallen_off_bus, clears_on_power_cycle=True),
        Fault("recovery-reset", "gpu", "NVML recovery action GPU_RESET, Xid 154",
              recovery_reset),
        Fault("recovery-reboot", "gpu", "NVML recovery action NODE_REBOOT, Xid 154",
              recovery_reboot),
        Fault("xid", "gpu", "an arbitrary Xid line for this GPU in the kernel log", xid_code,
              arg="CODE"),
        Fault("nvml-hang", "gpu", "every per-device NVML call on this GPU blocks for ever",
              nvml_hang),
        Fault("nvml-missing", "node", "no libnvidia-ml.so.1 on the loader path: nvmlInit fails",
              nvml_missing),
        Fault("nvlink-down", "link", "one NVLink reads inactive", nvlink_down),
        Fault("nvlink-slow", "link", "one NVLink active at half its speed", nvlink_slow),
        Fault("nvlink-errors", "link", "CRC, replay and recovery counters rising on one link",
              nvlink_errors),
        Fault("fabric-not-running", "node", "fabric manager down: fabric state not completed",
              fabric_not_running),
        Fault("nvlsm-missing", "node", "NVLink 5 fabric without NVLSM / ib_umad: every GPU's "
              "fabric stuck In Progress", nvlsm_missing),
        Fault("fabric-degraded", "gpu", "fabric completed but health reports degraded bandwidth",
              fabric_degraded),
        Fault("ecc-dbe", "gpu", "volatile double-bit ECC errors in HBM, Xid 48", ecc_dbe),
        Fault("ecc-sbe-storm", "gpu", "single-bit ECC errors piling up fast, Xid 92",
              ecc_sbe_storm),
        Fault("ecc-off", "gpu", "ECC disabled (current and pending)", ecc_off),
        Fault("remap-pending", "gpu", "row remap pending a GPU reset, Xid 63", remap_pending),
        Fault("remap-failure", "gpu", "row remapping failed (no spare rows), Xid 64",
              remap_failure),
        Fault("retired-pages", "gpu", "pages retired for SBE and DBE, retirement pending",
              retired_pages),
        Fault("pcie-downtrain", "gpu", "PCIe link max gen below the GPU's, half the lanes",
              pcie_downtrain),
        Fault("pcie-slow-under-load", "gpu", "PCIe max gen right, but two gens below it "
              "under load", pcie_slow_under_load),
        Fault("pcie-replays", "gpu", "PCIe replay counter high and rising", pcie_replays),
        Fault("thermal-slowdown", "gpu", "hot at idle, thermal slowdown reasons asserted",
              thermal_slowdown),
        Fault("cooling-failure", "gpu", "under load only: overshoots slowdown, HW thermal event",
              cooling_failure),
        Fault("hot-idle", "gpu", "idle temperature well above its peers", hot_idle),
        Fault("power-brake", "gpu", "HW power brake asserted: clocks and power held low",
              power_brake),
        Fault("clocks-stuck-low", "gpu", "SM clock stays low under load with no reason",
              clocks_stuck_low),
        Fault("power-limit-low", "gpu", "enforced power limit 60% of default", power_limit_low),
        Fault("persistence-off", "node", "persistence mode disabled on every GPU",
              persistence_off),
        Fault("mig-on", "gpu", "MIG mode enabled (current and pending)", mig_on),
        Fault("exclusive-process", "gpu", "compute mode EXCLUSIVE_PROCESS", exclusive_process),
        Fault("vbios-mismatch", "gpu", "VBIOS differs from the rest of the board", vbios_mismatch),
        Fault("driver-mismatch", "node", "driver version other than the pinned one",
              driver_mismatch),
        Fault("foreign-process", "gpu", "a compute process holding 10 GiB on the GPU",
              foreign_process),
        Fault("inforom-corrupt", "gpu", "InfoROM objects unreadable (N/A)", inforom_corrupt),
        Fault("rail-down", "nic", "rail port DOWN/Polling, its netdev down", rail_down),
        Fault("rail-rate", "nic", "rail port ACTIVE at a lower 4X rate", rail_rate, arg="GBPS"),
        Fault("nic-numa", "nic", "rail HCA on the other socket's NUMA node", nic_numa),
        Fault("nic-switch", "nic", "rail HCA on its own root port, not its GPU's switch",
              nic_switch),
        Fault("link-flap", "nic", "rail link went down and up (link_downed +4)", link_flap),
        Fault("rail-missing", "nic", "rail HCA absent from the bus", rail_missing),
    )
}

_TARGET_RE = re.compile(r"^gpu(\d+)(?:\.link(\d+))?(?::(.+))?$")
_NIC_RE = re.compile(r"^nic(\d+)(?::(.+))?$")


def _nic_target(fault: Fault, where: str, token: str) -> Target:
    """``nic3`` or ``nic5:200`` -> the rail NIC slot (and argument)."""
    n = _NIC_RE.match(where)
    if not n:
        raise ConfigError(f"bad target {where!r}; expected {fault.usage()}", key=f"fault {token}")
    if (fault.arg is None) != (n.group(2) is None):
        raise ConfigError(f"expected {fault.usage()}", key=f"fault {token}")
    return Target(nic=int(n.group(1)), arg=n.group(2))


def parse(token: str) -> tuple[Fault, Target]:
    """``nvlink-down@gpu3.link5`` -> (fault, target); ConfigError naming the token otherwise."""
    name, _, where = token.partition("@")
    fault = CATALOG.get(name)
    if fault is None:
        raise ConfigError(
            f"unknown fault {name!r} (see `nodegate sim scenarios`)", key=f"fault {token}"
        )
    if fault.scope == "node":
        if where:
            raise ConfigError(f"{name} applies to the node; write it without @", key=token)
        return fault, Target()
    if fault.scope == "nic":
        return fault, _nic_target(fault, where, token)
    m = _TARGET_RE.match(where)
    if not m:
        raise ConfigError(f"bad target {where!r}; expected {fault.usage()}", key=f"fault {token}")
    gpu, link, arg = m.groups()
    if fault.scope == "link" and link is None:
        raise ConfigError(f"{name} needs a link: {fault.usage()}", key=f"fault {token}")
    if fault.scope == "gpu" and link is not None:
        raise ConfigError(
            f"{name} targets a GPU, not a link: {fault.usage()}", key=f"fault {token}"
        )
    if (fault.arg is None) != (arg is None):
        raise ConfigError(f"expected {fault.usage()}", key=f"fault {token}")
    return fault, Target(int(gpu), None if link is None else int(link), arg)


def apply(board: Board, token: str) -> None:
    """Parse one fault token and apply it to ``board``, checking the target exists."""
    fault, target = parse(token)
    if target.nic is not None and target.nic >= len(board["gpus"]):
        raise ConfigError(f"scenario {board['name']} has {len(board['gpus'])} rail NICs (nic0.."
                          f"nic{len(board['gpus']) - 1}), one per GPU", key=f"fault {token}")
    if target.gpu is not None:
        if target.gpu >= len(board["gpus"]):
            raise ConfigError(
                f"scenario {board['name']} has {len(board['gpus'])} GPUs (gpu0..gpu"
                f"{len(board['gpus']) - 1})",
                key=f"fault {token}",
            )
        if target.link is not None:
            links = board["gpus"][target.gpu]["nvlink"]["links"]
            if target.link >= links:
                detail = f"has {links} NVLinks" if links else "has no NVLink"
                raise ConfigError(f"gpu{target.gpu} {detail}", key=f"fault {token}")
    fault.apply(board, target)
    board.setdefault("faults", []).append(token)
