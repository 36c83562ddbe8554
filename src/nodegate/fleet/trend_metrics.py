"""Which metrics have trends: the selection the reader keeps for every report of a history
and ``nodegate.fleet.trends`` plots and judges. A metric key is ``check[entity kind]``."""

from __future__ import annotations

#: Values judged as they are: GEMM TFLOPS, bandwidths, temperatures (margin) under load.
LEVEL_CHECKS = frozenset({"gemm_tflops", "hbm_bandwidth", "h2d_bandwidth", "d2h_bandwidth",
                          "p2p_unidir", "p2p_bidir", "allreduce_busbw", "burnin_tflops",
                          "thermal_peak", "mem_temp_peak"})
#: Counters judged by their growth per day: corrected ECC errors, link errors.
COUNTER_CHECKS = frozenset({"ecc_sbe_aggregate", "ecc_sbe_volatile", "nvlink_crc_errors",
                            "pcie_replays"})


def metric_kind(key: str) -> str | None:
    """``level``, ``counter`` or None (no trend) for a metric key."""
    check = key.split("[", 1)[0]
    if check in LEVEL_CHECKS:
        return "level"
    if check in COUNTER_CHECKS:
        return "counter"
    return None


def has_trend(key: str) -> bool:
    return metric_kind(key) is not None
