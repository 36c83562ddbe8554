"""Fleet evidence that cannot mislead: wall-clock steps, reports of nothing, two machines
under one name, values JSON does not have and verdicts that are not verdicts."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path

import pytest

from nodegate.fleet.aggregate import aggregate
from nodegate.report import NodeReport, build, to_json
from nodegate.report.fleet_summary import write_report
from nodegate_lab.synthetic_fleet import synthetic_report
from tests.conftest import run_cli

TODAY = dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=1)
FUTURE = dt.datetime(2099, 6, 1, tzinfo=dt.timezone.utc)


def _quick(node: str, started: dt.datetime, faults: tuple[str, ...] = (),
           **fields: object) -> NodeReport:
    report = synthetic_report(node, level="quick", started_at=started, faults=faults, seed=1)
    return dataclasses.replace(report, **fields)  # type: ignore[arg-type]


def _put(root: Path, rel: str, report: NodeReport, *, summary: bool = True) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if summary:
        write_report(report, path)
    else:
        path.write_text(to_json(report), encoding="utf-8")


@pytest.mark.parametrize("summary", [True, False], ids=["summaries", "reports"])
def test_an_old_future_dated_pass_does_not_hide_todays_fail(tmp_path: Path,
                                                            summary: bool) -> None:
    """Fails before this change: an older PASS dated 2099 (a clock step) was the node's
    "newest" quick report, so the fleet showed PASS over today's FAIL."""
    _put(tmp_path, "n1/quick-20990601T000000.000Z.json", _quick("n1", FUTURE),
         summary=summary)
    _put(tmp_path, "n1/quick-latest.json",
         _quick("n1", TODAY, ("nvlink-down@gpu3.link5",)), summary=summary)
    (n1,) = aggregate(tmp_path).nodes
    assert n1.verdict == "FAIL"
    assert any("nvlink_state[gpu3.link5]" in item for item in n1.failing()[0])


def test_the_sequence_orders_a_nodes_history(tmp_path: Path) -> None:
    _put(tmp_path, "n1/a.json", _quick("n1", FUTURE, sequence=7))
    _put(tmp_path, "n1/b.json", _quick("n1", TODAY, ("nvlink-down@gpu3.link5",),
                                       sequence=8))
    (n1,) = aggregate(tmp_path).nodes
    assert [s["path"] for s in n1.history] == ["n1/a.json", "n1/b.json"]
    assert n1.latest["verdict"] == "FAIL" and n1.verdict == "FAIL"


@pytest.mark.parametrize("strict", [False, True], ids=["summaries", "strict"])
def test_a_report_of_no_results_is_error(tmp_path: Path, strict: bool) -> None:
    """Fails before this change: a report of no results counted as PASS, with --strict too."""
    empty = build([], node="n1", profile="sim-h100-hgx", level="quick", started_at=TODAY,
                  backend="nvml")
    _put(tmp_path, "n1/quick-latest.json", empty)
    (n1,) = aggregate(tmp_path, strict=strict).nodes
    assert n1.verdict == "ERROR"
    assert any("no results" in item for item in n1.failing()[0])
    result = run_cli("report", str(tmp_path), *(["--strict"] if strict else []))
    assert result.returncode == 1, result.stdout + result.stderr


def test_two_machine_ids_under_one_name_are_error_naming_both(tmp_path: Path) -> None:
    """Fails before this change: two machines reporting as n1 showed as one node."""
    _put(tmp_path, "n1/a.json", _quick("n1", TODAY, machine_id="a" * 32, sequence=3))
    _put(tmp_path, "n1/b.json", _quick("n1", TODAY, machine_id="b" * 32, sequence=4))
    (n1,) = aggregate(tmp_path).nodes
    assert n1.verdict == "ERROR"
    shown = n1.failing()[0][0]
    assert "a" * 32 in shown and "b" * 32 in shown and "n1/a.json" in shown


def test_boots_that_interleave_by_sequence_are_two_machines(tmp_path: Path) -> None:
    for seq, boot in ((1, "boot-a"), (2, "boot-b"), (3, "boot-a")):
        _put(tmp_path, f"n1/q{seq}.json",
             _quick("n1", TODAY + dt.timedelta(minutes=seq), boot_id=boot, sequence=seq))
    (n1,) = aggregate(tmp_path).nodes
    assert n1.verdict == "ERROR"
    assert "boot-a" in n1.failing()[0][0] and "boot-b" in n1.failing()[0][0]


def test_one_sequence_number_twice_is_two_machines(tmp_path: Path) -> None:
    _put(tmp_path, "n1/a.json", _quick("n1", TODAY, sequence=5))
    _put(tmp_path, "n1/b.json", _quick("n1", TODAY + dt.timedelta(minutes=5), sequence=5))
    (n1,) = aggregate(tmp_path).nodes
    assert n1.verdict == "ERROR" and "sequence 5" in n1.failing()[0][0]


def test_one_machine_over_reboots_is_one_node(tmp_path: Path) -> None:
    for seq, boot in ((1, "boot-a"), (2, "boot-a"), (3, "boot-b"), (4, "boot-c")):
        _put(tmp_path, f"n1/q{seq}.json",
             _quick("n1", TODAY + dt.timedelta(minutes=seq), boot_id=boot, sequence=seq,
                    machine_id="c" * 32))
    (n1,) = aggregate(tmp_path).nodes
    assert n1.conflict is None and n1.verdict == "PASS"


def _tampered(tmp_path: Path, edit: str) -> Path:
    report = _quick("n1", TODAY)
    data = json.loads(to_json(report))
    del data["digest"]  # optional; without it nothing else disagrees with the edit
    if edit == "nan":
        data["results"][0]["measured"] = "__NAN__"
        text = json.dumps(data).replace('"__NAN__"', "NaN")
    else:
        data["verdict"] = data["verdict"].lower()  # the results keep theirs
        text = json.dumps(data)
    path = tmp_path / "n1" / "quick-latest.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(("edit", "words"), [("nan", "NaN"), ("lower", "verdict")])
@pytest.mark.parametrize("strict", [False, True], ids=["plain", "strict"])
def test_nan_and_lower_case_verdicts_are_unreadable(tmp_path: Path, edit: str,
                                                    words: str, strict: bool) -> None:
    """Fails before this change: a NaN measurement and a lower-case verdict were accepted."""
    _tampered(tmp_path, edit)
    view = aggregate(tmp_path, strict=strict)
    assert not view.nodes
    [(path, error)] = view.unreadable
    assert path == "n1/quick-latest.json" and words in error, error


def test_a_summary_with_a_lower_case_verdict_is_not_trusted(tmp_path: Path) -> None:
    """A summary whose verdict is not one is not trusted: the report is read instead."""
    _put(tmp_path, "n1/quick-latest.json",
         _quick("n1", TODAY, ("nvlink-down@gpu3.link5",)))
    summary_path = tmp_path / "n1" / "quick-latest.summary.json"
    summary = json.loads(summary_path.read_text(encoding="utf-8"))
    summary["verdict"] = "pass"
    summary_path.write_text(json.dumps(summary), encoding="utf-8")
    view = aggregate(tmp_path)
    (n1,) = view.nodes
    assert n1.verdict == "FAIL" and view.full_reads == 1
