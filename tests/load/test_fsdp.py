"""The FSDP burn-in: sizing, pre-flight, plan, judging, and (slow) the real
sharded run with its checkpoint round trip and the corruption seam."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from nodegate.errors import ConfigError
from nodegate.judge import fsdp as judge
from nodegate.judge import load as verdicts
from nodegate.load import config, fsdp_size, plan
from nodegate.profiles import resolve_profile
from nodegate.results import Verdict


def _data(name: str) -> dict[str, Any]:
    prof: Any = resolve_profile(name)
    return json.loads(json.dumps(dict(getattr(prof, "data", prof))))


def test_the_model_fills_the_profiles_fraction_of_hbm() -> None:
    model = fsdp_size.DEFAULTS["fsdp_model"]
    memory = 81559 * 2**20  # H100 SXM5 80GB as NVML reports it
    got = fsdp_size.sized(model, memory, 0.2, 8)
    budget = 0.2 * memory * 8
    n = fsdp_size.n_params(got)
    assert n * fsdp_size.STATE_BYTES_PER_PARAM <= budget
    assert (n + fsdp_size.block_params(4096)) * fsdp_size.STATE_BYTES_PER_PARAM > budget
    assert 5e9 < n < 10e9  # several billion parameters on 8x H100


def test_parameters_flops_and_checkpoint_bytes_by_hand() -> None:
    model = {"vocab": 10, "d_model": 4, "layers": 2, "heads": 2, "seq_len": 3}
    # tok 40 + pos 12 + 2 x (12 x 16 + 13 x 4 = 244) + final LayerNorm 8 + head 40
    assert fsdp_size.n_params(model) == 40 + 12 + 488 + 8 + 40
    assert fsdp_size.flops_per_token(model) == 6 * 588 + 12 * 2 * 4 * 3
    assert fsdp_size.checkpoint_bytes(model) == 12 * 588


@pytest.mark.parametrize("fraction", [0, 0.99, 1.5])
def test_a_fraction_outside_its_bounds_names_the_key(fraction: float) -> None:
    with pytest.raises(ConfigError) as err:
        config.from_profile({"load": {"fsdp_hbm_fraction": fraction}}, "acceptance")
    assert err.value.key == "load.fsdp_hbm_fraction"
    assert config.from_profile({"load": {"fsdp_hbm_fraction": 0.98}}, "standard")


def _settings(tmp_path: Path, **load: Any) -> dict[str, Any]:
    profile = {"gpu": {"memory_mib": 1024}, "nvme": {"mountpoint": str(tmp_path / "raid")},
               "load": load}
    cfg = config.from_profile(profile, "acceptance")
    return fsdp_size.resolve(cfg.fsdp, cuda=False, world=2)


def test_a_checkpoint_path_that_takes_no_file_names_the_path(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConfigError) as err:
        fsdp_size.preflight(_settings(tmp_path, fsdp_checkpoint_dir=str(blocker / "ckpt")))
    assert err.value.file == str(blocker / "ckpt")
    assert "not writable" in str(err.value)


def test_a_checkpoint_path_without_room_names_the_path(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    target = str(tmp_path / "ckpt")
    settings = _settings(tmp_path, fsdp_checkpoint_dir=target)

    class Full:
        f_bavail, f_frsize = 10, 4096

    monkeypatch.setattr(os, "statvfs", lambda path: Full())
    with pytest.raises(ConfigError) as err:
        fsdp_size.preflight(settings)
    assert err.value.file == target and "needs" in str(err.value)


def test_an_unmounted_array_is_never_written_under(tmp_path: Path) -> None:
    settings = _settings(tmp_path)  # no fsdp_checkpoint_dir: the array's mount
    with pytest.raises(ConfigError) as err:
        fsdp_size.preflight(settings)
    assert err.value.key == "load.fsdp_checkpoint_dir"
    assert not (tmp_path / "raid").exists()


def test_the_configured_path_says_it_is_not_the_array(tmp_path: Path) -> None:
    found = fsdp_size.preflight(_settings(tmp_path, fsdp_checkpoint_dir=str(tmp_path / "c")))
    assert found["on_array"] is False
    assert found["where"] == f"configured path; no NVMe array mounted at {tmp_path / 'raid'}"
    assert found["need_bytes"] > 0 and not list((tmp_path / "c").iterdir())


def test_validate_exits_2_on_a_bad_fraction_before_any_check(tmp_path: Path,
                                                             capsys: Any) -> None:
    from nodegate.cli import main

    data = _data("sim-h100-hgx")
    data["load"]["fsdp_hbm_fraction"] = 0.99
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(data))
    code = main(["validate", "--level", "acceptance", "--profile", str(path),
                 "--report-dir", str(tmp_path), "--no-textfile"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "key load.fsdp_hbm_fraction" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("name", ["xd670-h100", "xe9680-h100", "xd670-h200"])
def test_the_acceptance_plan_holds_with_the_fsdp_phase(name: str) -> None:
    data = _data(name)
    th = verdicts.thresholds_of(data)
    cfg = config.from_profile(data, "acceptance")
    phases = plan.phases(cfg, 8, th)
    fsdp = plan.fsdp_phase(cfg.fsdp, 8, th)
    assert phases["fsdp"] == fsdp["seconds"] and fsdp["n_params"] > 5e9
    assert sum(phases.values()) + 30 <= plan.BUDGET_S["acceptance"]


def _values(ranks: int = 3, **override: Any) -> dict[int, dict[str, Any]]:
    base = {"steps": 8, "losses": [4.0, 3.9, 3.5, 3.2, 3.0, 2.8, 2.7, 2.6],
            "step_s": [0.2] * 8, "tokens_per_step": 64, "n_params": 1000, "local_params": 334,
            "flops_per_step": 6.4e6, "precision": "fp32", "layers": 2,
            "checkpoints": [{"step": 4, "bytes": 10**9, "seconds": 0.5},
                            {"step": 8, "bytes": 10**9, "seconds": 0.25}],
            "verify": {"read_seconds": 0.1, "files_uncached": 4, "tensors": 10, "differing": 0,
                       "first_difference": None, "injected": None, "reference": "device"}}
    return {r: {**base, **(override if r == 1 else {})} for r in range(ranks)}


def _by(results: list[Any], check: str) -> dict[str, Any]:
    return {r.entity: r for r in results if r.check == check}


def _th(**floors: float) -> dict[str, Any]:
    return verdicts.thresholds_of({"thresholds": {
        k: {("max" if k.endswith("_max") else "min"): v, "unit": "", "source": "policy: test"}
        for k, v in floors.items()}})


def test_judging_a_healthy_run() -> None:
    th = _th(fsdp_checkpoint_write_gbps_min=1, fsdp_checkpoint_read_gbps_min=5,
             straggler_margin_pct_max=10, fsdp_tflops_min=1e-5, fsdp_tokens_per_s_min=100)
    out = judge.fsdp(_values(), th, {"where": "configured path", "on_array": False})
    assert _by(out, "fsdp_loss")["node"].verdict == Verdict.PASS
    write = _by(out, "fsdp_checkpoint_write")["node"]
    assert write.measured == 2.0 and write.verdict == Verdict.PASS  # the slowest: 1 GB in 0.5 s
    assert write.evidence["where"] == "configured path"
    read = _by(out, "fsdp_checkpoint_read")["node"]
    assert read.measured == 10.0 and read.verdict == Verdict.PASS
    assert _by(out, "fsdp_tflops")["gpu0"].measured == pytest.approx(3.2e-5)
    assert _by(out, "fsdp_tokens_per_s")["node"].measured == pytest.approx(960.0)
    assert all(r.verdict == Verdict.PASS for r in _by(out, "fsdp_checkpoint_verify").values())
    assert set(judge.JUDGED) == {r.check for r in out}


def test_a_checkpoint_that_does_not_verify_fails_naming_the_tensor() -> None:
    bad = {"read_seconds": 0.1, "files_uncached": 4, "tensors": 10, "differing": 1,
           "reference": "device", "injected": None,
           "first_difference": {"tensor": "optim.blocks.0.fc.weight.exp_avg",
                                "reason": "bytes differ", "differing_bytes": 1}}
    out = _by(judge.fsdp(_values(verify=bad), {}, {}), "fsdp_checkpoint_verify")
    assert out["gpu1"].verdict == Verdict.FAIL
    assert out["gpu1"].measured == "optim.blocks.0.fc.weight.exp_avg"
    assert "optim.blocks.0.fc.weight.exp_avg" in out["gpu1"].evidence["reason"]
    assert out["gpu0"].verdict == out["gpu2"].verdict == Verdict.PASS


def test_flat_loss_and_a_slow_rank_fail() -> None:
    out = judge.fsdp(_values(step_s=[0.3] * 8), _th(straggler_margin_pct_max=10), {})
    assert _by(out, "fsdp_straggler")["gpu1"].verdict == Verdict.FAIL
    assert _by(out, "fsdp_straggler")["gpu0"].verdict == Verdict.PASS
    flat = judge.fsdp({0: {**_values()[0], "losses": [4.0] * 8}}, {}, {})
    assert _by(flat, "fsdp_loss")["node"].verdict == Verdict.FAIL


# --- the real thing: sharded training, DCP checkpoints, the reload (gloo workers) ----------


@pytest.mark.torch
@pytest.mark.slow
def test_sharded_training_round_trips_and_a_corrupted_shard_is_named(tmp_path: Path) -> None:
    """One run of two gloo ranks (~15 s, most of it starting torch): rank 0's reload
    verifies bit for bit; rank 1 corrupts its own shard on disk (the seam) and FAILs naming
    the tensor it hit."""
    pytest.importorskip("torch")
    from nodegate.load import devices, fsdp, seams
    from nodegate.load.workers import Gang

    settings = _settings(tmp_path, fsdp_checkpoint_dir=str(tmp_path / "ckpt"),
                         fsdp_checkpoint_every=3, fsdp_steps=6, fsdp_min_steps=6,
                         fsdp_seconds=60)
    with Gang(2, devices.Backend("cpu", "gloo", 0), collective_timeout_s=30,
              env={seams.CORRUPT_CHECKPOINT: "1"}) as gang:
        assert gang.start().ok
        outcome = gang.run("fsdp", fsdp.train, 120, kwargs={"fsdp": settings})
    assert outcome.ok, outcome.failures
    values = outcome.values
    out = judge.fsdp(values, {}, {"where": "configured path"})
    assert values[0]["local_params"] * 2 == values[0]["n_params"]  # sharded in two
    assert [w["step"] for w in values[0]["checkpoints"]] == [3, 6]
    assert values[0]["checkpoints"][0]["bytes"] > values[0]["n_params"] * 12
    assert not (tmp_path / "ckpt").exists() or not list((tmp_path / "ckpt").iterdir())
    assert _by(out, "fsdp_loss")["node"].verdict == Verdict.PASS
    verify = _by(out, "fsdp_checkpoint_verify")
    assert verify["gpu0"].verdict == Verdict.PASS
    assert verify["gpu0"].evidence["tensors"] > 50  # parameters, both moments, steps
    assert verify["gpu1"].verdict == Verdict.FAIL
    injected = verify["gpu1"].evidence["injected"]
    assert verify["gpu1"].measured == injected["tensor"] and injected["file"] == "__1_0.distcp"
    assert verify["gpu1"].evidence["differing_tensors"] == 1
