"""Realistic synthetic node reports (8-GPU HGX H100) for tests, the benchmark and demos.

Built through ``nodegate.report.build`` so they are exactly what a node writes: the quick
battery's NVML results (per GPU, per NVLink), and at ``standard``/``acceptance`` the load
results (P2P pairs, HBM, GEMM, all-reduce), the telemetry series under load and the P2P matrix.
Deterministic per seed, so a test can name the outlier it planted.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import random
from collections.abc import Sequence

from nodegate.report.model import NodeReport, build
from nodegate.results import CheckResult, Severity, Verdict
from nodegate.vocabulary import Level

GPUS = tuple(f"gpu{index}" for index in range(8))
LINKS = 18

#: Fault names this generator understands: ``<fault>@<entity>``.
FAULTS = ("nvlink-down", "slow-gpu", "hot-gpu", "xid")


def _result(check: str, entity: str, measured: object, threshold: object, unit: str,
            *, ok: bool = True, severity: Severity = Severity.INFO,
            message: str | None = None) -> CheckResult:
    evidence = {"message": message} if message else {}
    # below a performance floor is a WARN (the gate lets it join); anything else FAILs
    verdict = Verdict.PASS if ok else (
        Verdict.WARN if severity is Severity.WARNING else Verdict.FAIL)
    if not ok and severity is Severity.INFO:
        severity = Severity.CRITICAL
    return CheckResult(check, entity, measured, threshold, unit, verdict, severity, evidence)


def _parse_faults(faults: Sequence[str]) -> dict[str, set[str]]:
    parsed: dict[str, set[str]] = {}
    for fault in faults:
        name, _, entity = fault.partition("@")
        if name not in FAULTS:
            raise ValueError(f"unknown synthetic fault {name!r} (known: {', '.join(FAULTS)})")
        parsed.setdefault(name, set()).add(entity or "gpu0")
    return parsed


#: PCI bus ids of an XE9680's eight GPUs, in NVML's order.
BUS_IDS = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")


def synthetic_gpus(node: str) -> dict[str, dict[str, str]]:
    """Stable, real-shaped identities per node (hashed from the name, not drawn from the
    report's random stream, so the planted values do not move)."""
    out = {}
    for index, gpu in enumerate(GPUS):
        digest = hashlib.sha256(f"{node}/{gpu}".encode()).hexdigest()
        out[gpu] = {"serial": f"16549{int(digest[:10], 16) % 10**8:08d}",
                    "uuid": f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-"
                            f"{digest[20:32]}",
                    "pci_bus_id": f"00000000:{BUS_IDS[index]}:00.0",
                    "vbios": "96.00.A5.00.01", "board_part_number": "692-2G520-0200-000"}
    return out


def synthetic_report(
    node: str,
    *,
    level: Level | str = Level.STANDARD,
    started_at: dt.datetime | None = None,
    faults: Sequence[str] = (),
    seed: int | str | None = None,
    samples: int = 60,
    labels: dict[str, str] | None = None,
    gpus: dict[str, dict[str, str]] | None = None,
    gemm_scale: float = 1.0,
    profile: str = "xe9680-h100",
) -> NodeReport:
    """One node's report; ``faults`` like ``nvlink-down@gpu3.link5``, ``slow-gpu@gpu2``;
    ``gpus`` the cards' identities (default ``synthetic_gpus(node)``; ``{}`` for none, as a
    report from before identities); ``gemm_scale`` scales every GPU's GEMM TFLOPS (a node
    that decays over its history, or another card: 0.6 for an A100's share of an H100's);
    ``profile`` is only the name the report carries (the figures stay an H100's, scaled)."""
    level = Level(level)
    rng = random.Random(seed if seed is not None else node)
    start = started_at or dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=10)
    broken = _parse_faults(faults)
    slow = {entity.split(".")[0] for entity in broken.get("slow-gpu", set())}
    hot = {entity.split(".")[0] for entity in broken.get("hot-gpu", set())}
    # the draws below happen in a fixed order (quick, then load, then the boot id), so a
    # seed always plants the same values
    results = _quick_results(rng, broken.get("nvlink-down", set()), hot, xid="xid" in broken)
    series: dict[str, dict[str, dict[str, list[list[float | None]]]]] = {}
    matrices: dict[str, dict[str, object]] = {}
    if level is not Level.QUICK:
        matrices["p2p_bandwidth"] = _p2p_matrix(rng, slow, results)
        series["load"] = _gpu_load(rng, slow, hot, samples, results, gemm_scale=gemm_scale)
        busbw = round(rng.gauss(480.0, 3.0) * (0.7 if slow else 1.0), 1)
        results.append(_result("allreduce_busbw", "node", busbw, {"min": 400}, "GB/s",
                               ok=busbw >= 400, severity=Severity.WARNING))
    duration = {Level.QUICK: 0.4, Level.STANDARD: 412.5, Level.ACCEPTANCE: 7260.0}[level]
    return build(
        results, node=node, profile=profile, level=level, started_at=start,
        finished_at=start + dt.timedelta(seconds=duration), duration_s=duration,
        backend="nvml" if level is Level.QUICK else "cuda/nccl",
        boot_id=f"6f0c3c1e-3c2d-4a5e-9b1f-{rng.getrandbits(48):012x}",
        labels={"site": "lab", "slurm_node": node, **(labels or {})},
        series=series, matrices=matrices,
        gpus=synthetic_gpus(node) if gpus is None else gpus,
    )


def _quick_results(rng: random.Random, down_links: set[str], hot: set[str], *,
                   xid: bool) -> list[CheckResult]:
    """The quick battery's NVML results: per GPU, per NVLink, then the node's Xid count."""
    results: list[CheckResult] = [_result("gpu_count", "node", 8, {"min": 8, "max": 8}, "")]
    for gpu in GPUS:
        results.append(_result("pcie_link", gpu, "Gen5 x16", "Gen5 x16", ""))
        results.append(_result("pcie_replays", gpu, rng.choice((0, 0, 0, 1, 2)), {"max": 100},
                               "replays"))
        results.append(_result("ecc_dbe_volatile", gpu, 0, {"max": 0}, "errors"))
        results.append(_result("remap_pending", gpu, False, False, ""))
        temp = round(rng.gauss(34.0, 1.5) + (25.0 if gpu in hot else 0.0), 1)
        results.append(_result("idle_temperature", gpu, temp, {"max": 50}, "C", ok=temp <= 50,
                               message=None if temp <= 50 else f"{gpu} idles at {temp} C"))
        results.append(_result("power_limit", gpu, 700.0, 700.0, "W"))
        for link in range(LINKS):
            entity = f"{gpu}.link{link}"
            up = entity not in down_links
            results.append(_result(
                "nvlink_state", entity, up, True, "", ok=up, severity=Severity.HARDWARE,
                message=None if up else f"NVLink {link} on GPU {gpu[3:]} is inactive"))
            results.append(_result("nvlink_crc_errors", entity, rng.choice((0, 0, 0, 1)),
                                   {"max": 100}, "errors"))
    results.append(_result("xid_events", "node", 1 if xid else 0, {"max": 0}, "events",
                           ok=not xid, severity=Severity.CRITICAL,
                           message="Xid 79: GPU has fallen off the bus" if xid else None))
    return results


def _p2p_matrix(rng: random.Random, slow: set[str],
                results: list[CheckResult]) -> dict[str, object]:
    """Every ordered GPU pair's P2P bandwidth (appended to ``results``) and the matrix of them;
    a pair touching a slow GPU runs at 80%."""
    values: list[list[float | None]] = []
    for src in GPUS:
        row: list[float | None] = []
        for dst in GPUS:
            if src == dst:
                row.append(None)
                continue
            factor = 0.8 if (src in slow or dst in slow) else 1.0
            bandwidth = round(rng.gauss(389.0, 2.0) * factor, 1)
            row.append(bandwidth)
            results.append(_result(
                "p2p_bandwidth", f"{src}-{dst}", bandwidth, {"min": 335}, "GB/s",
                ok=bandwidth >= 335, severity=Severity.WARNING))
        values.append(row)
    return {"unit": "GB/s", "entities": list(GPUS), "values": values,
            "description": "unidirectional P2P copy bandwidth"}


def _gpu_load(rng: random.Random, slow: set[str], hot: set[str], samples: int,
              results: list[CheckResult], *, gemm_scale: float = 1.0,
              ) -> dict[str, dict[str, list[list[float | None]]]]:
    """Per GPU: HBM and GEMM results (appended to ``results``) and the telemetry series under
    load; a hot GPU runs warmer and throttles its clock after 20 samples."""
    telemetry: dict[str, dict[str, list[list[float | None]]]] = {}
    for gpu in GPUS:
        factor = 0.8 if gpu in slow else 1.0
        hbm = round(rng.gauss(2950.0, 15.0) * factor, 1)
        gemm = round(rng.gauss(720.0, 6.0) * factor * gemm_scale, 1)
        results.append(_result("hbm_bandwidth", gpu, hbm, {"min": 2600}, "GB/s",
                               ok=hbm >= 2600, severity=Severity.WARNING))
        results.append(_result("gemm_tflops", gpu, gemm, {"min": 600}, "TFLOPS",
                               ok=gemm >= 600, severity=Severity.WARNING))
        base_temp = 62.0 + (18.0 if gpu in hot else 0.0)
        power: list[list[float | None]] = []
        temps: list[list[float | None]] = []
        clocks: list[list[float | None]] = []
        for index in range(samples):
            t = float(index)
            ramp = min(1.0, index / 5.0)
            power.append([t, round(120 + ramp * (560 + rng.gauss(0, 8)), 1)])
            temps.append([t, round(34 + ramp * (base_temp - 34) + index * 0.05, 1)])
            clocks.append([t, float(1980 - (90 if gpu in hot and index > 20 else 0))])
        telemetry[gpu] = {"power_w": power, "temperature_c": temps, "sm_clock_mhz": clocks}
    return telemetry


def synthetic_history(node: str, *, reports: int, start: dt.datetime,
                      every: dt.timedelta = dt.timedelta(days=1),
                      gemm_decay: float = 0.0, gemm_scale: float = 1.0,
                      profile: str = "xe9680-h100") -> list[NodeReport]:
    """``reports`` standard runs of one node, ``every`` apart, oldest first, each with its own
    seed; ``gemm_decay`` is the share of GEMM TFLOPS lost per report (0.01: 1 % a run),
    ``gemm_scale`` and ``profile`` as ``synthetic_report``'s (a steady node of another card)."""
    return [synthetic_report(node, started_at=start + every * index, seed=f"{node}/{index}",
                             samples=10, gemm_scale=gemm_scale * (1.0 - gemm_decay) ** index,
                             profile=profile)
            for index in range(reports)]
