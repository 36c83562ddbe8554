"""Every shipped profile loads and validates; errors name file and key; layering precedence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodegate.errors import ConfigError
from nodegate.profiles import list_profiles, resolve_profile
from nodegate.profiles.loader import check_files, profiles_dir
from nodegate.profiles.threshold_keys import THRESHOLD_KEYS
from tests.conftest import run_cli

REQUIRED = {"xe9680-h100", "xd670-h100", "xd670-h200", "hgx-a100-80gb", "h200-single",
            "sim-h100-hgx", "xe9680l-b200"}


def test_required_profiles_ship() -> None:
    names = {name for name, _ in list_profiles()}
    assert names >= REQUIRED


@pytest.mark.parametrize("path", sorted(profiles_dir().rglob("*.yaml")), ids=lambda p: p.stem)
def test_every_profile_file_validates(path: Path) -> None:
    assert check_files([path]) == [str(path)]


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_every_threshold_carries_a_source_and_a_known_name(name: str) -> None:
    profile = resolve_profile(name)
    assert profile.thresholds(), name
    for threshold in profile.thresholds():
        assert threshold.name in THRESHOLD_KEYS
        assert THRESHOLD_KEYS[threshold.name].bound == threshold.bound, threshold.name
        assert threshold.source.split(":")[0] in ("datasheet", "peer-tool", "measured", "policy")


def test_reference_figures() -> None:
    h100 = resolve_profile("xe9680-h100")
    assert h100.data["gpu"]["pci_device_id"] == 0x2330
    assert h100.data["nvlink"]["links_per_gpu"] * h100.data["nvlink"]["link_gbps"] == 450
    p2p = h100.threshold("p2p_unidir_gbps_min")
    assert p2p is not None and p2p.value == 335 and "azurehpc" in p2p.source
    a100 = resolve_profile("hgx-a100-80gb")
    assert a100.data["nvlink"]["links_per_gpu"] == 12
    assert a100.data["gpu"]["power_limit_w"] == 400
    allreduce = a100.threshold("allreduce_busbw_gbps_min")
    assert allreduce is not None and allreduce.value == 228
    single = resolve_profile("h200-single")
    assert single.data["gpu"]["count"] == 1
    assert single.data["nvlink"]["nvswitch"] is False
    assert single.data["driver"]["fabricmanager"] is False


def test_blackwell_figures(tmp_path: Path) -> None:
    """B200 on the XE9680L: NVLink 5 with NVLSM, and no performance floor left at an H100
    figure; the B300 layer carries no FP64 floor (about 1.25 TFLOPS FP64)."""
    b200 = resolve_profile("xe9680l-b200")
    gpu, nvlink = b200.data["gpu"], b200.data["nvlink"]
    assert (gpu["pci_device_id"], gpu["architecture"], gpu["power_limit_w"]) == (
        0x2901, "blackwell", 1000)
    assert gpu["features"]["nvlink_versions"] == ["5_0"]
    assert nvlink["generation"] == 5 and nvlink["links_per_gpu"] * nvlink["link_gbps"] == 900
    assert b200.data["driver"]["nvlsm"] is True
    for key in ("gemm_bf16_tflops_min", "gemm_fp8_tflops_min", "hbm_bandwidth_gbps_min",
                "p2p_unidir_gbps_min", "allreduce_busbw_gbps_min", "fsdp_tflops_min"):
        assert b200.origins[f"thresholds.{key}.min"] == "gpu/b200-sxm-180gb", key
    base = tmp_path / "profiles"
    base.mkdir()
    for layer in ("gpu", "platform"):
        (base / layer).mkdir()
        for path in (profiles_dir() / layer).glob("*.yaml"):
            (base / layer / path.name).write_text(path.read_text())
    body = (profiles_dir() / "xe9680l-b200.yaml").read_text()
    (base / "b300.yaml").write_text(body.replace("gpu/b200-sxm-180gb", "gpu/b300-sxm6-288gb"))
    b300 = resolve_profile("b300", base=base)
    assert b300.data["gpu"]["pci_device_id"] == 0x3182
    assert b300.threshold("gemm_fp64_tflops_min") is None
    assert "fp64" not in b300.data["load"]["acceptance_dtypes"]


def test_layer_order_gpu_platform_profile_site_host() -> None:
    profile = resolve_profile(
        "xe9680-h100",
        site_overrides={"gpu": {"power_limit_w": 650}, "nvme": {"devices": 6}},
        host_overrides={"nvme": {"devices": 4}},
    )
    assert profile.layers == ["gpu/h100-sxm5-80gb", "platform/hgx-8gpu",
                              "platform/dell-xe9680", "xe9680-h100", "site", "host"]
    assert profile.data["gpu"]["power_limit_w"] == 650  # site beats the GPU layer
    assert profile.origins["gpu.power_limit_w"] == "site"
    assert profile.data["nvme"]["devices"] == 4  # host beats site
    assert profile.data["gpu"]["model"] == "NVIDIA H100 80GB HBM3"  # untouched keys stay


def test_threshold_override_replaces_the_bound() -> None:
    profile = resolve_profile(
        "xe9680-h100",
        host_overrides={"thresholds": {"p2p_unidir_gbps_min": {
            "min": 300, "unit": "GB/s", "source": "measured: 330 GB/s on gpu-b01 x 0.91"}}},
    )
    threshold = profile.threshold("p2p_unidir_gbps_min")
    assert threshold is not None
    assert (threshold.value, threshold.source) == (300, "measured: 330 GB/s on gpu-b01 x 0.91")


def _write(tmp_path: Path, text: str, name: str = "bad.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


HEADER = "schema: nodegate.profile/1\nlayer: profile\n"


@pytest.mark.parametrize(
    ("body", "key", "words"),
    [
        ("extends: [gpu/h100-sxm5-80gb, platform/dell-xe9680]\ngpu:\n  count: eight\n",
         "gpu.count", "not of type"),
        ("gpu:\n  model: X\n  colour: green\n", "gpu.colour", "unknown key"),
        ("thresholds:\n  p2p_unidir_gbps_min: {min: 1, unit: GB/s, source: 'somebody said'}\n",
         "thresholds.p2p_unidir_gbps_min.source", "must start with"),
        ("thresholds:\n  p2p_typo_gbps_min: {min: 1, unit: GB/s, source: 'policy: x'}\n",
         "thresholds.p2p_typo_gbps_min", "unknown key"),
        ("thresholds:\n  p2p_unidir_gbps_min: {min: 1, max: 2, unit: GB/s, source: 'policy: x'}\n",
         "thresholds.p2p_unidir_gbps_min.max", "judged as a 'min' in GB/s"),
        # the catalogue's bound and unit hold (a 'min' on a _max name inverted the check)
        ("thresholds:\n  trend_drift_pct_max: {min: 5, unit: '%', source: 'policy: x'}\n",
         "thresholds.trend_drift_pct_max.min", "set 'max' and unit '%'"),
        ("thresholds:\n  trend_drift_pct_max: {max: 5, unit: C, source: 'policy: x'}\n",
         "thresholds.trend_drift_pct_max.unit", "judged as a 'max' in %"),
        ("thresholds:\n  trend_drift_pct_max: {unit: '%', source: 'policy: x'}\n",
         "thresholds.trend_drift_pct_max.max", "set 'max' and unit '%'"),
        ("load:\n  dtypes: [fp32]\n", "load.dtypes[0]", "is not one of"),
        ("load:\n  burnin_model: {vocab: 64, depth: 2}\n", "load.burnin_model.depth",
         "unknown key"),
        ("load:\n  copy_iters: 0\n", "load.copy_iters", "minimum"),
    ],
)
def test_schema_error_names_key_and_file(tmp_path: Path, body: str, key: str, words: str) -> None:
    path = _write(tmp_path, HEADER + body)
    with pytest.raises(ConfigError) as info:
        check_files([path])
    assert info.value.key == key
    assert info.value.file == str(path)
    assert words in info.value.message


def test_load_knobs_of_the_load_package_are_profile_keys(tmp_path: Path) -> None:
    shipped = (profiles_dir() / "sim-h100-hgx.yaml").read_text()
    knobs = ("load:\n  copy_iters: 20\n  allreduce_steps: 6\n  power_settle_s: 10\n"
             "  min_phase_seconds: 1\n  soak_min_seconds: 30\n  burnin_min_steps: 20\n"
             "  burnin_model: {vocab: 50304, d_model: 1024, layers: 12, heads: 16,"
             " seq_len: 1024, batch: 8, lr: 0.0003}\n")
    assert "\nload:\n" in shipped
    check_files([_write(tmp_path, shipped.replace("\nload:\n", "\n" + knobs, 1),
                        "sim-h100-hgx.yaml")])


def test_duplicate_key_is_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path, HEADER + "gpu:\n  count: 8\n  count: 4\n")
    with pytest.raises(ConfigError, match="duplicate key"):
        check_files([path])


def test_incomplete_profile_names_the_missing_key(tmp_path: Path) -> None:
    path = _write(tmp_path, HEADER + "extends: [gpu/h100-sxm5-80gb]\n")
    with pytest.raises(ConfigError) as info:
        check_files([path])
    assert "required" in info.value.message


def test_driver_version_must_be_on_branch(tmp_path: Path) -> None:
    path = _write(tmp_path, (profiles_dir() / "xe9680-h100.yaml").read_text().replace(
        "version: 570.133.20", "version: 550.163.01"), "xe9680-copy.yaml")
    with pytest.raises(ConfigError) as info:
        check_files([path])
    assert info.value.key == "driver.version"


def test_inheritance_loop(tmp_path: Path) -> None:
    _write(tmp_path, HEADER + "extends: [b]\n", "a.yaml")
    _write(tmp_path, HEADER + "extends: [a]\n", "b.yaml")
    with pytest.raises(ConfigError, match="loop"):
        resolve_profile("a", base=tmp_path)


def test_cli_profiles_list_and_show() -> None:
    listed = run_cli("profiles", "list")
    assert listed.returncode == 0, listed.stderr
    for name in REQUIRED:
        assert name in listed.stdout
    shown = run_cli("profiles", "show", "xe9680-h100")
    assert shown.returncode == 0, shown.stderr
    assert "p2p_unidir_gbps_min" in shown.stdout
    assert "azurehpc-health-checks" in shown.stdout
    assert "0x2330" in shown.stdout


def test_cli_profiles_check_wrong_type_exits_2(tmp_path: Path) -> None:
    path = _write(tmp_path, HEADER + "extends: [gpu/h100-sxm5-80gb, platform/dell-xe9680]\n"
                  "gpu:\n  count: eight\n")
    result = run_cli("profiles", "check", str(path))
    assert result.returncode == 2
    assert "key gpu.count" in result.stderr
    assert str(path) in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("data", [b"", b"abc", bytes(range(256)) * 300])
def test_profile_hashes_are_hashlibs_sha256(data: bytes) -> None:
    import hashlib

    from nodegate.profiles.loader import sha256_hex

    assert sha256_hex(data) == hashlib.sha256(data).hexdigest()


# --- `profiles check` says what the battery will say ----------------------


def test_a_resolved_profile_from_show_json_checks_clean(tmp_path: Path) -> None:
    """What ``profiles show NAME --json`` printed (``3e-07`` included: JSON, not YAML 1.1)
    is what ``health --profile FILE`` reads; main refused it (exit 2)."""
    from tests.conftest import run_cli

    shown = run_cli("profiles", "show", "sim-h100-hgx", "--json")
    assert shown.returncode == 0, shown.stderr
    path = tmp_path / "resolved.json"
    path.write_text(shown.stdout)
    assert "3e-07" in shown.stdout  # gemm_fp8_tflops_min
    done = run_cli("profiles", "check", str(path))
    assert done.returncode == 0, done.stderr


def test_a_profile_lacking_a_threshold_a_level_needs_is_refused(tmp_path: Path) -> None:
    from nodegate.battery.registry import required_keys
    from nodegate.vocabulary import QUICK_GROUPS
    from tests.conftest import run_cli

    shown = run_cli("profiles", "show", "sim-h100-hgx", "--json")
    data = json.loads(shown.stdout)
    key = next(iter(required_keys(data, "quick", QUICK_GROUPS)))
    del data["thresholds"][key.value]
    path = tmp_path / "resolved.json"
    path.write_text(json.dumps(data, indent=2))
    done = run_cli("profiles", "check", str(path))
    assert done.returncode == 2, done.stderr
    assert str(path) in done.stderr and key.value in done.stderr
    assert "quick level" in done.stderr
