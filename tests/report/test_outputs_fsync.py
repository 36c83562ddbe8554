"""A run's report files are each fsynced before their rename (a latest name is a link to a
dated file fsynced before its own rename), and every rename into the report folder is
persisted by a folder fsync after the last of them."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from nodegate.report import NodeReport
from nodegate.report.outputs import write_outputs


def test_every_file_and_every_rename_is_persisted(
        report: NodeReport, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[tuple[str, str]] = []
    inodes: dict[int, int] = {}  # rename event -> the inode renamed
    fsync, replace = os.fsync, os.replace

    def logged_fsync(fd: int) -> None:
        kind = "dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"
        events.append((f"fsync-{kind}", os.readlink(f"/proc/self/fd/{fd}")))
        fsync(fd)

    def logged_replace(src: str, dst: str | os.PathLike[str]) -> None:
        inodes[len(events)] = os.stat(src).st_ino
        events.append(("rename", str(dst)))
        replace(src, dst)

    monkeypatch.setattr(os, "fsync", logged_fsync)
    monkeypatch.setattr(os, "replace", logged_replace)
    reports, textfiles = tmp_path / "r", tmp_path / "t"
    written = write_outputs(report, report_dir=reports, textfile_dir=textfiles)

    renames = [(i, dst) for i, (what, dst) in enumerate(events) if what == "rename"]
    assert {Path(dst).name for _, dst in renames} >= {
        written.json.name, written.latest.name, "acceptance-latest.xml", "nodegate_acceptance.prom"}
    synced: set[int] = set()  # inodes whose data was on disk before their first rename
    for index, dst in renames:
        if events[index - 1][0] == "fsync-file":  # the data is on disk before the rename
            synced.add(inodes[index])
        else:  # or it is a second name of a file that was (a latest link)
            assert inodes[index] in synced, dst
            assert Path(dst).name.startswith("acceptance-latest"), dst
        folder = str(Path(dst).parent)
        assert ("fsync-dir", folder) in events[index + 1:], dst
    # the sequence counter (``.sequence``) is persisted, folder included, before the report
    # is numbered; after it, one folder fsync covers the report folder's five renames
    counter = next(i for i, (what, dst) in enumerate(events)
                   if what == "rename" and Path(dst).name == ".sequence")
    dir_syncs = [path for what, path in events[counter + 1:] if what == "fsync-dir"]
    assert dir_syncs.count(str(reports)) == 2  # the counter's own, then the five renames'
    assert [what for what, _ in events[counter + 1:]].count("rename") >= 5
