"""ib_write_bw (perftest): the parser on real captures (tests/network/data/perftest, origin in
its README), judging per rail port, and the bounds of a run: a missing tool is exit 3 naming
the package, a peer that never answers is ERROR for that pair within the deadline.

The bounded-run tests put a stand-in ``ib_write_bw`` on PATH (a shell script printing a real
capture, refusing connections, or hanging): they test our process handling, not perftest."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from nodegate.errors import CannotRunError
from nodegate.judge.network_load import rail_bw
from nodegate.probes import perftest
from nodegate.profiles.loader import Threshold
from nodegate.results import Verdict
from tests.conftest import run_cli

DATA = Path(__file__).parent / "data" / "perftest"
GDR = DATA / "dranet-h200-cx7-roce-use-cuda-dmabuf.txt"
BROKEN = DATA / "dranet-cx7-roce-completion-error.txt"


def floor(value: float) -> dict[str, Threshold]:
    return {"ib_write_bw_gdr_gbps_min": Threshold("ib_write_bw_gdr_gbps_min", "min", value,
                                                  "Gb/s", "policy: test")}


def test_a_gpudirect_sweep_parses_to_its_last_row() -> None:
    got = perftest.parse_bw(GDR.read_text())
    assert (got.device, got.link_type, got.qps, got.cuda_device) == (
        "mlx5_3", "Ethernet", 1, "NVIDIA H200")
    assert len(got.rows) == 23 and got.rows[0].bytes == 2
    assert got.top == perftest.BwRow(8388608, 5000, 140.55, 140.40, 0.002092)


def test_a_run_that_failed_mid_sweep_is_an_error_naming_the_line() -> None:
    # rows up to 64 KiB at 381 Gb/s were printed before the completion error
    with pytest.raises(perftest.PerftestParseError, match=r"ib_write_bw: the run reported a "
                       r"failure \(line 40: 'Completion with error at client'\)"):
        perftest.parse_bw(BROKEN.read_text())


@pytest.mark.parametrize(("edit", "words"), [
    (lambda t: t.replace("Gb/sec", "MB/sec"), "table in MB/sec, not Gb/sec"),
    (lambda t: t.replace(" 65536      5000             140.90", " 65536      5000  n/a"),
     r"not a result row \(line 52: .65536 "),
    (lambda t: t[:t.index(" 131072 ")], "the table never ended"),
    (lambda t: t[:t.index(" #bytes")], "no result table"),
])
def test_output_that_is_not_perftest_table_names_the_line(edit: object, words: str) -> None:
    with pytest.raises(perftest.PerftestParseError, match=words):
        perftest.parse_bw(edit(GDR.read_text()))  # type: ignore[operator]


def test_judged_against_the_floor_and_unmeasured_is_error() -> None:
    ok = perftest.BwOutcome(True, perftest.parse_bw(GDR.read_text()), None, "", 6.0)
    bad = perftest.BwOutcome(False, None, "ib_write_bw: the run reported a failure", "x", 2.0)
    low, high = (rail_bw("ib_write_bw_gdr", {"mlx5_3.port1": ok, "mlx5_4.port1": bad}, floor(v))
                 for v in (380.0, 100.0))
    assert [r.verdict for r in low] == [Verdict.FAIL, Verdict.ERROR]
    assert low[0].measured == 140.40 and low[0].unit == "Gb/s"
    assert low[0].evidence["bytes"] == 8388608 and low[0].evidence["cuda_device"] == "NVIDIA H200"
    assert high[0].verdict is Verdict.PASS
    assert "reported a failure" in low[1].evidence["reason"]


def test_argv_asks_for_gbits_and_cuda() -> None:
    spec = perftest.BwSpec("mlx5_2", tcp_port=18600, cuda_index=2, server="10.0.0.1")
    assert spec.argv("/usr/bin/ib_write_bw") == [
        "/usr/bin/ib_write_bw", "-d", "mlx5_2", "-i", "1", "-p", "18600", "-s", "8388608",
        "-D", "5", "-F", "--report_gbits", "--use_cuda=2", "10.0.0.1"]


# --- bounded runs -----------------------------------------------------------------------------


def fake_tool(tmp_path: Path, body: str, monkeypatch: pytest.MonkeyPatch) -> None:
    tool = tmp_path / "bin" / "ib_write_bw"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n" + body + "\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tool.parent}{os.pathsep}{os.environ['PATH']}")


def test_missing_perftest_is_exit_3_naming_the_package(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(CannotRunError, match="install the perftest package"):
        perftest.require_tool()


def test_a_peer_that_never_answers_is_an_error_within_the_deadline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_tool(tmp_path, 'echo " Couldn\'t connect to $1:18515"; exit 1', monkeypatch)
    t0 = time.monotonic()
    got = perftest.run_client(perftest.BwSpec("mlx5_0", server="10.0.0.9"), timeout_s=3.0)
    assert time.monotonic() - t0 < 6
    assert not got.ok and "the peer did not answer ib_write_bw within 3 s" in (got.error or "")


def test_a_hung_run_is_killed_at_the_deadline(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    fake_tool(tmp_path, "sleep 600", monkeypatch)
    t0 = time.monotonic()
    got = perftest.run_client(perftest.BwSpec("mlx5_0", server="10.0.0.9"), timeout_s=1.5)
    assert time.monotonic() - t0 < 5
    assert not got.ok and "did not finish within 1.5 s" in (got.error or "")


def test_a_client_that_prints_a_capture_is_parsed(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    fake_tool(tmp_path, f"cat {GDR}", monkeypatch)
    got = perftest.run_client(perftest.BwSpec("mlx5_3", server="10.0.0.9"), timeout_s=5.0)
    assert got.ok and got.result is not None and got.result.top.average_gbps == 140.40


def test_netload_cli_without_perftest_exits_3_and_without_rails_skips(tmp_path: Path) -> None:
    env = {"PATH": str(Path(os.sys.executable).parent), "NODEGATE_LOCK_FILE": str(tmp_path / "l")}
    missing = run_cli("sim", "run", "h100-hgx", "--", "nodegate", "netload", "--profile",
                      "xe9680-h100", "--report-dir", str(tmp_path / "r"), "--gpudirect", "off",
                      env=env)
    assert missing.returncode == 3, missing.stderr
    assert "ib_write_bw is not installed: install the perftest package" in missing.stderr
    skip = run_cli("netload", "--profile", "hgx-a100-80gb", "--report-dir",
                   str(tmp_path / "s"), "--quiet", env=env)
    assert skip.returncode == 0, skip.stderr
    assert (tmp_path / "s" / "netload-latest.json").is_file()


def test_each_member_and_rail_gets_its_own_turn_and_tcp_port(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The peer serves member 0's rails, then member 1's; member 1 dials the ports of its
    turn, so no client reaches a server meant for another member."""
    from nodegate.load import rail_bw
    from nodegate.sim.runtime import resolve_spec
    from nodegate.sim.sysfs import write_tree

    root = write_tree(resolve_spec("h100-hgx+rail-down@nic7"), tmp_path / "sysfs")
    monkeypatch.setenv("NODEGATE_SYSFS_ROOT", str(root))
    log = tmp_path / "argv.log"
    fake_tool(tmp_path, f'echo "$*" >> {log}; cat {GDR}', monkeypatch)
    profile = {"network": {"rails": {"count": 8, "devices": ["mlx5_*"]}}}
    host = rail_bw.with_peer("host", profile, peer_host="10.0.0.1", members=2, index=0,
                             wait_s=5)
    join = rail_bw.with_peer("join", profile, peer_host="10.0.0.1", members=2, index=1,
                             wait_s=5)
    assert sorted(host) == sorted([f"member{m}/mlx5_{r}.port1" for m in (0, 1)
                                   for r in range(7)] + ["mlx5_7.port1"])
    assert not join["mlx5_7.port1"].ok and "not ACTIVE" in (join["mlx5_7.port1"].error or "")
    assert all(join[f"mlx5_{r}.port1"].ok for r in range(7))
    calls = log.read_text().splitlines()
    served = [c.split(" -p ")[1].split()[0] for c in calls[:14]]
    dialled = [c.split(" -p ")[1].split()[0] for c in calls[14:]]
    assert len(set(served)) == 14 and dialled == served[7:]  # member 1's turn
    assert all(c.endswith("10.0.0.1") for c in calls[14:])


def test_a_member_that_never_comes_is_waited_for_once_not_rail_after_rail(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nodegate.load import rail_bw
    from nodegate.sim.runtime import resolve_spec
    from nodegate.sim.sysfs import write_tree

    root = write_tree(resolve_spec("h100-hgx"), tmp_path / "sysfs")
    monkeypatch.setenv("NODEGATE_SYSFS_ROOT", str(root))
    monkeypatch.setattr(rail_bw, "SLACK_S", 0.0)
    fake_tool(tmp_path, "sleep 600", monkeypatch)  # a server no client ever reaches
    profile = {"network": {"rails": {"count": 8}}, "load": {"rail_bw_seconds": 1}}
    t0 = time.monotonic()
    host = rail_bw.with_peer("host", profile, peer_host="10.0.0.1", members=1, index=0,
                             wait_s=1.0)
    assert time.monotonic() - t0 < 6  # one bounded wait, then the other rails are not run
    assert "no client came to ib_write_bw" in (host["member0/mlx5_0.port1"].error or "")
    assert all("member 0 never came" in (host[f"member0/mlx5_{r}.port1"].error or "")
               for r in range(1, 8))
