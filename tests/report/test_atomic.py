"""The atomic writer replaces only a regular file: a rename replaces whatever has the name
(a ``--html /dev/full`` once replaced the device node with a page), and a write through a
symbolic link lands wherever the link points, so a link is refused too."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from nodegate.errors import ConfigError
from nodegate.report._atomic import atomic_write_text, preflight_file


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _socket(path: Path) -> None:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.close()


def _dir(path: Path) -> None:
    path.mkdir()


def _link_to_fifo(path: Path) -> None:
    os.mkfifo(path.with_name("fifo"))
    os.symlink("fifo", path)


def _broken_link(path: Path) -> None:
    os.symlink("nothing-here", path)


@pytest.mark.parametrize(("make", "words"), [
    (_fifo, "not a regular file"),
    (_socket, "not a regular file"),
    (_dir, "is a directory"),
    (_link_to_fifo, "a symbolic link"),
    (_broken_link, "a symbolic link"),
])
def test_only_a_regular_file_is_replaced(tmp_path: Path, make: Callable[[Path], None],
                                         words: str) -> None:
    target = tmp_path / "out.prom"
    make(target)
    before = os.lstat(target)
    for preflight in (False, True):
        with pytest.raises(ConfigError, match=words) as caught:
            if preflight:
                preflight_file(target)
            else:
                atomic_write_text(target, "x\n")
        assert caught.value.file == str(target)
        after = os.lstat(target)
        assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_a_link_to_a_regular_file_is_refused_and_the_file_kept(tmp_path: Path) -> None:
    (tmp_path / "real.html").write_text("old\n")
    os.symlink("real.html", tmp_path / "link.html")
    with pytest.raises(ConfigError, match="symbolic link") as caught:
        atomic_write_text(tmp_path / "link.html", "new\n", make_parents=False)
    assert caught.value.file == str(tmp_path / "link.html")
    assert (tmp_path / "link.html").is_symlink()
    assert (tmp_path / "real.html").read_text() == "old\n"


def test_a_link_to_a_device_is_refused(tmp_path: Path) -> None:
    os.symlink("/dev/null", tmp_path / "out.prom")
    with pytest.raises(ConfigError, match="symbolic link"):
        atomic_write_text(tmp_path / "out.prom", "x\n")
    assert os.readlink(tmp_path / "out.prom") == "/dev/null"


def test_missing_folders_are_created_only_when_asked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist") as caught:
        atomic_write_text(tmp_path / "a" / "b.html", "x\n", make_parents=False)
    assert caught.value.file == str(tmp_path / "a" / "b.html")
    with pytest.raises(ConfigError, match="does not exist"):
        preflight_file(tmp_path / "a" / "b.html")
    assert not (tmp_path / "a").exists()
    atomic_write_text(tmp_path / "a" / "b.json", "{}\n")  # a report writer makes its folder
    assert (tmp_path / "a" / "b.json").read_text() == "{}\n"


def test_preflight_leaves_nothing(tmp_path: Path) -> None:
    assert preflight_file(tmp_path / "page.html") == tmp_path / "page.html"
    assert list(tmp_path.iterdir()) == []
