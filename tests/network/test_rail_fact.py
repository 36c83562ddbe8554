"""The nccl role's rail read (``facts.rdma.RdmaRails``): its real shell command over the
simulator's XE9680-style sysfs tree, and the pairing that renders ``NCCL_IB_HCA``."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from nodegate.facts.rdma import RdmaRails, rails
from nodegate.sim.runtime import resolve_spec
from nodegate.sim.sysfs import write_tree


def read(spec: str, tmp_path: Path) -> dict:  # type: ignore[type-arg]
    root = write_tree(resolve_spec(spec), tmp_path / "sysfs")
    fact = RdmaRails()
    out = subprocess.run(["sh", "-c", fact.command()], capture_output=True, text=True,
                         env={**os.environ, "NODEGATE_SYSFS_ROOT": str(root)}, check=True)
    return fact.process(out.stdout.splitlines())


def test_healthy_board_gives_eight_rails_in_gpu_order(tmp_path: Path) -> None:
    fact = read("h100-hgx", tmp_path)
    assert len(fact["gpus"]) == 8 and len(fact["hcas"]) == 8
    assert fact["hcas"]["mlx5_0"]["ports"] == {"1": "InfiniBand"}
    got = rails(fact, ["mlx5_*"])
    assert got.hca_ports == [f"mlx5_{i}:1" for i in range(8)] and got.unpaired == []


def test_a_nic_off_the_gpus_switch_is_not_a_rail_and_a_removed_one_is_gone(
        tmp_path: Path) -> None:
    got = rails(read("h100-hgx+nic-switch@nic5+rail-missing@nic2", tmp_path / "a"))
    assert "mlx5_5:1" not in got.hca_ports and got.unpaired == ["mlx5_5"]
    assert "mlx5_2:1" not in got.hca_ports and len(got.hca_ports) == 6


def test_the_profile_globs_limit_the_rails(tmp_path: Path) -> None:
    fact = read("h100-hgx", tmp_path)
    assert rails(fact, ["mlx5_[0-3]"]).hca_ports == [f"mlx5_{i}:1" for i in range(4)]


def test_no_tree_reads_as_no_rails(tmp_path: Path) -> None:
    fact = RdmaRails()
    out = subprocess.run(["sh", "-c", fact.command()], capture_output=True, text=True,
                         env={**os.environ, "NODEGATE_SYSFS_ROOT": str(tmp_path / "none")},
                         check=True)
    assert fact.process(out.stdout.splitlines()) == {"gpus": [], "hcas": {}}
    assert rails(fact.default()).hca_ports == []
