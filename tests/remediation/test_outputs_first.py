"""``nodegate remediate`` checks every folder it writes before it acts:
a full ``--bundle-dir`` or a ``--textfile-dir`` that is a file is exit 2 naming the option,
found before any report is read, state written or Slurm asked."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.remediation.helpers import make_report, xid_result


def _reports(tmp_path: Path) -> Path:
    folder = tmp_path / "reports"
    folder.mkdir()
    make_report(xid_result("gpu3", 48, "reset_gpu")).write(folder / "quick-latest.json")
    return folder


def _remediate(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_cli("remediate", "--report-dir", str(_reports(tmp_path)), "--state-dir",
                   str(tmp_path / "state"), "--profile", "sim-h100-hgx", "--node",
                   "gpu-node-01", *extra)


@pytest.fixture
def full_folder(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs, filled: a disk with no room for a bundle."""
    mount = tmp_path / "full"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)],
            capture_output=True, check=False).returncode != 0:
        pytest.skip("needs root to mount a small tmpfs")
    try:
        with contextlib.suppress(OSError), (mount / "filler").open("wb") as out:
            while True:
                out.write(b"x" * 4096)
                out.flush()
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_a_full_bundle_dir_is_exit_2_before_anything_is_done(
        tmp_path: Path, full_folder: Path) -> None:
    proc = _remediate(tmp_path, "--bundle-dir", str(full_folder), "--enable")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--bundle-dir" in proc.stderr and str(full_folder) in proc.stderr
    assert not (tmp_path / "state" / "remediation.json").exists()


@pytest.mark.parametrize("option", ["--bundle-dir", "--textfile-dir"])
def test_a_file_where_a_folder_belongs_is_exit_2_naming_the_option(
        tmp_path: Path, option: str) -> None:
    where = tmp_path / "a-file"
    where.write_text("an operator's file\n")
    proc = _remediate(tmp_path, option, str(where))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"key {option}" in proc.stderr and str(where) in proc.stderr
    assert "nodegate remediate: gpu-node-01" not in proc.stdout  # no step was taken
    assert where.read_text() == "an operator's file\n"
