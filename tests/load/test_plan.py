"""The load plan: how long each phase should take, and the shipped profiles within budget."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from nodegate.judge import load as verdicts
from nodegate.load import config, plan, tasks
from nodegate.profiles import resolve_profile
from nodegate.profiles.loader import profiles_dir

#: The shipped profiles of full nodes (every GPU of an HGX board).
NODE_PROFILES = ["xe9680-h100", "xd670-h100", "xd670-h200", "hgx-a100-80gb", "xe9680l-b200"]


def _profile(name: str) -> dict[str, Any]:
    prof: Any = resolve_profile(name)
    return dict(getattr(prof, "data", prof))


def _th(**floors: float) -> dict[str, Any]:
    return verdicts.thresholds_of({"thresholds": {
        name: {"min": value, "unit": "GB/s", "source": "policy: test"}
        for name, value in floors.items()}})


def test_copy_phases_are_sized_from_their_bytes_at_the_profiles_floors() -> None:
    cfg = config.from_profile({"gpu": {"memory_mib": 1024}, "load": {
        "gemm_seconds": 10, "hbm_bytes": 4_000_000_000, "copy_bytes": 1_000_000_000,
        "p2p_bytes": 1_000_000_000, "allreduce_max_bytes": 4_000_000_000,
        "allreduce_steps": 2, "copy_iters": 4, "burnin_seconds": 100, "soak_seconds": 50}},
        "acceptance")
    th = _th(hbm_bandwidth_gbps_min=2000, h2d_gbps_min=50, d2h_gbps_min=25,
             p2p_unidir_gbps_min=100, p2p_bidir_gbps_min=200, allreduce_busbw_gbps_min=150)
    got = plan.phases(cfg, 4, th)
    setup = plan.SETUP_S
    # 5 copies (4 + warm-up) of 4 GB read + written at 2000 GB/s; per GPU, in turn, 2
    # placements x (5 copies x (1 GB at 50 + 1 GB at 25 GB/s) + making the 1 GB buffer)
    per_placement = (5 * (1 / 50 + 1 / 25) + 1 / plan.HOST_BUFFER_GBPS
                     + 2 * 1 / plan.HOST_CHECK_GBPS)  # both host buffers checksummed
    assert got["memory"] == pytest.approx(setup + 5 * 4 / 2000 + 4 * 2 * per_placement)
    # 12 ordered pairs x ((2 + 4) one-way GB at 100 + 4 x 2 GB at 200 GB/s)
    assert got["p2p"] == pytest.approx(setup + 12 * (6 / 100 + 4 * 2 / 200))
    # busbw 150 on 4 GPUs is algbw 150 x 4 / 6 = 100 GB/s; 4 GB takes 0.04 s, timed
    # JUDGED_ITERS times after 2 untimed runs, then checked (nccl-tests -c); each of the 2
    # sizes has a 0.2 s budget
    assert got["allreduce"] == pytest.approx(
        setup + 2 * 0.2 + (tasks.JUDGED_ITERS + 2 + plan.ALLREDUCE_CHECK_RUNS) * 0.04)
    assert got["gemm"] == 10 + setup and got["burnin"] == 100 + setup
    assert got["soak"] == 50 + setup
    # no collective floors: each at 10 GB/s busbw; all_gather, reduce_scatter and alltoall
    # at n = 4 are algbw 10 / 0.75, broadcast algbw 10; 4 GB, 7 runs, 2 sizes of 0.2 s each
    runs = (tasks.JUDGED_ITERS + 2) * (3 * 4 * 0.75 / 10 + 4 / 10)
    assert got["collectives"] == pytest.approx(setup + 4 * 2 * 0.2 + runs)
    assert got["fsdp"] == pytest.approx(plan.fsdp_phase(cfg.fsdp, 4, th)["seconds"])
    # run order; the acceptance-only phases around the burn-in
    assert list(got) == ["gemm", "memory", "p2p", "allreduce", "collectives",
                         "hbm_patterns", "burnin", "fsdp", "soak"]


def test_one_gpu_plans_no_peer_phases_and_missing_floors_plan_slow() -> None:
    cfg = config.from_profile({"load": {"copy_bytes": 1_000_000_000, "copy_iters": 1}},
                              "standard")
    got = plan.phases(cfg, 1, {})
    assert set(got) == {"gemm", "memory"}
    assert got["memory"] > 2 * 2 * 2 * 1 / plan.FALLBACK_GBPS  # at 10 GB/s, not infinitely fast


@pytest.mark.parametrize("name", NODE_PROFILES)
def test_shipped_node_profiles_fit_the_level_budgets(name: str) -> None:
    """Level budgets: standard about 3 minutes on an 8-GPU node, acceptance at most 15 (gang
    start-up, ~30 s, on top of the plan)."""
    data = _profile(name)
    world = int(data["gpu"]["count"])
    th = verdicts.thresholds_of(data)
    standard = plan.total(config.from_profile(data, "standard"), world, th)
    acceptance = plan.total(config.from_profile(data, "acceptance"), world, th)
    assert 120 <= standard + 30 <= plan.BUDGET_S["standard"], standard
    assert acceptance + 30 <= plan.BUDGET_S["acceptance"], acceptance


def test_an_8_gpu_b300_node_fits_the_acceptance_budget_with_fp4(tmp_path: Path) -> None:
    """No B300 chassis profile ships yet (no sourced platform): the XE9680L's B200 profile with
    its GPU layer swapped for the B300's stands in, as the profile tests do."""
    base = tmp_path / "profiles"
    for layer in ("gpu", "platform"):
        (base / layer).mkdir(parents=True)
        for path in (profiles_dir() / layer).glob("*.yaml"):
            (base / layer / path.name).write_text(path.read_text())
    body = (profiles_dir() / "xe9680l-b200.yaml").read_text()
    (base / "b300.yaml").write_text(body.replace("gpu/b200-sxm-180gb", "gpu/b300-sxm6-288gb"))
    data = dict(resolve_profile("b300", base=base).data)
    th = verdicts.thresholds_of(data)
    cfg = config.from_profile(data, "acceptance")
    assert "fp4" in cfg.acceptance_dtypes and "fp64" not in cfg.acceptance_dtypes
    phases = plan.phases(cfg, 8, th)
    assert "gemm_fp4" in phases
    assert sum(phases.values()) + 30 <= plan.BUDGET_S["acceptance"], phases


def test_the_plan_line_names_level_time_and_phases() -> None:
    cfg = config.from_profile(_profile("xe9680-h100"), "acceptance")
    line = plan.describe(cfg, 8, {})
    assert line.startswith("load: acceptance on 8 GPU(s), planned ~")
    assert "burnin 122 s" in line and "soak 182 s" in line and "dcgm 120 s" in line and "fsdp " in line


def test_a_plan_over_the_levels_budget_says_so() -> None:
    data = _profile("xe9680-h100")
    data["load"] = {**data["load"], "soak_seconds": 900}
    line = plan.describe(config.from_profile(data, "acceptance"), 8, {})
    assert line.endswith("; over the acceptance budget of 15 min")
    shipped = _profile("xe9680-h100")  # with its floors (without, the FSDP checkpoint
    # is planned at a 1 GB/s fallback and the level runs over)
    assert "over the" not in plan.describe(config.from_profile(shipped, "acceptance"), 8,
                                           verdicts.thresholds_of(shipped))


def test_acceptance_plans_the_dtype_gemms_and_the_hbm_pattern_test() -> None:
    """Acceptance phases: each further dtype for its seconds; the pattern test for its seconds plus
    one pass (write + read of the tested bytes) at the profile's pattern-rate floor."""
    cfg = config.from_profile({"gpu": {"memory_mib": 1000}, "load": {
        "acceptance_dtypes": ["fp16", "fp8"], "dtype_gemm_seconds": 7,
        "hbm_test_seconds": 30, "hbm_test_fraction": 0.5}}, "acceptance")
    th = _th(hbm_pattern_gbps_min=0.5)
    got = plan.phases(cfg, 1, th)
    assert got["gemm_fp16"] == got["gemm_fp8"] == 7 + plan.SETUP_S
    one_pass = 2 * 0.5 * (1000 << 20) / 0.5e9  # ~2.1 s
    assert got["hbm_patterns"] == pytest.approx(plan.SETUP_S + 30 + one_pass)
    # a first round longer than the seconds sets the time
    slow = plan.phases(cfg, 1, _th(hbm_pattern_gbps_min=0.01))
    assert slow["hbm_patterns"] == pytest.approx(plan.SETUP_S + 5 * one_pass * 50)
    assert "hbm_patterns" not in plan.phases(config.from_profile({}, "standard"), 1, th)


def test_the_plan_counts_the_storage_phases_the_profile_runs() -> None:
    """fio (nvme.fio: each workload's runtime plus one for the layout) and DCGM's diagnostic
    at the level dcgm.diag_level names (DCGM's documented durations)."""
    data = {"nvme": {"fio": {"runtime_s": 10}}, "dcgm": {"diag_level": {"standard": 1,
                                                                        "acceptance": 2}}}
    standard = plan.phases(config.from_profile(data, "standard"), 1, {})
    assert standard["fio"] == 40.0 and standard["dcgm"] == 30.0
    acceptance = config.from_profile(data, "acceptance")
    assert plan.phases(dataclasses.replace(acceptance, fsdp={}), 1, {})["dcgm"] == 120.0
    assert "dcgm" not in plan.phases(config.from_profile({}, "standard"), 1, {})
