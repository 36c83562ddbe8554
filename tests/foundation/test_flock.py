"""nodegate.flock, the one exclusive lock behind the battery's, the lab's and the VM's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nodegate import flock
from nodegate.errors import CannotRunError, ExitCode


def _busy(pid: str) -> str:
    return f"held by pid {pid}"


def test_a_second_holder_is_refused_naming_the_first(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    with flock.exclusive(path, busy=_busy):
        assert path.read_text() == f"{os.getpid()}\n"
        with pytest.raises(CannotRunError, match=f"held by pid {os.getpid()}$"), \
                flock.exclusive(path, busy=_busy):
            pass
    assert path.read_text() == ""  # released and emptied
    with flock.exclusive(path, busy=_busy):  # free again
        pass


def test_a_waiting_caller_is_told_once_then_times_out(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    told: list[bool] = []
    with flock.exclusive(path, busy=_busy), pytest.raises(flock.LockHeldError) as info, \
            flock.exclusive(path, busy=_busy, wait_s=0.3, poll_s=0.05,
                            on_wait=lambda: told.append(True)):
        pass
    assert told == [True]
    # busy, not broken: its own class (a caller may skip on it), still exit 3
    assert info.value.holder == str(os.getpid())
    assert info.value.exit_code == ExitCode.CANNOT_RUN


def test_an_uncreatable_lock_names_what_and_the_path(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(CannotRunError, match=r"cannot create the VM lock .*file/x\.lock: .*hint") \
            as info, flock.exclusive(blocker / "x.lock", busy=_busy, what="VM lock", hint=" hint"):
        pass
    assert not isinstance(info.value, flock.LockHeldError)  # a broken path is not "busy"
