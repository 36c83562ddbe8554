"""A lab node's board boots the driver its root has installed (nodegate_lab.driver_boot)."""

from __future__ import annotations

from pathlib import Path

from nodegate.sim import state
from nodegate.sim.runtime import resolve_spec
from nodegate_lab import driver_boot


def _board(tmp_path: Path) -> Path:
    board_dir = tmp_path / "board"
    state.write(resolve_spec("h100-hgx"), board_dir)
    return board_dir


def test_the_board_follows_the_installed_driver_and_its_cuda(tmp_path: Path) -> None:
    board_dir = _board(tmp_path)
    root = tmp_path / "root"
    (root / "usr/share/nodegate-lab").mkdir(parents=True)
    (root / driver_boot.VERSION_FILE).write_text("580.65.06\n")
    assert driver_boot.follow_installed(root, board_dir) == "580.65.06"
    lines = (board_dir / "state").read_text().splitlines()
    assert "driver=580.65.06" in lines
    assert "cuda=13000" in lines and "nvml=13.580.65.06" in lines
    assert "Kernel Module for x86_64  580.65.06  Release" in (board_dir / "kernel.log").read_text()


def test_nothing_installed_keeps_the_scenarios_driver(tmp_path: Path) -> None:
    board_dir = _board(tmp_path)
    before = (board_dir / "state").read_text()
    assert driver_boot.follow_installed(tmp_path / "empty-root", board_dir) is None
    assert (board_dir / "state").read_text() == before
    assert "driver=570.133.20" in before.splitlines()
