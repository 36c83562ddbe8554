"""The network group of the quick level: read the rails from sysfs, map them to the GPUs,
judge, and leave the map where jobs can read it (``<report dir>/rail-map.json``)."""

from __future__ import annotations

import json
from pathlib import Path

from nodegate.errors import ConfigError
from nodegate.probes.nvml import BoardSnapshot, normalize_bus_id
from nodegate.profiles import Profile
from nodegate.results import CheckResult


def run_network(profile: Profile, board: BoardSnapshot | None, *, sysfs_root: Path | None,
                report_dir: Path | None, nvml_down: str | None) -> list[CheckResult]:
    from nodegate.judge.network import judge_network, rails_spec, select_rails
    from nodegate.probes import rail_map
    from nodegate.probes.rdma import RdmaSnapshot, default_sysfs_root, read_rdma

    spec = rails_spec(profile)
    if spec is None:  # one SKIP saying so; nothing is read
        return judge_network(RdmaSnapshot("", []), None, profile)
    root = sysfs_root or default_sysfs_root()
    snapshot = read_rdma(root)
    gpu_problem = None
    found = None
    if board is None:
        gpu_problem = f"no GPU bus ids: NVML did not answer ({nvml_down or 'not read'})"
    else:
        ids = [(g.entity, f"{normalize_bus_id(g.bus_id)}.0") for g in board.gpus if g.bus_id]
        if len(ids) < len(board.gpus):
            gpu_problem = "NVML gave no bus id for " + \
                ", ".join(g.entity for g in board.gpus if not g.bus_id)
        found = rail_map.build(root, ids, select_rails(snapshot, spec))
        if report_dir is not None:
            _write_map(report_dir, found.to_json())
    return judge_network(snapshot, found, profile, gpu_problem=gpu_problem)


def _write_map(report_dir: Path, data: dict[str, object]) -> None:
    from nodegate.probes.rail_map import MAP_FILE
    from nodegate.report._atomic import atomic_write_text

    try:  # the folder passed preflight; the report set itself is written after this
        report_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(report_dir / MAP_FILE, json.dumps(data, indent=1) + "\n")
    except (OSError, ConfigError):
        pass  # the report writer names the folder's problem and exits 2
