"""The explicit catalogue of checks: name -> group, level and one line of meaning.

Judges emit results under these names; ``validation/`` has one thin test per name (a unit
test enforces it), and ``--checks`` selects by group.
"""

from __future__ import annotations

from typing import NamedTuple


class CheckInfo(NamedTuple):
    group: str
    level: str
    meaning: str


CHECKS: dict[str, CheckInfo] = {
    # gpu (NVML), quick
    "gpu_count": CheckInfo("gpu", "quick", "as many GPUs on the bus as the profile says"),
    "gpu_reachable": CheckInfo("gpu", "quick", "NVML can talk to the GPU (not lost)"),
    "gpu_model": CheckInfo("gpu", "quick", "GPU name as the profile says"),
    "gpu_pci_device_id": CheckInfo("gpu", "quick", "PCI device id as the profile says"),
    "gpu_memory": CheckInfo("gpu", "quick", "total memory as the profile's gpu.memory_mib"),
    "driver_version": CheckInfo("gpu", "quick", "driver version equals the pin"),
    "vbios_uniform": CheckInfo("gpu", "quick",
                               "VBIOS as pinned, else identical across GPUs of one model"),
    "inforom_uniform": CheckInfo("gpu", "quick",
                                 "InfoROM valid; as pinned, else identical across one model"),
    "persistence_mode": CheckInfo("gpu", "quick", "persistence mode as the profile says"),
    "mig_mode": CheckInfo("gpu", "quick", "MIG mode as the profile says"),
    "compute_mode": CheckInfo("gpu", "quick", "compute mode as the profile says"),
    "ecc_mode": CheckInfo("gpu", "quick", "ECC enabled as the profile says"),
    "ecc_dbe_volatile": CheckInfo("gpu", "quick", "double-bit ECC errors since reset"),
    "ecc_dbe_aggregate": CheckInfo("gpu", "quick", "lifetime double-bit ECC errors"),
    "ecc_sbe_volatile": CheckInfo("gpu", "quick", "single-bit ECC errors since reset"),
    "ecc_sbe_aggregate": CheckInfo("gpu", "quick", "lifetime single-bit ECC errors"),
    "remap_pending": CheckInfo("gpu", "quick", "row remap pending a reset"),
    "remap_failure": CheckInfo("gpu", "quick", "row remap failed"),
    "remap_uncorrectable": CheckInfo("gpu", "quick", "rows remapped for uncorrectable errors"),
    "retired_pages": CheckInfo("gpu", "quick", "retired memory pages"),
    "pcie_link": CheckInfo("gpu", "quick", "PCIe link max gen and current width as the profile"),
    "pcie_replays": CheckInfo("gpu", "quick", "PCIe replay counter"),
    "clock_events": CheckInfo("gpu", "quick", "no HW slowdown, HW thermal or power brake"),
    "power_limit": CheckInfo("gpu", "quick", "enforced power limit as the profile says"),
    "idle_temperature": CheckInfo("gpu", "quick", "idle GPU temperature"),
    "foreign_processes": CheckInfo("gpu", "quick", "processes holding the GPU (reported)"),
    "fabric_state": CheckInfo("gpu", "quick", "NVSwitch fabric registration completed"),
    "nvlink_state": CheckInfo("gpu", "quick", "every NVLink active at the expected version"),
    "nvlink_crc_errors": CheckInfo("gpu", "quick", "NVLink CRC error counters"),
    "nvlink_replay_errors": CheckInfo("gpu", "quick", "NVLink replay error counters"),
    "nvlink_recovery_errors": CheckInfo("gpu", "quick", "NVLink recovery error counters"),
    # log (kernel log), quick
    "xid_events": CheckInfo("log", "quick", "no hardware-critical Xid this boot"),
    # host (operating system), quick
    "nouveau_absent": CheckInfo("host", "quick", "nouveau not loaded"),
    "nvidia_module": CheckInfo("host", "quick", "nvidia module of the pinned version loaded"),
    "persistenced_service": CheckInfo("host", "quick", "nvidia-persistenced active"),
    "fabricmanager_service": CheckInfo("host", "quick",
                                       "nvidia-fabricmanager active at the driver's version"),
    "gpudirect_rdma": CheckInfo("host", "quick",
                                "GPUDirect RDMA as declared: peermem loaded, or DMA-BUF ready"),
    "iommu_mode": CheckInfo("host", "quick", "IOMMU mode on the kernel command line"),
    "pcie_acs": CheckInfo("host", "quick", "ACS disabled on bridges above the GPUs"),
    "nccl_conf": CheckInfo("host", "quick", "/etc/nccl.conf present with expected keys"),
    "nvme_array": CheckInfo("host", "quick", "NVMe md array active and complete"),
    "nvme_mount": CheckInfo("host", "quick", "NVMe array mounted with expected options"),
    # network (RDMA rails from sysfs), quick
    "ib_rail_count": CheckInfo("network", "quick", "as many rail HCAs as the profile says"),
    "ib_port_state": CheckInfo("network", "quick", "rail port ACTIVE and LinkUp"),
    "ib_port_rate": CheckInfo("network", "quick", "rail port rate as the profile says"),
    "ib_link_layer": CheckInfo("network", "quick", "InfiniBand or Ethernet as the profile says"),
    "ib_hca_pcie_link": CheckInfo("network", "quick", "HCA PCIe link at its max speed and width"),
    "ib_firmware": CheckInfo("network", "quick",
                             "HCA firmware as pinned, else identical across rails"),
    "ib_netdev": CheckInfo("network", "quick", "RoCE interface up at the profile's MTU"),
    "ib_topology": CheckInfo("network", "quick",
                             "each GPU's rail NIC(s) behind its PCIe switch, as the profile"),
    "ib_rail_numa": CheckInfo("network", "quick", "rail NIC on its GPU's NUMA node"),
    "ib_link_flaps": CheckInfo("network", "quick", "link_downed growth (a flap)"),
    "ib_link_recoveries": CheckInfo("network", "quick", "link_error_recovery growth"),
    "ib_symbol_errors": CheckInfo("network", "quick", "symbol_error growth"),
    "ib_rcv_errors": CheckInfo("network", "quick", "port_rcv_errors growth"),
    "ib_xmit_discards": CheckInfo("network", "quick", "port_xmit_discards growth"),
    "ib_link_integrity_errors": CheckInfo("network", "quick",
                                          "local_link_integrity_errors growth"),
    "ib_buffer_overruns": CheckInfo("network", "quick", "excessive_buffer_overrun_errors growth"),
    # load (torch: CUDA/NCCL on GPUs, CPU/gloo in tests and the lab)
    "gemm_completed": CheckInfo("load", "standard",
                        'every rank finished the GEMM phase'),
    "gemm_tflops": CheckInfo("load", "standard",
                        'dense GEMM TFLOPS per GPU (bf16; gemm_tflops_fp16/_tf32 for others)'),
    "gemm_consistency": CheckInfo("load", "standard",
                        'GEMM output bit-identical across GPUs and iterations (SDC)'),
    "gemm_tflops_outlier": CheckInfo("load", "standard",
                        "GEMM TFLOPS against the node's own median"),
    "memory_completed": CheckInfo("load", "standard",
                        'every rank finished the memory phase'),
    "hbm_bandwidth": CheckInfo("load", "standard",
                        'device-to-device copy bandwidth (read + write)'),
    "hbm_bandwidth_outlier": CheckInfo("load", "standard",
                        "HBM bandwidth against the node's own median"),
    "h2d_bandwidth": CheckInfo("load", "standard",
                        "pinned host-to-device copy from the GPU's own NUMA node"),
    "d2h_bandwidth": CheckInfo("load", "standard",
                        "pinned device-to-host copy to the GPU's own NUMA node"),
    "h2d_bandwidth_outlier": CheckInfo("load", "standard",
                        "H2D bandwidth against the node's own median"),
    "d2h_bandwidth_outlier": CheckInfo("load", "standard",
                        "D2H bandwidth against the node's own median"),
    "p2p_completed": CheckInfo("load", "standard",
                        'the P2P phase finished'),
    "p2p_unidir": CheckInfo("load", "standard",
                        'GPU-to-GPU copy, one direction, per ordered pair'),
    "p2p_bidir": CheckInfo("load", "standard",
                        'GPU-to-GPU copy, both directions at once, per ordered pair'),
    "p2p_unidir_outlier": CheckInfo("load", "standard",
                        "P2P one-direction figure against the node's median pair"),
    "p2p_bidir_outlier": CheckInfo("load", "standard",
                        "P2P both-direction figure against the node's median pair"),
    "allreduce_completed": CheckInfo("load", "standard",
                        'every rank finished the all-reduce sweep'),
    "allreduce_busbw": CheckInfo("load", "standard",
                        "all-reduce bus bandwidth at the profile's size (nccl-tests busbw)"),
    "collectives_completed": CheckInfo("load", "standard",
                        "every rank finished the all-gather/reduce-scatter/all-to-all/"
                        "broadcast sweeps"),
    "allgather_busbw": CheckInfo("load", "standard",
                        "all-gather bus bandwidth at the profile's size (nccl-tests busbw)"),
    "reducescatter_busbw": CheckInfo("load", "standard",
                        "reduce-scatter bus bandwidth (nccl-tests busbw)"),
    "alltoall_busbw": CheckInfo("load", "standard",
                        "all-to-all bus bandwidth (nccl-tests busbw)"),
    "broadcast_busbw": CheckInfo("load", "standard",
                        "broadcast bus bandwidth (nccl-tests busbw)"),
    "burnin_completed": CheckInfo("load", "acceptance",
                        'every rank finished the burn-in training'),
    "burnin_loss": CheckInfo("load", "acceptance",
                        'burn-in loss finite and falling'),
    "burnin_straggler": CheckInfo("load", "acceptance",
                        'rank forward time against the median rank'),
    "burnin_tokens_per_s": CheckInfo("load", "acceptance",
                        'burn-in training throughput of the node'),
    "burnin_tflops": CheckInfo("load", "acceptance",
                        'burn-in achieved TFLOPS per GPU'),
    "burnin_param_consistency": CheckInfo("load", "acceptance",
                        'parameters bit-identical across ranks after training'),
    "soak_completed": CheckInfo("load", "acceptance",
                        'every rank finished the thermal/power soak'),
    "thermal_peak": CheckInfo("load", "standard",
                        'slowdown threshold minus peak temperature under load'),
    "mem_temp_peak": CheckInfo("load", "standard",
                        'peak HBM temperature under load'),
    "thermal_events": CheckInfo("load", "standard",
                        'no HW slowdown, thermal or power-brake event under load'),
    "power_under_load": CheckInfo("load", "standard",
                        'power under GEMM as a fraction of the enforced limit'),
    "clock_floor": CheckInfo("load", "standard",
                        'SM clock held under load (median of samples)'),
    "pcie_gen_under_load": CheckInfo("load", "standard",
                        "PCIe link trains to the profile's gen under load (max of samples)"),
    # power (BMC / PDU): PSUs and inlet at any level, draw under load at acceptance
    "psu_count": CheckInfo("power", "quick", "healthy PSUs as the profile says"),
    "psu_redundancy": CheckInfo("power", "quick", "node survives losing a PSU"),
    "inlet_temp": CheckInfo("power", "quick", "chassis inlet temperature"),
    "bmc_power_sources": CheckInfo("power", "quick",
                                   "one BMC's node power figures agree with each other"),
    "psu_budget": CheckInfo("power", "acceptance", "draw under load within non-redundant PSUs"),
    "circuit_load": CheckInfo("power", "acceptance", "draw under load within 80% of circuits"),
    "bmc_gpu_power": CheckInfo("power", "acceptance", "BMC node power >= NVML GPU sum"),
}




def level_of(check: str) -> str:
    """The lowest level that judges ``check`` (both front ends read it from here)."""
    info = CHECKS.get(check)
    return info.level if info is not None else "quick"


def group_of(check: str) -> str:
    info = CHECKS.get(check)
    if info is not None:
        return info.group
    prefix = check.split("_", 1)[0]
    if prefix in ("psu", "inlet", "circuit", "bmc", "pdu", "power"):
        return "power"
    return "load"
