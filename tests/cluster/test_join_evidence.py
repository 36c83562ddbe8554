"""Join on evidence: a report's level label is not enough, what ran must be the level's
full battery."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from nodegate.cluster.evidence import not_applicable, problems, required_checks, widen_checks
from nodegate.cluster.gate import Action, decide_join
from nodegate.cluster.scheduler import NodeState
from nodegate.profiles import resolve_profile
from nodegate.report import NodeReport, load, to_json
from nodegate.report.run_record import run_record
from nodegate.results import Verdict
from tests.cluster.helpers import FULL_RUN, complete, report
from tests.conftest import run_cli

HELD = NodeState("n1", "idle", frozenset({"DRAIN"}), "nodegate: standard report missing")


def _join(*reports: NodeReport, profile: str | None = None) -> tuple[Action, str, str]:
    data = resolve_profile(profile).data if profile else None
    decision = decide_join(HELD, list(reports), profile=data)
    return decision.action, decision.why, decision.reason or ""


def test_complete_full_scale_report_joins() -> None:
    assert _join(report("n1"))[0] is Action.RESUME


def test_validate_checks_gpu_is_refused_naming_the_missing_load_checks(tmp_path: Path) -> None:
    result = run_cli("sim", "run", "h100-hgx", "--", "nodegate", "validate", "--level",
                     "standard", "--checks", "gpu", "--profile", "sim-h100-hgx",
                     "--report-dir", str(tmp_path / "r"), "--no-textfile", "--quiet",
                     env={"NODEGATE_LOCK_FILE": str(tmp_path / "lock")})
    assert result.returncode == 0, result.stderr  # every gpu check PASSes: a "standard" PASS
    written = load(tmp_path / "r" / "standard-latest.json")
    profile = resolve_profile("sim-h100-hgx")
    assert written.run == {"groups": ["gpu"], "seams": {}, "profile_digest": profile.digest()}
    decision = decide_join(HELD, [written], profile=profile.data, now=written.finished_at)
    assert decision.action is Action.DRAIN
    assert ("missing load checks: gemm_completed, gemm_tflops, gemm_consistency, "
            "gemm_tflops_outlier, memory_completed, hbm_bandwidth, hbm_bandwidth_outlier, "
            "h2d_bandwidth (+47 more)") in decision.why
    assert "missing log checks: xid_events" in decision.why
    assert "missing host checks: nouveau_absent" in decision.why
    assert decision.reason == ("nodegate: standard report incomplete (missing log checks: "
                               "xid_events)")


def test_scaled_down_load_is_refused_for_a_real_profile() -> None:
    scaled = complete(report("n1"), duration_scale=0.02)
    action, why, reason = _join(scaled, profile="xe9680-h100")
    assert action is Action.DRAIN
    assert why.endswith("load ran at duration scale 0.02, not 1")
    assert reason == "nodegate: standard report incomplete (load ran at duration scale 0.02, not 1)"
    assert _join(complete(report("n1"), duration_scale=2.0), profile="xe9680-h100")[0] \
        is Action.RESUME  # longer than the profile's durations is more evidence, not less


def test_fault_seams_are_refused() -> None:
    base = report("n1")
    seamed = dataclasses.replace(base, run={**base.run,
                                            "seams": {"NODEGATE_LOAD_FAIL_RANK": "3:2"}})
    action, why, _ = _join(seamed)
    assert action is Action.DRAIN
    assert "fault-injection seams set: NODEGATE_LOAD_FAIL_RANK=3:2" in why


def test_run_record_takes_the_seams_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEGATE_LOAD_SLOW_RANK", "1:0.5")
    profile = resolve_profile("sim-h100-hgx")
    record = run_record(("gpu", "load"), profile, "standard", 0.02)
    assert record == {"groups": ["gpu", "load"], "seams": {"NODEGATE_LOAD_SLOW_RANK": "1:0.5"},
                      "profile_digest": profile.digest(), "duration_scale": 0.02}
    assert "duration_scale" not in run_record(("gpu",), profile, "standard", 0.02)
    assert "duration_scale" not in run_record(("gpu", "load"), profile, "quick", 1.0)


def test_report_without_run_record_is_no_standard_evidence() -> None:
    old = dataclasses.replace(report("n1"), run={})
    action, why, _ = _join(old)
    assert action is Action.DRAIN
    assert "does not record what ran" in why
    # quick has no load: completeness of its results is the whole evidence
    quick = dataclasses.replace(report("n1", level="quick"), run={})
    assert problems(quick, "quick", None) == []


def test_skip_without_reason_counts_as_missing() -> None:
    base = report("n1")
    results = tuple(dataclasses.replace(r, verdict=Verdict.SKIP, evidence={})
                    if r.check == "xid_events" else r for r in base.results)
    assert problems(dataclasses.replace(base, results=results), "standard", None) == [
        "missing log checks: xid_events"]
    explained = tuple(dataclasses.replace(r, verdict=Verdict.SKIP, evidence={"reason": "x"})
                      if r.check == "xid_events" else r for r in base.results)
    assert problems(dataclasses.replace(base, results=explained), "standard", None) == []


def _without(base: NodeReport, names: set[str]) -> NodeReport:
    return dataclasses.replace(base, results=tuple(r for r in base.results
                                                   if r.check not in names))


def test_checks_the_profile_says_do_not_apply_are_not_required() -> None:
    single = not_applicable(resolve_profile("h200-single").data)
    assert {"nvlink_state", "fabric_state", "fabricmanager_service", "p2p_completed",
            "allreduce_completed", "nvme_array", "nvme_mount", "pcie_acs"} <= single.keys()
    lean = _without(report("n1"), set(single))
    assert _join(lean, profile="h200-single")[0] is Action.RESUME
    assert "missing gpu checks: fabric_state, nvlink_state" in _join(lean)[1]  # no profile
    a100 = not_applicable(resolve_profile("hgx-a100-80gb").data)
    assert "fabric_state" in a100 and "nvlink_state" not in a100
    # an HGX H100 must show its fabric and its links
    assert not {"fabric_state", "nvlink_state", "pcie_acs", "p2p_completed"} & set(
        not_applicable(resolve_profile("xe9680-h100").data))
    assert "missing gpu checks: fabric_state" in _join(
        _without(report("n1"), {"fabric_state"}), profile="xe9680-h100")[1]


def test_required_set_grows_with_the_level() -> None:
    quick, standard, acceptance = (set(required_checks(level, None))
                                   for level in ("quick", "standard", "acceptance"))
    assert quick < standard < acceptance
    assert "gemm_tflops" in standard - quick and "burnin_loss" in acceptance - standard
    assert not {"psu_count", "circuit_load"} & acceptance  # infrastructure: not required


def test_widen_checks_never_narrows_a_join_run() -> None:
    assert widen_checks(["--checks", "gpu,log"], "standard") == [
        "--checks", "gpu,log,host,network,load"]
    assert widen_checks(["--checks=gpu,log,host,power", "--xid-window", "6h"], "quick") == [
        "--checks", "gpu,log,host,network,power", "--xid-window", "6h"]


def test_the_network_group_is_required_where_the_profile_declares_rails() -> None:
    from nodegate.profiles import resolve_profile

    rails = set(required_checks("quick", resolve_profile("xe9680-h100").data))
    assert {"ib_port_state", "ib_port_rate", "ib_topology", "ib_link_flaps"} <= rails
    assert "ib_netdev" not in rails  # InfiniBand: no RoCE MTU declared
    bare = set(required_checks("quick", resolve_profile("hgx-a100-80gb").data))
    assert "ib_rail_count" in bare and "ib_port_state" not in bare  # its SKIP says why
    assert widen_checks(["--xid-window", "6h"], "acceptance") == ["--xid-window", "6h"]


def test_run_record_round_trips_and_old_reports_still_load(tmp_path: Path) -> None:
    full = report("n1")
    data = json.loads(to_json(full))
    keys = list(data)
    assert keys[keys.index("digest") + 1:] == ["run", "results", "series", "matrices"]
    assert data["run"] == {**FULL_RUN, "duration_scale": 1.0}
    path = tmp_path / "standard-latest.json"
    path.write_text(to_json(full))
    assert load(path).run == full.run
    old = dataclasses.replace(full, run={})
    assert "run" not in json.loads(to_json(old))
    path.write_text(to_json(old))
    assert load(path).run == {}


def test_schema_refuses_a_malformed_run_record(tmp_path: Path) -> None:
    from nodegate.errors import ConfigError
    from nodegate.report import validate

    data = json.loads(to_json(report("n1")))
    data["run"]["profile_digest"] = "md5:abc"
    with pytest.raises(ConfigError) as caught:
        validate(data, source="r.json")
    assert caught.value.key == "$.run.profile_digest"


def test_profile_digest_is_stable_and_tracks_the_data() -> None:
    first, again = resolve_profile("xe9680-h100"), resolve_profile("xe9680-h100")
    assert first.digest() == again.digest()
    assert first.digest().startswith("sha256:") and len(first.digest()) == 71
    assert first.digest() != resolve_profile("xd670-h100").digest()


def test_failing_result_still_refuses_before_evidence() -> None:
    failed = complete(report("n1", faults=("nvlink-down@gpu3.link5",)))
    assert _join(failed)[2] == "nodegate: standard failed nvlink_state[gpu3.link5]"



def test_storage_checks_are_required_only_where_the_profile_asks_for_them() -> None:
    """A quick join on a profile without nvme.smart must not wait for SMART checks the
    battery never runs there (the lab drained every node for it), and one with it must."""
    from nodegate.cluster.evidence import required_checks

    plain = {"nvme": {"devices": 2}}
    assert "nvme_spare" not in required_checks("quick", plain)
    assert "nvme_spare" in required_checks("quick", {"nvme": {"devices": 2, "smart": True}})
    assert "nvme_seq_read" not in required_checks("standard", plain)
    assert "nvme_seq_read" in required_checks("standard", {"nvme": {"fio": {}}})
    assert "dcgm_diag" not in required_checks("standard", {"dcgm": {"diag_level": {
        "acceptance": 2}}})
    assert "dcgm_diag" in required_checks("standard", {"dcgm": {"diag_level": {"standard": 1}}})
