"""Judging ``ib_write_bw`` per rail port (``probes.perftest``): the average Gb/s at the
largest size against the profile's floor. A run that failed, timed out or printed something
that is not perftest's table is ERROR for that port, naming the tool and line; never a pass."""

from __future__ import annotations

from typing import Any

from nodegate.judge.common import against, make
from nodegate.probes.perftest import BwOutcome
from nodegate.profiles.loader import Threshold
from nodegate.profiles.threshold_keys import Key
from nodegate.results import CheckResult, Severity, Verdict

#: check -> its floor's threshold key
FLOORS: dict[str, Key] = {"ib_write_bw": Key.IB_WRITE_BW_GBPS_MIN,
                          "ib_write_bw_gdr": Key.IB_WRITE_BW_GDR_GBPS_MIN,
                          "multinode_ib_write_bw": Key.MULTINODE_IB_WRITE_BW_GBPS_MIN}
CHECKS = {"ib_write_bw": "ib_write_bw per rail port, loopback on the node (host memory)",
          "ib_write_bw_gdr": "ib_write_bw per rail port, loopback with --use_cuda (GPUDirect)",
          "multinode_ib_write_bw": "ib_write_bw per rail port with a known-good node"}


def rail_bw(check: str, outcomes: dict[str, BwOutcome], th: dict[str, Threshold],
            evidence: dict[str, dict[str, Any]] | None = None) -> list[CheckResult]:
    """One result per entity (``mlx5_3.port1``, or ``mlx5_3.port1@peer`` for a pair)."""
    out = []
    for entity, got in outcomes.items():
        extra = dict((evidence or {}).get(entity) or {})
        if not got.ok or got.result is None:
            out.append(make(check, entity, Verdict.ERROR, severity=Severity.CRITICAL,
                            threshold=None, reason=got.error or "no result",
                            output=got.output[-1500:], duration_s=round(got.duration_s, 3),
                            **extra))
            continue
        top = got.result.top
        out.append(against(
            check, entity, top.average_gbps, th.get(FLOORS[check]),
            reason_missing=f"no {FLOORS[check]} in the profile",
            bytes=top.bytes, peak_gbps=top.peak_gbps, iterations=top.iterations,
            device=got.result.device, link_type=got.result.link_type, qps=got.result.qps,
            cuda_device=got.result.cuda_device, duration_s=round(got.duration_s, 3),
            **extra))
    return out
