"""Activate a simulated board for a process: the env contract and load marks.

``prepare`` turns a spec (``h100-hgx+nvlink-down@gpu3.link5`` or a scenario path) into a state
directory and the environment that makes pynvml load the simulator; the lab and ``nodegate sim
run`` both use it. ``set_load``/``clear_load`` append marks the library reads on every
telemetry call, so a load check in one process moves the temperature another process reads.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from nodegate.errors import ConfigError
from nodegate.sim import faults, scenario, state
from nodegate.sim.scenario import Board

ENV_SIM_DIR = "NODEGATE_SIM_DIR"
ENV_KERNEL_LOG = "NODEGATE_KERNEL_LOG"
ENV_BOOT_ID = "NODEGATE_BOOT_ID_FILE"
ENV_SYSFS_ROOT = "NODEGATE_SYSFS_ROOT"  # read by nodegate.probes.rdma


def split_spec(spec: str) -> tuple[str, list[str]]:
    """``scenario+fault@t+...`` -> (scenario, [fault tokens])."""
    head, *tokens = spec.split("+")
    if not head:
        raise ConfigError("empty scenario in spec", key=f"spec {spec}")
    for token in tokens:
        if not token:
            raise ConfigError("empty fault in spec (double '+')", key=f"spec {spec}")
    return head, tokens


def power_cycled(spec: str) -> str:
    """The spec a board comes back with after its power was removed: the faults that live
    only while it is powered (``Fault.clears_on_power_cycle``) dropped, the rest kept."""
    head, tokens = split_spec(spec)
    kept = [t for t in tokens if not faults.parse(t)[0].clears_on_power_cycle]
    return "+".join([head, *kept])


def resolve_spec(spec: str) -> Board:
    """Load the scenario and apply every fault in the spec, in order."""
    head, tokens = split_spec(spec)
    board = scenario.load(head)
    for token in tokens:
        faults.apply(board, token)
    board["spec"] = spec
    return board


def prepare(spec: str, state_dir: Path) -> dict[str, str]:
    """Build the library if needed, write the board into ``state_dir``, return env vars to set.

    ``LD_LIBRARY_PATH`` has the library directory prepended to the caller's current value;
    with the ``nvml-missing`` fault it is left out (and taken out of the current value), so
    the process finds no libnvidia-ml.so.1 unless the machine has a real one installed.
    """
    from nodegate.sim.build import ensure_built

    board = resolve_spec(spec)
    lib_dir = ensure_built()
    paths = state.write(board, Path(state_dir))
    current = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    if board.get("nvml_missing"):
        path = [p for p in current if Path(p).resolve() != lib_dir.resolve()]
    else:
        path = [str(lib_dir), *current]
    return {
        "LD_LIBRARY_PATH": os.pathsep.join(path),
        ENV_SIM_DIR: str(Path(state_dir).resolve()),
        ENV_KERNEL_LOG: str(paths["kernel_log"].resolve()),
        ENV_BOOT_ID: str(paths["boot_id"].resolve()),
        ENV_SYSFS_ROOT: str(paths["sysfs"].resolve()),
    }


def _load_file(index: int) -> Path | None:
    sim_dir = os.environ.get(ENV_SIM_DIR)
    if not sim_dir:
        return None
    if index < 0:
        raise ValueError(f"GPU index must be >= 0, not {index}")
    load_dir = Path(sim_dir) / "load"
    load_dir.mkdir(parents=True, exist_ok=True)
    return load_dir / str(index)


def set_load(index: int, utilization_pct: int) -> None:
    """Mark GPU ``index`` (NVML numbering) busy at ``utilization_pct``; no-op off the simulator."""
    if not 0 <= utilization_pct <= 100:
        raise ValueError(f"utilization must be 0..100, not {utilization_pct}")
    path = _load_file(index)
    if path is None:
        return
    # One short line per append: O_APPEND keeps concurrent writers from interleaving.
    with path.open("a") as fh:
        fh.write(f"{time.time():.6f} {int(utilization_pct)}\n")


def clear_load(index: int) -> None:
    """End the load on GPU ``index``: telemetry relaxes back toward idle."""
    set_load(index, 0)
