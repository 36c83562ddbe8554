"""Cards in the fleet view: which physical GPU failed, and a slot whose serial changed between
two of a node's reports shown as swapped."""

from __future__ import annotations

import copy
import datetime as dt
import json
import os
from pathlib import Path

from nodegate.fleet.aggregate import aggregate
from nodegate.fleet.html import render_html
from nodegate.fleet.read import from_report_file, summaries
from nodegate.fleet.render import render_text, to_data
from nodegate.report.fleet_summary import write_report
from nodegate_lab.synthetic_fleet import synthetic_gpus, synthetic_report
from tests.conftest import run_cli

T0 = dt.datetime(2024, 5, 14, 3, 0, tzinfo=dt.timezone.utc)
NEW_SERIAL = "1654900000042"


def _write_history(root: Path) -> dict[str, dict[str, str]]:
    """hgx7: a report from before identities, two with the original cards, then gpu3 replaced
    (and its link still down, so the new card is the failing one)."""
    before = synthetic_gpus("hgx7")
    after = copy.deepcopy(before)
    after["gpu3"]["serial"] = NEW_SERIAL
    after["gpu3"]["uuid"] = "GPU-00000000-0000-0000-0000-000000000042"
    runs = [({}, T0), (before, T0 + dt.timedelta(days=1)), ({}, T0 + dt.timedelta(days=2)),
            (after, T0 + dt.timedelta(days=3))]
    for index, (gpus, start) in enumerate(runs):
        report = synthetic_report("hgx7", level="quick", started_at=start, seed=index,
                                  faults=("nvlink-down@gpu3.link5",), gpus=gpus)
        write_report(report, root / "hgx7" / f"quick-{index}.json")
    # hgx8 as an older nodegate wrote it: no summaries, so the fleet is read both ways
    healthy = synthetic_report("hgx8", level="quick", started_at=T0)
    healthy.write(root / "hgx8" / "quick-0.json")
    again = synthetic_report("hgx8", level="quick", started_at=T0 + dt.timedelta(days=1))
    again.write(root / "hgx8" / "quick-1.json")
    return before


def test_swapped_card_is_detected_across_reports(tmp_path: Path) -> None:
    before = _write_history(tmp_path)
    view = aggregate(tmp_path)
    assert view.full_reads == 2  # hgx8's
    nodes = {node.node: node for node in view.nodes}
    swaps = nodes["hgx7"].swaps()
    assert [(s.entity, s.field, s.before, s.after) for s in swaps] == [
        ("gpu3", "serial", before["gpu3"]["serial"], NEW_SERIAL)]
    assert swaps[0].slot == "00000000:5D:00.0"
    assert swaps[0].report == os.path.join("hgx7", "quick-3.json")
    assert nodes["hgx8"].swaps() == []  # same cards twice: nothing swapped
    text = render_text(view)
    assert f"hgx7 gpu3 swapped: serial {before['gpu3']['serial']} -> {NEW_SERIAL}" in text
    assert "quick FAIL [swapped gpu3]" in text
    data = {n["node"]: n for n in to_data(view)["nodes"]}
    assert data["hgx7"]["swaps"][0]["after"] == NEW_SERIAL
    assert data["hgx7"]["gpus"]["gpu3"]["serial"] == NEW_SERIAL
    assert "swapped" in render_html(view)


def test_failing_check_names_the_physical_card(tmp_path: Path) -> None:
    _write_history(tmp_path)
    view = aggregate(tmp_path)
    node = next(n for n in view.nodes if n.node == "hgx7")
    [(entity, identity, items)] = node.failing_cards()
    assert entity == "gpu3" and identity["serial"] == NEW_SERIAL
    assert items == ["nvlink_state[gpu3.link5]"]
    assert f"hgx7 gpu3 (serial {NEW_SERIAL}, uuid GPU-00000000" in render_text(view)
    assert to_data(view)["nodes"][0]["failing_cards"][0]["serial"] == NEW_SERIAL


def test_index_shift_is_not_a_swap(tmp_path: Path) -> None:
    """A card that drops off the bus shifts NVML's indices: slots are PCI bus ids, so the
    cards behind the shifted entities are the same and none is swapped."""
    gpus = synthetic_gpus("hgx9")
    shifted = {f"gpu{i}": gpus[f"gpu{i + 1 if i >= 2 else i}"] for i in range(7)}
    for index, ids in enumerate((gpus, shifted)):
        synthetic_report("hgx9", level="quick", started_at=T0 + dt.timedelta(hours=index),
                         gpus=ids).write(tmp_path / f"q{index}.json")
    assert aggregate(tmp_path).nodes[0].swaps() == []


def test_identities_come_from_the_summary(tmp_path: Path) -> None:
    report = synthetic_report("hgx7", level="standard", started_at=T0)
    path = write_report(report, tmp_path / "r.json")
    (entry,), full_reads = summaries(tmp_path)
    assert full_reads == 0  # from the summary beside the report
    assert entry["gpus"] == json.loads(path.read_bytes())["gpus"] == synthetic_gpus("hgx7")
    assert entry == from_report_file(path, "r.json")


def test_cli_json_shows_the_swap(tmp_path: Path) -> None:
    _write_history(tmp_path)
    result = run_cli("report", str(tmp_path), "--json", "--no-cache")
    assert result.returncode == 1, result.stderr  # hgx7 fails
    nodes = {n["node"]: n for n in json.loads(result.stdout)["nodes"]}
    assert [s["entity"] for s in nodes["hgx7"]["swaps"]] == ["gpu3"]


def test_a_hosts_reports_under_two_names_are_one_node(tmp_path: Path) -> None:
    """gpu-b01's reports from before the agent passed its Slurm name are named after its
    host name; later ones carry ``node: gpu-b01`` and ``labels.host``. One machine id, one
    host name: one node in the fleet view. A second machine under the same Slurm name with
    another host name stays apart."""
    import dataclasses

    machine = "0123456789abcdef0123456789abcdef"
    fqdn = "gpu-b01.dc1.example.net"
    old = dataclasses.replace(
        synthetic_report(fqdn, level="quick", started_at=T0, seed=1), machine_id=machine)
    new = synthetic_report("gpu-b01", level="quick", started_at=T0 + dt.timedelta(days=1),
                           seed=2, faults=("nvlink-down@gpu3.link5",))
    new = dataclasses.replace(new, machine_id=machine,
                              labels={**new.labels, "host": fqdn, "slurm_node": "gpu-b01"})
    other = dataclasses.replace(
        synthetic_report("gpu-b02.dc1.example.net", level="quick", started_at=T0, seed=3),
        machine_id=machine)  # a cloned machine id, another host: not joined
    write_report(old, tmp_path / "a" / "quick-0.json")
    write_report(new, tmp_path / "a" / "quick-1.json")
    write_report(other, tmp_path / "b" / "quick-0.json")
    view = aggregate(tmp_path)
    nodes = {node.node: node for node in view.nodes}
    assert sorted(nodes) == ["gpu-b01", "gpu-b02.dc1.example.net"]
    assert len(nodes["gpu-b01"].history) == 2
    assert nodes["gpu-b01"].verdict == "FAIL"
