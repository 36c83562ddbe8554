"""The two-node all-reduce (``nodegate multinode``): argv, network settings, judging, and real
pairs of torchrun over 127.0.0.1 (gloo), including a peer that never comes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from nodegate.errors import ConfigError
from nodegate.judge import load as verdicts
from nodegate.load import formulas, multinode
from nodegate.profiles.loader import Threshold
from nodegate.results import Verdict

FLOOR = {"multinode_allreduce_busbw_gbps_min": Threshold(
    "multinode_allreduce_busbw_gbps_min", "min", 1e-6, "GB/s", "policy: test")}


def spec(role: str, port: int, **kw: object) -> multinode.PairSpec:
    base: dict[str, object] = dict(
        role=role, endpoint=f"127.0.0.1:{port}", rdzv_id="nodegate-test", local_addr="127.0.0.1",
        ranks_per_node=1, backend="cpu", max_bytes=1 << 20, steps=2, seconds_per_size=0.05,
        join_timeout_s=60.0, collective_timeout_s=30.0,
        env={"GLOO_SOCKET_IFNAME": "lo"})
    base.update(kw)
    return multinode.PairSpec(**base)  # type: ignore[arg-type]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ours_left(rdzv_id: str) -> list[int]:
    """PIDs whose command line carries this rendezvous id or our worker module."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if rdzv_id in cmdline and "torch.distributed.run" in cmdline:
            found.append(int(proc.name))
    return found


# --- fast: no torch processes -------------------------------------------------------------


def test_torchrun_argv_host_side_owns_the_store_and_never_restarts() -> None:
    argv = multinode.torchrun_argv(spec("host", 29400), Path("/tmp/x.json"))
    text = " ".join(argv)
    assert "--rdzv-backend c10d" in text and "--rdzv-endpoint 127.0.0.1:29400" in text
    assert "is_host=true" in text and "--max-restarts 0" in text
    assert "--local-addr 127.0.0.1" in text and "--nnodes 2" in text
    assert "is_host=false" in " ".join(multinode.torchrun_argv(spec("join", 1), Path("/x")))


def test_network_env_comes_from_nccl_conf(tmp_path: Path) -> None:
    conf = tmp_path / "nccl.conf"
    conf.write_text("# rendered by nodegate\nNCCL_SOCKET_IFNAME=eth0\nNCCL_IB_HCA=mlx5_0\n")
    assert multinode.network_env(None, conf) == {"GLOO_SOCKET_IFNAME": "eth0",
                                                 "NCCL_SOCKET_IFNAME": "eth0"}
    assert multinode.network_env("ib0", conf)["GLOO_SOCKET_IFNAME"] == "ib0"
    assert multinode.network_env(None, tmp_path / "absent") == {}


def test_sizing_from_the_profile() -> None:
    prof = {"gpu": {"count": 8}, "load": {"multinode_max_bytes": 1 << 24}}
    assert multinode.sizing(prof, "cpu", 0, None) == (8, 1 << 24)
    assert multinode.sizing(prof, "cuda", 1, None) == (1, 1 << 24)  # one H200: one rank
    assert multinode.sizing({"load": {"multinode_ranks_per_node": 2}}, "cpu", 0, None)[0] == 2
    with pytest.raises(ConfigError, match="multinode_ranks_per_node"):
        multinode.sizing({"load": {"multinode_ranks_per_node": -1}}, "cpu", 0, None)


def test_judge_passes_fails_and_skips() -> None:
    value = {"world": 16, "hosts": ["a"] * 8 + ["b"] * 8, "backend": "cuda/nccl",
             "sweep": [{"bytes": 1 << 30, "seconds": 0.05, "iters": 20,
                        "algbw_gbps": 21.47, "busbw_gbps": 40.26}]}
    low = {"multinode_allreduce_busbw_gbps_min": Threshold(
        "multinode_allreduce_busbw_gbps_min", "min", 45.0, "GB/s", "policy: test")}
    done, busbw = verdicts.multinode(True, value, {"duration_s": 9.0}, low, "peer-b")
    assert done.verdict is Verdict.PASS and done.entity == "peer-b"
    assert busbw.verdict is Verdict.FAIL and busbw.measured == 40.26 and busbw.unit == "GB/s"
    assert busbw.evidence["factor"] == formulas.busbw_factor(16)
    missing = verdicts.multinode(True, value, {}, {}, "peer-b")[1]
    assert missing.verdict is Verdict.SKIP and "site profile" in missing.evidence["reason"]
    failed = verdicts.multinode(False, None, {"exit_code": 1, "timed_out": False}, low, "peer-b")
    assert [r.verdict for r in failed] == [Verdict.FAIL, Verdict.SKIP]
    assert failed[0].measured == "torchrun exited 1"


FOUR = ("all_reduce", "all_gather", "reduce_scatter", "alltoall")


def test_judge_reads_every_collective_with_its_own_floor_and_factor() -> None:
    rows = {name: [{"bytes": 1 << 30, "seconds": 0.05, "iters": 20, "algbw_gbps": 21.47,
                    "busbw_gbps": 21.47 * formulas.collective_factor(name, 24)}]
            for name in FOUR if name != "alltoall"}
    value = {"world": 24, "hosts": ["a"] * 8 + ["b"] * 8 + ["c"] * 8, "collectives": rows}
    floors = {f"multinode_{infix}_busbw_gbps_min": Threshold(
        f"multinode_{infix}_busbw_gbps_min", "min", 30.0, "GB/s", "policy: test")
        for infix in ("allreduce", "allgather", "reducescatter", "alltoall")}
    got = {r.check: r for r in verdicts.multinode(True, value, {}, floors, "peer-a",
                                                  collectives=FOUR)}
    assert got["multinode_completed"].measured == 24
    # 2(n-1)/n = 1.917 lifts all_reduce above 30; (n-1)/n = 0.958 leaves the others below
    assert got["multinode_allreduce_busbw"].verdict is Verdict.PASS
    assert got["multinode_allgather_busbw"].verdict is Verdict.FAIL
    assert got["multinode_allgather_busbw"].evidence["factor"] == pytest.approx(23 / 24)
    assert got["multinode_reducescatter_busbw"].evidence["collective"] == "reduce_scatter"
    # a completed run that reported no alltoall did not measure it: ERROR, never SKIP
    assert got["multinode_alltoall_busbw"].verdict is Verdict.ERROR


def test_cli_rejects_a_bad_endpoint() -> None:
    from nodegate.commands.multinode import _endpoint

    assert _endpoint("10.0.0.1") == "10.0.0.1:29400"
    assert _endpoint("10.0.0.1:2000") == "10.0.0.1:2000"
    for bad in ("10.0.0.1:x", ":29400", "10.0.0.1:70000"):
        with pytest.raises(ConfigError, match="--endpoint"):
            _endpoint(bad)


# --- slow: real torchrun pairs on this machine ---------------------------------------------


@pytest.mark.slow
@pytest.mark.torch
def test_a_group_of_three_measures_the_four_collectives_with_units() -> None:
    pytest.importorskip("torch")
    port = free_port()
    outcomes: dict[str, multinode.PairOutcome] = {}
    sides = [threading.Thread(target=lambda r=role, i=i: outcomes.setdefault(
        f"{r}{i}", multinode.run_pair(spec(r, port, nnodes=3))))
        for i, role in enumerate(("host", "join"))]
    for side in sides:
        side.start()
    outcomes["join"] = multinode.run_pair(spec("join", port, nnodes=3))
    for side in sides:
        side.join(timeout=240)
    assert len(outcomes) == 3
    for name, got in outcomes.items():
        assert got.ok, (name, got.evidence())
        assert got.value is not None
        assert got.value["world"] == 3 and got.value["backend"] == "cpu/gloo"
        assert len(got.value["hosts"]) == 3
        for collective in FOUR:
            top = max(got.value["collectives"][collective], key=lambda r: r["bytes"])
            assert top["busbw_gbps"] > 0
            # nccl-tests: busbw = algbw x its collective's factor at n = 3 ranks
            assert top["busbw_gbps"] == pytest.approx(
                top["algbw_gbps"] * formulas.collective_factor(collective, 3))
            # all_gather/reduce_scatter/alltoall split the buffer in 3 whole float32 parts
            assert top["bytes"] == formulas.collective_size(collective, 1 << 20, 3)
    floors = {f"multinode_{infix}_busbw_gbps_min": Threshold(
        f"multinode_{infix}_busbw_gbps_min", "min", 1e-6, "GB/s", "policy: test")
        for infix in ("allreduce", "allgather", "reducescatter", "alltoall")}
    results = verdicts.multinode(True, outcomes["join"].value, outcomes["join"].evidence(),
                                 floors, "peer-host", collectives=FOUR)
    assert [r.verdict for r in results] == [Verdict.PASS] * 5
    assert all(r.unit == "GB/s" and r.evidence["sweep"] for r in results[1:])
    assert ours_left("nodegate-test") == []


@pytest.mark.slow
@pytest.mark.torch
def test_a_peer_that_never_comes_fails_within_the_deadline_and_leaves_nothing() -> None:
    pytest.importorskip("torch")
    # a short deadline (torchrun's slack 5 s, not the 30 s a real node's start may need): the
    # joining side retries the store for its read timeout (60 s), so the kill at the deadline
    # is what ends it either way
    lonely = spec("join", free_port(), rdzv_id="nodegate-lonely", join_timeout_s=5.0,
                  collective_timeout_s=5.0, slack_s=5.0)
    assert lonely.deadline_s < 60  # read_timeout=60: torchrun would still be waiting
    t0 = time.monotonic()
    got = multinode.run_pair(lonely)
    assert time.monotonic() - t0 <= lonely.deadline_s + 15
    assert not got.ok
    results = verdicts.multinode(got.ok, got.value, got.evidence(), FLOOR, "peer-gone")
    assert results[0].check == "multinode_completed" and results[0].verdict is Verdict.FAIL
    assert results[0].evidence["output"]  # torchrun's own words, as evidence
    assert ours_left("nodegate-lonely") == []


@pytest.mark.slow
@pytest.mark.torch
def test_cli_pair_writes_the_join_report(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    port = free_port()
    common = ["--endpoint", f"127.0.0.1:{port}", "--profile", "sim-h100-hgx", "--ifname", "lo",
              "--local-addr", "127.0.0.1", "--ranks-per-node", "1", "--rdzv-id", "nodegate-cli",
              "--quiet"]
    env = dict(os.environ, NODEGATE_REPORT_DIR=str(tmp_path / "host-reports"))
    cli = [sys.executable, "-m", "nodegate.cli", "multinode"]
    host = subprocess.Popen([*cli, "--role", "host", "--peer-name", "new", *common], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    join = subprocess.run([*cli, "--role", "join", "--peer-name", "good", *common,
                           "--report-dir", str(tmp_path / "r")], capture_output=True, text=True,
                          timeout=300, check=False)
    host_out, _ = host.communicate(timeout=120)
    assert join.returncode == 0, join.stdout + join.stderr
    assert host.returncode == 0, host_out
    report = json.loads((tmp_path / "r" / "multinode-latest.json").read_text())
    assert report["labels"]["suite"] == "multinode" and report["labels"]["peer"] == "good"
    by_check = {r["check"]: r for r in report["results"]}
    busbw = by_check["multinode_allreduce_busbw"]
    assert busbw["entity"] == "peer-good" and busbw["unit"] == "GB/s"
    assert busbw["verdict"] == "PASS" and busbw["measured"] > 0
    assert not (tmp_path / "host-reports").exists()  # the known-good side writes no report
