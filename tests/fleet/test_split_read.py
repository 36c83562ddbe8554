"""A first read of many summaries is split over two processes: the forked child's part gives
the same entries, the same view and the same cache as one process reading them all; a child
that does not deliver its whole part fails the read (exit 3), never a partial view."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from nodegate import cli
from nodegate.errors import CannotRunError, ExitCode
from nodegate.fleet import read
from nodegate.fleet.aggregate import FleetView, aggregate
from nodegate.report import fleet_summary


def _facts(view: FleetView) -> tuple[Any, ...]:
    """Everything the view says (NodeView/MetricView compare by value, summaries included)."""
    return (view.nodes, view.metrics, sorted(view.unreadable), view.full_reads, view.points)


@pytest.fixture
def splits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Split every read of 2 summaries or more; the sizes of the children's parts, as split."""
    monkeypatch.setattr(read, "SPLIT_MIN", 2)
    sizes: list[int] = []
    original = read._split

    def counting(mine: Sequence[read.ToRead], theirs: Sequence[read.ToRead]) -> read.Entries:
        sizes.append(len(theirs))
        return original(mine, theirs)

    monkeypatch.setattr(read, "_split", counting)
    return sizes


def test_the_split_read_gives_the_view_of_one_process(fleet_dir: Path, tmp_path: Path,
                                                      splits: list[int]) -> None:
    single = aggregate(fleet_dir, cache=False, jobs=1)  # one process: no split
    assert splits == []
    split = aggregate(fleet_dir, cache=False)
    assert splits == [12 - int(12 * read.SPLIT_SHARE)]  # 12 summaries; the child 5 of them
    assert _facts(split) == _facts(single)
    # with a cache: the first run splits and writes it, the rerun reads it alone
    cache = tmp_path / "fleet.marshal"
    cold = aggregate(fleet_dir, cache=cache)
    assert len(splits) == 2 and _facts(cold) == _facts(single)
    assert read.SummaryCache(cache).load().keys() == {
        item["path"] for node in single.nodes for item in node.history}
    warm = aggregate(fleet_dir, cache=cache)
    assert len(splits) == 2 and _facts(warm) == _facts(single)


def test_below_its_threshold_or_with_other_threads_nothing_is_forked(
        fleet_dir: Path, monkeypatch: pytest.MonkeyPatch, splits: list[int]) -> None:
    monkeypatch.setattr(read, "SPLIT_MIN", 13)
    aggregate(fleet_dir, cache=False)
    monkeypatch.setattr(read, "SPLIT_MIN", 2)
    monkeypatch.setattr(read, "_can_fork", lambda: False)
    aggregate(fleet_dir, cache=False)
    assert splits == []


def test_on_one_cpu_nothing_is_forked(fleet_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                      splits: list[int]) -> None:
    """A second process on the same single CPU only adds the fork's and the pipe's cost."""
    expected = _facts(aggregate(fleet_dir, cache=False, jobs=1))
    monkeypatch.setattr(read, "_cpus", lambda: 1)
    assert _facts(aggregate(fleet_dir, cache=False)) == expected
    assert splits == []
    monkeypatch.setattr(read, "_cpus", lambda: 2)
    aggregate(fleet_dir, cache=False)
    assert len(splits) == 1


def test_a_long_history_is_read_in_one_process_as_it_streams(
        fleet_dir: Path, monkeypatch: pytest.MonkeyPatch, splits: list[int]) -> None:
    """Beyond ``CACHE_MAX_FILES`` each entry goes to the history as it is read (which drops
    older reports' metrics): no split, which would hold its part's entries whole."""
    expected = _facts(aggregate(fleet_dir, cache=False, jobs=1))
    monkeypatch.setattr(read, "CACHE_MAX_FILES", 11)
    assert _facts(aggregate(fleet_dir, cache=False)) == expected
    assert splits == []


def _child_that(action: Callable[[int], None]) -> Callable[[int, int, Sequence[Any]], None]:
    """A stand-in for ``read._child`` that does ``action(write end)`` and never returns into
    pytest's code."""

    def child(rfd: int, wfd: int, items: Sequence[Any]) -> None:
        try:
            os.close(rfd)
            action(wfd)
        finally:
            os._exit(0)

    return child


def _killed(wfd: int) -> None:
    os.write(wfd, b"\0" * 12)  # part of a header and body, then gone
    os.kill(os.getpid(), signal.SIGKILL)


def _short(wfd: int) -> None:
    """Says 1000 bytes follow, sends 10, exits 0."""
    os.write(wfd, (1000).to_bytes(8, "big") + b"x" * 10)


def _failed(wfd: int) -> None:
    os._exit(1)


@pytest.mark.parametrize("case", [
    (_killed, "was killed by signal 9"),
    (_short, "exited 0"),
    (_failed, "exited 1"),
])
@pytest.mark.usefixtures("splits")
def test_a_child_that_does_not_deliver_fails_the_read(
        fleet_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        case: tuple[Callable[[int], None], str]) -> None:
    action, said = case
    monkeypatch.setattr(read, "_child", _child_that(action))
    with pytest.raises(CannotRunError, match=f"{said} before it delivered") as caught:
        aggregate(fleet_dir, cache=False)
    assert caught.value.exit_code == ExitCode.CANNOT_RUN
    assert int(ExitCode.CANNOT_RUN) == 3
    assert "no partial view" in caught.value.message
    # the command: exit 3 and the reason, no view printed
    assert cli.main(["report", str(fleet_dir), "--no-cache"]) == 3
    out, err = capsys.readouterr()
    assert "no partial view" in err and "NODE" not in out


def test_the_child_entries_are_the_ones_one_process_makes(fleet_dir: Path,
                                                          splits: list[int]) -> None:
    top = os.path.join(str(fleet_dir), "")
    items = [(rel, size, fleet_summary.name_for(top + rel))
             for rel, size, beside in read.scan(fleet_dir) if beside and size >= 0]
    split = read.read_entries(items)
    assert len(splits) == 1
    single = read.read_entries(items, split=False)
    assert split.made == single.made and len(single.made) == 12
    assert list(split.made) == list(single.made)  # path order
    assert [type(part) for part in split.parts] == [dict, bytes]
    assert single.parts == [single.made]
