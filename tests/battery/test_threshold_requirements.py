"""A typed profile: every threshold a running check needs is in the profile, or the run is
refused at load (exit 2 naming the key); no check SKIPs for want of a number."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from nodegate.battery.registry import (
    DECLARED,
    READ_ELSEWHERE,
    read_keys,
    require_thresholds,
    required_keys,
)
from nodegate.errors import ConfigError
from nodegate.profiles import Profile, list_profiles, resolve_profile
from nodegate.profiles.threshold_keys import THRESHOLD_KEYS, Feature, Key, has_feature
from nodegate.vocabulary import ALL_GROUPS, LEVELS, Level
from tests.conftest import ROOT, run_cli

SHIPPED = [name for name, _ in list_profiles()]


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_profile_supplies_every_key_its_checks_need(name: str) -> None:
    profile = resolve_profile(name)
    have = set(profile.data["thresholds"])
    for level in LEVELS:
        needed = required_keys(profile.data, level)
        assert {k.value for k in needed} - have == set(), (name, level)
        require_thresholds(profile, level, ALL_GROUPS)  # and the battery agrees


def test_every_catalogued_key_is_read_by_some_check() -> None:
    declared = read_keys()
    assert set(THRESHOLD_KEYS) == declared | set(READ_ELSEWHERE)
    assert declared & set(READ_ELSEWHERE) == set()
    for key, module in READ_ELSEWHERE.items():  # the named reader really reads it
        text = (ROOT / "src" / Path(*module.split("."))).with_suffix(".py").read_text()
        assert f"Key.{key.name}" in text, (key, module)


def test_no_judge_builds_a_threshold_name_at_run_time() -> None:
    """Thresholds are looked up by ``Key``: no f-string ``..._min``/``..._max`` name."""
    built = re.compile(r'f"[^"]*\}_(?:[a-z0-9]+_)*(?:min|max)(?:_c)?"')
    for path in (ROOT / "src" / "nodegate" / "judge").glob("*.py"):
        assert not built.search(path.read_text()), path


def _without(profile: Profile, key: Key) -> Profile:
    data = copy.deepcopy(profile.data)
    del data["thresholds"][key.value]
    return Profile(name=profile.name, data=data, layers=list(profile.layers),
                   source=profile.source)


def test_a_missing_key_is_a_profile_error_naming_file_and_key() -> None:
    profile = _without(resolve_profile("xe9680-h100"), Key.FSDP_TFLOPS_MIN)
    require_thresholds(profile, "standard", ALL_GROUPS)  # fsdp runs at acceptance only
    require_thresholds(profile, "acceptance", ("gpu", "log"))  # and only in the load group
    with pytest.raises(ConfigError) as raised:
        require_thresholds(profile, "acceptance", ALL_GROUPS)
    assert raised.value.key == "thresholds.fsdp_tflops_min"
    assert raised.value.file is not None and raised.value.file.endswith("xe9680-h100.yaml")
    assert "fsdp_tflops_min (needed by fsdp_tflops)" in str(raised.value)


def test_a_check_whose_feature_is_absent_needs_no_key() -> None:
    """page retirement is not Hopper's: its threshold is not asked for, the check SKIPs."""
    profile = resolve_profile("xe9680-h100")
    assert not has_feature(profile.data, Feature.PAGE_RETIREMENT)
    assert Key.RETIRED_PAGES_MAX not in required_keys(profile.data, "quick")
    retired = next(c for c in DECLARED if c.name == "retired_pages")
    assert not retired.applies(profile.data, Level.QUICK)
    require_thresholds(_without(profile, Key.RETIRED_PAGES_MAX), "acceptance", ALL_GROUPS)


def test_health_refuses_a_profile_without_a_key_its_checks_need(tmp_path: Path) -> None:
    """Exit 2 before anything is measured, naming the file and the key (it was a SKIP)."""
    data = copy.deepcopy(resolve_profile("sim-h100-hgx").data)
    del data["thresholds"]["gpu_temp_idle_max_c"]
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(data))
    result = run_cli("health", "--profile", str(path), "--checks", "gpu",
                     "--report-dir", str(tmp_path / "r"), "--textfile-dir", str(tmp_path / "t"),
                     env={"NODEGATE_LOCK_FILE": str(tmp_path / "lock")})
    assert result.returncode == 2, result.stderr
    assert "gpu_temp_idle_max_c" in result.stderr and str(path) in result.stderr
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())
