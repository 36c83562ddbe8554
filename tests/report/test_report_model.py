"""The JSON report: build, schema, atomic write, load with errors that name file and key."""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nodegate.errors import ConfigError, ExitCode
from nodegate.report import SCHEMA_ID, Level, NodeReport, build, exit_code_for, load, validate
from nodegate.report import model as report_model
from nodegate.results import CheckResult, Severity, Verdict


def _write_raw(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "report.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_build_derives_verdict_counts_and_metadata(report: NodeReport) -> None:
    data = report.to_dict()
    assert data["schema"] == SCHEMA_ID == "nodegate.report/1"
    assert data["verdict"] == "FAIL"
    assert data["counts"] == {
        "FAIL": 1,
        "ERROR": 1,
        "WARN": 1,
        "SKIP": 1,
        "PASS": 1 + 8 * 20 - 1 + 1,
    }
    assert sum(data["counts"].values()) == len(data["results"])
    assert data["started_at"] == "2024-05-14T03:15:00.000Z"
    assert data["finished_at"] == "2024-05-14T03:21:52.500Z"
    assert data["duration_s"] == 412.5
    assert data["level"] == "acceptance"
    assert data["backend"] == "cuda/nccl"
    assert data["report_id"].startswith("xe9680-a12-20240514T031500Z-")
    assert data["nodegate_version"]
    failing = [r for r in data["results"] if r["verdict"] == "FAIL"]
    assert failing[0]["entity"] == "gpu3.link5"
    assert failing[0]["severity"] == "hardware"
    validate(data)


def test_write_then_load_round_trips(report: NodeReport, tmp_path: Path) -> None:
    path = report.write(tmp_path / "reports" / f"{report.report_id}.json")
    loaded = load(path)
    assert loaded.to_dict() == report.to_dict()
    assert loaded.verdict is Verdict.FAIL
    assert loaded.level is Level.ACCEPTANCE
    assert loaded.matrices["p2p_bandwidth"]["values"][2][3] == 321.4
    assert loaded.series["telemetry"]["gpu7"]["power_w"][4] == [4.0, 654.0]


def test_shipped_schema_is_valid_draft_2020_12() -> None:
    from jsonschema import Draft202012Validator

    shipped = report_model.schema()
    Draft202012Validator.check_schema(shipped)
    assert shipped["properties"]["schema"]["const"] == SCHEMA_ID
    assert shipped["additionalProperties"] is False


def test_empty_report_is_valid_and_passes() -> None:
    empty = build(
        [],
        node="n1",
        profile="h200-single",
        level="quick",
        started_at=0.0,
        finished_at=1.0,
        backend="nvml",
    )
    validate(empty.to_dict())
    assert empty.verdict is Verdict.PASS
    assert exit_code_for(empty) is ExitCode.PASSED


def test_non_json_values_are_normalised() -> None:
    result = CheckResult(
        "power_draw",
        "gpu0",
        math.nan,
        {"max": math.inf},
        "W",
        Verdict.ERROR,
        Severity.CRITICAL,
        {"path": Path("/sys/x"), "tags": ("a", "b"), "verdict": Verdict.PASS},
    )
    rep = build(
        [result],
        node="n1",
        profile="p",
        level=Level.QUICK,
        started_at=0.0,
        finished_at=2.0,
        backend="nvml",
    )
    data = json.loads(rep.to_json())
    assert data["results"][0]["measured"] is None
    assert data["results"][0]["threshold"] == {"max": None}
    assert data["results"][0]["evidence"] == {
        "path": "/sys/x",
        "tags": ["a", "b"],
        "verdict": "PASS",
    }
    validate(data)


def test_naive_datetime_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        build(
            [],
            node="n",
            profile="p",
            level="quick",
            started_at=dt.datetime(2024, 1, 1),
            backend="nvml",
        )


@pytest.mark.parametrize(
    ("mutate", "key"),
    [
        (lambda d: d["results"][5].__setitem__("verdict", "BROKEN"), "$.results[5].verdict"),
        (lambda d: d["results"][0].__setitem__("colour", "red"), "$.results[0].colour"),
        (lambda d: d.pop("node"), "$.node"),
        (lambda d: d.__setitem__("level", "thorough"), "$.level"),
        (lambda d: d.__setitem__("started_at", "2024-05-14 03:15"), "$.started_at"),
        (lambda d: d.__setitem__("started_at", "2024-05-14T05:15:00+02:00"), "$.started_at"),
        (lambda d: d["results"][1].pop("severity"), "$.results[1].severity"),
        (
            lambda d: d["series"]["telemetry"]["gpu0"]["power_w"].append([1.0]),
            "$.series.telemetry.gpu0.power_w[5]",
        ),
        (
            lambda d: d["matrices"]["p2p_bandwidth"].__setitem__("values", [[1.0]]),
            "$.matrices.p2p_bandwidth.values",
        ),
        (
            lambda d: d["matrices"]["p2p_bandwidth"]["values"][1].pop(),
            "$.matrices.p2p_bandwidth.values[1]",
        ),
        (lambda d: d["counts"].__setitem__("FAIL", 0), "$.counts.FAIL"),
        (lambda d: d.__setitem__("schema", "nodegate.report/2"), "$.schema"),
        (lambda d: d.__setitem__("finished_at", "2024-05-14T03:00:00.000Z"), "$.finished_at"),
        # numbers and dates Python cannot hold: an OverflowError, not a report (exit 2)
        (lambda d: d["results"][0].__setitem__("measured", 10**400), "$.results[0].measured"),
        (lambda d: d["results"][2].__setitem__("measured", -(10**400)),
         "$.results[2].measured"),
        (lambda d: d.__setitem__("duration_s", 10**400), "$.duration_s"),
        (lambda d: d.__setitem__("started_at", "2024-13-45T00:00:00Z"), "$.started_at"),
    ],
)
def test_broken_report_names_file_and_key(
    report: NodeReport, tmp_path: Path, mutate: Any, key: str
) -> None:
    data = report.to_dict()
    mutate(data)
    path = _write_raw(tmp_path, data)
    with pytest.raises(ConfigError) as caught:
        load(path)
    assert caught.value.key == key
    assert caught.value.file == str(path)
    assert str(path) in str(caught.value) and key in str(caught.value)
    assert caught.value.exit_code is ExitCode.BAD_INPUT


def test_verdict_tampered_to_pass_is_caught(report: NodeReport, tmp_path: Path) -> None:
    data = report.to_dict()
    data["verdict"] = "PASS"
    with pytest.raises(ConfigError, match="disagrees") as caught:
        load(_write_raw(tmp_path, data))
    assert caught.value.key == "$.verdict"


def test_invalid_json_and_missing_file_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "half.json"
    path.write_text('{"schema": "nodegate.report/1", "res', encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid JSON") as caught:
        load(path)
    assert caught.value.file == str(path)
    with pytest.raises(ConfigError, match="not found"):
        load(tmp_path / "absent.json")


def test_json_nested_too_deeply_names_the_file(tmp_path: Path) -> None:
    """200,000 ``[`` make json.loads raise RecursionError: a file that cannot be read, exit 2,
    never an internal error."""
    path = tmp_path / "deep.json"
    path.write_text("[" * 200_000, encoding="utf-8")
    with pytest.raises(ConfigError, match="nested too deeply") as caught:
        load(path)
    assert caught.value.file == str(path)
    digits = tmp_path / "digits.json"
    digits.write_text("[" + "9" * 5000 + "]", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid JSON") as caught:
        load(digits)
    assert caught.value.file == str(digits) and len(caught.value.message) < 200


def test_a_timestamp_beyond_utc_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="out of range"):
        report_model.parse_timestamp("9999-12-31T23:59:59-14:00")
    with pytest.raises(ValueError, match="out of range"):
        report_model.parse_timestamp("0001-01-01T00:00:00+14:00")


def test_write_refuses_an_invalid_report(tmp_path: Path) -> None:
    bad = build(
        [],
        node="n",
        profile="p",
        level="quick",
        started_at=0.0,
        finished_at=1.0,
        backend="nvml",
        matrices={"p2p": {"unit": "GB/s", "entities": ["gpu0"], "values": [[1.0, 2.0]]}},
    )
    target = tmp_path / "r.json"
    with pytest.raises(ConfigError) as caught:
        bad.write(target)
    assert caught.value.key == "$.matrices.p2p.values[0]"
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []


def test_atomic_write_crash_keeps_old_file_and_leaves_no_temp(
    report: NodeReport, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "report.json"
    report.write(target)
    before = target.read_bytes()

    def crash(*_args: Any, **_kwargs: Any) -> None:
        raise OSError("power lost")

    monkeypatch.setattr(os, "replace", crash)
    # a write that fails is an error naming the file (exit 2), never a traceback
    with pytest.raises(ConfigError, match="cannot write: power lost"):
        report.write(target)
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]

    monkeypatch.setattr(os, "fsync", crash)  # crash while the temp file is half written
    with pytest.raises(ConfigError, match="power lost"):
        report.write(tmp_path / "new.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


def test_written_file_is_world_readable(report: NodeReport, tmp_path: Path) -> None:
    path = report.write(tmp_path / "r.json")
    assert path.stat().st_mode & 0o777 == 0o644


def test_import_is_light() -> None:
    code = (
        "import sys, nodegate.report; "
        "heavy = [m for m in ('jsonschema', 'prometheus_client', 'yaml') if m in sys.modules]; "
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("verdict", "code"),
    [
        (Verdict.PASS, ExitCode.PASSED),
        (Verdict.WARN, ExitCode.PASSED),
        (Verdict.SKIP, ExitCode.PASSED),
        (Verdict.FAIL, ExitCode.FAILED),
        (Verdict.ERROR, ExitCode.FAILED),
        ("WARN", ExitCode.PASSED),
    ],
)
def test_exit_code_per_verdict(verdict: Verdict | str, code: ExitCode) -> None:
    assert exit_code_for(verdict) is code


def test_exit_code_from_report_and_results(report: NodeReport, results: list[CheckResult]) -> None:
    assert exit_code_for(report) is ExitCode.FAILED
    only_warn = [r for r in results if r.verdict in (Verdict.PASS, Verdict.WARN, Verdict.SKIP)]
    assert exit_code_for(only_warn) is ExitCode.PASSED
    assert int(exit_code_for([])) == 0
