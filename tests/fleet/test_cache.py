"""The summary cache: a re-run reuses the entries of unchanged summaries and reads again every
summary that was replaced, rewritten or whose report changed; a damaged cache is ignored; what
could not be read is looked at again on every run."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

import pytest

from nodegate.fleet import read
from nodegate.fleet.aggregate import FleetView, aggregate
from nodegate.report import fleet_summary
from nodegate.report.fleet_summary import write_report
from nodegate_lab.synthetic_fleet import synthetic_report

HGX0 = "rack0/hgx0/standard-20240514T0300Z.json"


def _facts(view: FleetView) -> tuple[Any, ...]:
    """Everything the view says (NodeView/MetricView compare by value, summaries included)."""
    return (view.nodes, view.metrics, sorted(view.unreadable), view.full_reads)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The summary files read from disk (not from the cache), as they are read."""
    seen: list[str] = []
    original = read._read_summary

    def counting(path: str) -> tuple[bytes, os.stat_result] | None:
        seen.append(path)
        return original(path)

    monkeypatch.setattr(read, "_read_summary", counting)
    return seen


def _host(view: FleetView, node: str) -> str:
    """The host of ``node``'s standard report (HGX0's folder)."""
    history = next(n for n in view.nodes if n.node == node).history
    return str(next(s for s in history if s["path"] == HGX0)["host"])


def _with_host(summary: Path, host: str) -> bytes:
    """The summary's bytes with another host of the same length (not checked against the
    report, so the entry shows which text was used)."""
    data = json.loads(summary.read_bytes())
    assert len(data["host"]) == len(host)
    data["host"] = host
    return (json.dumps(data, ensure_ascii=False) + "\n").encode()


def test_a_rerun_reads_no_summary_and_gives_the_same_view(
        fleet_dir: Path, tmp_path: Path, reads: list[str]) -> None:
    cache = tmp_path / "cache" / "fleet.marshal"
    cold = aggregate(fleet_dir, cache=cache)
    assert len(reads) == 12 and cache.is_file()
    assert cache.stat().st_mode & 0o077 == 0
    reads.clear()
    warm = aggregate(fleet_dir, cache=cache)
    assert reads == []
    assert _facts(warm) == _facts(cold)
    assert _facts(warm) == _facts(aggregate(fleet_dir, cache=False))
    # the file that cannot be read is looked at again, and still unreadable
    assert [path for path, _ in warm.unreadable] == ["truncated.json"]


def test_a_replaced_summary_is_read_again(fleet_dir: Path, tmp_path: Path,
                                          reads: list[str]) -> None:
    """Same size and mtime, another file (inode): renamed over it, as the writer does."""
    cache = tmp_path / "fleet.marshal"
    aggregate(fleet_dir, cache=cache)
    summary = fleet_summary.path_for(fleet_dir / HGX0)
    before = summary.stat()
    new = summary.with_name("new.tmp")
    new.write_bytes(_with_host(summary, "hgx9"))
    os.utime(new, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(new, summary)
    assert summary.stat().st_size == before.st_size
    reads.clear()
    view = aggregate(fleet_dir, cache=cache)
    assert reads == [str(summary)]
    assert _host(view, "hgx0") == "hgx9"


def test_a_summary_rewritten_in_place_with_its_old_mtime_is_read_again(
        fleet_dir: Path, tmp_path: Path, reads: list[str]) -> None:
    """Same inode, size and mtime: the change time still moved."""
    cache = tmp_path / "fleet.marshal"
    aggregate(fleet_dir, cache=cache)
    summary = fleet_summary.path_for(fleet_dir / HGX0)
    before = summary.stat()
    text = _with_host(summary, "hgx8")
    with open(summary, "r+b") as handle:
        handle.write(text)
        handle.truncate()
    os.utime(summary, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = summary.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino, before.st_size, before.st_mtime_ns)
    reads.clear()
    assert _host(aggregate(fleet_dir, cache=cache), "hgx0") == "hgx8"
    assert reads == [str(summary)]


def test_a_report_of_another_size_is_parsed_not_taken_from_the_cache(
        fleet_dir: Path, tmp_path: Path) -> None:
    cache = tmp_path / "fleet.marshal"
    assert aggregate(fleet_dir, cache=cache).full_reads == 1  # truncated.json
    report = fleet_dir / HGX0
    report.write_text(report.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    view = aggregate(fleet_dir, cache=cache)
    assert view.full_reads == 2
    assert aggregate(fleet_dir, cache=cache).full_reads == 2  # never cached while stale


def test_a_damaged_or_foreign_cache_is_ignored(fleet_dir: Path, tmp_path: Path,
                                               reads: list[str]) -> None:
    cache = tmp_path / "fleet.marshal"
    expected = _facts(aggregate(fleet_dir, cache=cache))
    blob = bytearray(cache.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    cache.write_bytes(bytes(blob))
    reads.clear()
    assert _facts(aggregate(fleet_dir, cache=cache)) == expected
    assert len(reads) == 12  # all read again, and the cache rewritten
    reads.clear()
    aggregate(fleet_dir, cache=cache)
    assert reads == []
    cache.chmod(0o666)  # writable by others: not trusted
    reads.clear()
    assert _facts(aggregate(fleet_dir, cache=cache)) == expected
    assert len(reads) == 12


def test_a_fifo_in_place_of_a_cached_summary_is_refused(fleet_dir: Path,
                                                        tmp_path: Path) -> None:
    cache = tmp_path / "fleet.marshal"
    aggregate(fleet_dir, cache=cache)
    summary = fleet_summary.path_for(fleet_dir / HGX0)
    summary.unlink()
    os.mkfifo(summary)
    view = aggregate(fleet_dir, cache=cache)  # would block for ever if it opened it plainly
    assert view.full_reads == 2 and _host(view, "hgx0") == "hgx0"


def test_the_default_cache_only_for_a_fleet_of_its_size(
        fleet_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "cache-home"
    monkeypatch.setenv("NODEGATE_CACHE_DIR", str(home))
    aggregate(fleet_dir)
    assert not home.exists()  # 12 reports: read without one
    monkeypatch.setattr(read, "CACHE_MIN_FILES", 10)
    aggregate(fleet_dir)
    assert [p.name for p in (home / "fleet").iterdir()] == [
        read.default_cache_file(fleet_dir).name]
    assert aggregate(fleet_dir, strict=True).full_reads == 13  # strict: no cache


def test_no_cache_beyond_its_largest_fleet(fleet_dir: Path, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A long history (300,000 reports) is read without one: it would hold every report's
    metrics in memory."""
    monkeypatch.setattr(read, "CACHE_MAX_FILES", 11)
    cache = tmp_path / "fleet.marshal"
    assert aggregate(fleet_dir, cache=cache).n_reports == 12
    assert not cache.exists()


def test_a_cached_history_keeps_the_sequence_order(tmp_path: Path) -> None:
    """Three reports of one boot whose wall dates run backwards (the clock was stepped):
    ordered by sequence, from the summaries and from the cache alike."""
    now = dt.datetime.now(dt.timezone.utc)
    root = tmp_path / "reports"
    for sequence in (1, 2, 3):
        base = synthetic_report("n1", seed=sequence, started_at=now - dt.timedelta(
            hours=sequence))
        write_report(dataclasses.replace(base, boot_id="boot-a", sequence=sequence,
                                         boottime_s=1000.0 * sequence),
                     root / f"standard-{sequence}.json")
    cache = tmp_path / "fleet.marshal"
    for _ in range(2):  # from the summaries, then from the cache
        (node,) = aggregate(root, cache=cache).nodes
        assert [s["sequence"] for s in node.history] == [1, 2, 3]
        assert node.latest["path"] == "standard-3.json" and node.conflict is None
    assert cache.is_file()
