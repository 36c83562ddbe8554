"""nccl-tests' bus-bandwidth arithmetic for every collective (doc/PERFORMANCE.md) and the
in-node collectives' judging."""

from __future__ import annotations

import pytest

from nodegate.judge import load as verdicts
from nodegate.load import formulas
from nodegate.profiles.loader import Threshold
from nodegate.results import Verdict


@pytest.mark.parametrize(("name", "n", "factor"), [
    ("all_reduce", 8, 1.75), ("all_reduce", 2, 1.0),
    ("all_gather", 8, 0.875), ("reduce_scatter", 16, 0.9375), ("alltoall", 3, 2 / 3),
    ("broadcast", 8, 1.0), ("all_gather", 1, 0.0),
])
def test_bus_factors_are_nccl_tests(name: str, n: int, factor: float) -> None:
    assert formulas.collective_factor(name, n) == pytest.approx(factor)


def test_figures_follow_from_size_and_time() -> None:
    # 1 GiB of all_gather output in 4 ms on 8 ranks: algbw 268.4 GB/s, busbw x 7/8
    alg, bus = formulas.collective_bandwidth("all_gather", 1 << 30, 0.004, 8)
    assert alg == pytest.approx(268.435456) and bus == pytest.approx(268.435456 * 7 / 8)
    assert formulas.collective_bandwidth("all_reduce", 1 << 30, 0.004, 8) == \
        formulas.allreduce_bandwidth(1 << 30, 0.004, 8)
    with pytest.raises(ValueError, match="unknown collective 'gather'"):
        formulas.collective_factor("gather", 8)


def test_split_collectives_get_whole_float32_shares() -> None:
    assert formulas.collective_size("all_gather", 1 << 20, 3) == 1048572  # 12 | size
    assert formulas.collective_size("broadcast", 1 << 20, 3) == 1 << 20
    assert formulas.collective_size("alltoall", 10, 8) == 32  # never below one element each


def test_in_node_collectives_judged_each_on_its_floor_and_missing_is_error() -> None:
    def rows(name: str, alg: float) -> list[dict[str, float]]:
        return [{"bytes": 1 << 30, "seconds": 0.01, "iters": 5, "algbw_gbps": alg,
                 "busbw_gbps": alg * formulas.collective_factor(name, 8)}]

    value = {"world": 8, "collectives": {
        "all_gather": rows("all_gather", 400.0), "reduce_scatter": rows("reduce_scatter", 300.0),
        "broadcast": rows("broadcast", 300.0)}}
    th = {f"{infix}_busbw_gbps_min": Threshold(f"{infix}_busbw_gbps_min", "min", 315.0, "GB/s",
                                               "policy: test")
          for infix in ("allgather", "reducescatter", "alltoall", "broadcast")}
    got = {r.check: r for r in verdicts.collectives(value, th)}
    assert got["allgather_busbw"].verdict is Verdict.PASS  # 400 x 7/8 = 350
    assert got["allgather_busbw"].measured == 350.0
    assert got["reducescatter_busbw"].verdict is Verdict.FAIL  # 262.5
    assert got["broadcast_busbw"].verdict is Verdict.FAIL  # factor 1: 300
    assert got["alltoall_busbw"].verdict is Verdict.ERROR
