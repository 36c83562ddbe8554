"""``nodegate.__version__`` read from the dist-info without importlib.metadata, and the same
answer importlib.metadata gives wherever the fast path answers at all."""

from __future__ import annotations

import importlib.metadata
import sys
import zipfile
from pathlib import Path

import nodegate


def _dist(folder: Path, name: str, version: str | None) -> None:
    info = folder / name
    info.mkdir(parents=True)
    header = f"Version: {version}\n" if version is not None else ""
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: nodegate\n{header}\nVersion: 9\n")


def test_the_fast_path_agrees_with_importlib_metadata_here() -> None:
    found = nodegate._dist_info_version(sys.path)
    if found is not None:
        assert found == importlib.metadata.version("nodegate")


def test_the_first_dist_info_on_the_path_wins(tmp_path: Path) -> None:
    _dist(tmp_path / "a", "Nodegate-0.1.0+src.abc.dist-info", "0.1.0+src.abc")
    _dist(tmp_path / "b", "nodegate-0.2.0.dist-info", "0.2.0")
    (tmp_path / "a" / "nodegate_lab-0.1.0.dist-info").mkdir()  # another distribution
    entries = [str(tmp_path / "missing"), str(tmp_path / "a"), str(tmp_path / "b")]
    assert nodegate._dist_info_version(entries) == "0.1.0+src.abc"
    assert nodegate._dist_info_version(entries[2:]) == "0.2.0"
    assert nodegate._dist_info_version([str(tmp_path / "missing")]) is None


def test_anything_less_plain_is_left_to_importlib_metadata(tmp_path: Path) -> None:
    _dist(tmp_path / "egg", "nodegate.egg-info", "0.3.0")
    _dist(tmp_path / "two", "nodegate-0.1.dist-info", "0.1")
    _dist(tmp_path / "two", "nodegate-0.2.dist-info", "0.2")
    _dist(tmp_path / "blank", "nodegate-0.4.dist-info", None)  # Version only after the headers
    with zipfile.ZipFile(tmp_path / "dist.zip", "w") as archive:
        archive.writestr("nodegate-0.5.dist-info/METADATA", "Version: 0.5\n")
    for folder in ("egg", "two", "blank", "dist.zip"):
        assert nodegate._dist_info_version([str(tmp_path / folder)]) is None, folder
