"""The drain budget without a scheduler: the counting rules, the Slurm 22.05 output it reads,
and the adapter calls it makes, against a fake that answers in 22.05's own formats."""

from __future__ import annotations

import datetime as dt
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest

from nodegate.cluster.budget import (
    MARK_PREFIX,
    DrainBudget,
    drain_within_budget,
    keeps_after,
    render_metrics,
    room_before,
)
from nodegate.cluster.holds import HoldStore, Kind, Record
from nodegate.cluster.scheduler import NodeState
from nodegate.cluster.slurm import SlurmScheduler, parse_show_node, parse_sinfo_timed

# captured from Slurm 22.05.8 (Debian 12) in the test cluster (tests/cluster/conftest.py),
# ng1 drained by nodegate, ng2 marked with a comment; only the OS field's kernel is as captured
SHOW_DRAINED = (
    "NodeName=ng1 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=1 CPUTot=1 CPULoad=4.39 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:8 NodeAddr=127.0.0.1 "
    "NodeHostName=ng1 Port=40131 Version=22.05.8 OS=Linux 6.18.44-fc-v1252 #1 SMP "
    "PREEMPT_DYNAMIC @0  RealMemory=500 AllocMem=0 FreeMem=9896 Sockets=1 Boards=1 "
    "State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A "
    "Partitions=gpu,quad  BootTime=2026-12-04T13:27:44 SlurmdStartTime=2026-12-05T07:06:00 "
    "LastBusyTime=2026-12-05T07:06:00 CfgTRES=cpu=1,mem=500M,billing=1 AllocTRES= "
    "CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 "
    "ExtSensorsTemp=n/s Reason=nodegate: xid_events[node] [root@2026-12-05T07:06:00]"
)
SHOW_MARKED = (
    "NodeName=ng2 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=1 CPUTot=1 CPULoad=4.39 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:8 NodeAddr=127.0.0.1 "
    "NodeHostName=ng2 Port=48541 Version=22.05.8 OS=Linux 6.18.44-fc-v1252 #1 SMP "
    "PREEMPT_DYNAMIC @0  RealMemory=500 AllocMem=0 FreeMem=9896 Sockets=1 Boards=1 "
    "State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A "
    "Partitions=gpu,quad  BootTime=2026-12-04T13:27:44 SlurmdStartTime=2026-12-05T07:06:00 "
    "LastBusyTime=2026-12-05T07:06:00 CfgTRES=cpu=1,mem=500M,billing=1 AllocTRES= "
    "CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 "
    "ExtSensorsTemp=n/s Comment=nodegate: over drain budget: xid_events[node]"
)
# sinfo -N -h -p quad -O NodeList:|,StateComplete:|,Timestamp:|,Reason:0 (same cluster)
SINFO_QUAD = ("ng1|idle+drain|2026-12-05T07:06:00|nodegate: xid_events[node]\n"
              "ng2|idle|Unknown|none\n"
              "ng3|idle+drain|2026-12-05T07:05:12|bad fan | RMA 4711\n"
              "ng4|mixed|Unknown|none\n")

HALF = DrainBudget(0.5)


def test_parse_show_node_reads_partitions_comment_and_reason_time() -> None:
    drained = parse_show_node(SHOW_DRAINED)
    assert drained.partitions == ("gpu", "quad")
    assert drained.reason == "nodegate: xid_events[node]" and drained.comment is None
    assert drained.reason_time == dt.datetime(2026, 12, 5, 7, 6, 0)
    marked = parse_show_node(SHOW_MARKED)
    assert marked.available and marked.reason is None
    assert marked.comment == "nodegate: over drain budget: xid_events[node]"


def test_parse_sinfo_timed() -> None:
    nodes = parse_sinfo_timed(SINFO_QUAD)
    assert [n.node for n in nodes] == ["ng1", "ng2", "ng3", "ng4"]
    assert nodes[0].reason_time == dt.datetime(2026, 12, 5, 7, 6, 0)
    assert nodes[1].reason_time is None and nodes[1].reason is None
    assert nodes[2].reason == "bad fan | RMA 4711"  # a '|' in a reason stays in it


@pytest.mark.parametrize(("fraction", "total", "allowed"), [
    (0.5, 4, 2), (0.5, 3, 1), (0.5, 1, 0), (0.25, 8, 2), (0.0, 10, 0), (1.0, 4, 4),
    (0.3, 10, 3),  # 0.3 * 10 is 3.0000000000000004 in floating point, still 3
])
def test_allowed_rounds_down(fraction: float, total: int, allowed: int) -> None:
    assert DrainBudget(fraction).allowed(total) == allowed


def test_administrators_drains_do_not_count() -> None:
    # ng3 drained by an administrator, ng1 by nodegate: one nodegate drain of 2 allowed
    members = parse_sinfo_timed(SINFO_QUAD)
    assert room_before("ng2", members, HALF)
    with_second = [*members[:3], NodeState("ng4", "idle", frozenset({"DRAIN"}),
                                           "nodegate: nvlink_state[gpu0.link1]")]
    assert not room_before("ng2", with_second, HALF)


def _at(node: str, second: int | None, *, reason: str = "nodegate: x") -> NodeState:
    when = None if second is None else dt.datetime(2026, 1, 1, 0, 0, second)
    return NodeState(node, "idle", frozenset({"DRAIN"}), reason, reason_time=when)


def test_after_the_drain_the_later_one_steps_back() -> None:
    members = [_at("a", 1), _at("b", 2), _at("c", 3), NodeState("d", "idle")]
    assert keeps_after("a", members, HALF) and keeps_after("b", members, HALF)
    assert not keeps_after("c", members, HALF)


def test_ties_within_a_second_keep_exactly_one_by_name() -> None:
    """Equal reason times are ordered by node name: exactly one keeps (fails on main, where
    both stepped back, round after round)."""
    members = [_at("a", 1), _at("b", 5), _at("c", 5), NodeState("d", "idle")]
    assert keeps_after("a", members, HALF)
    assert keeps_after("b", members, HALF) and not keeps_after("c", members, HALF)


class FakePartition:
    """scontrol/sinfo for one partition ``quad`` of four nodes, in 22.05's formats; a clock
    that advances one second per update gives each reason its time."""

    def __init__(self, nodes: Sequence[str] = ("ng1", "ng2", "ng3", "ng4")) -> None:
        self.nodes = {n: {"state": "IDLE", "reason": "", "time": "", "comment": ""}
                      for n in nodes}
        self.clock = dt.datetime(2026, 12, 5, 7, 0, 0)
        self.calls: list[list[str]] = []
        self.after_sinfo: Callable[[], None] | None = None

    def set(self, node: str, state: str, reason: str = "") -> None:
        self.clock += dt.timedelta(seconds=1)
        self.nodes[node].update(state=state, reason=reason, time=self.clock.isoformat())

    def __call__(self, argv: Sequence[str], env: Mapping[str, str],
                 timeout: float) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        tool = argv[0].rsplit("/", 1)[-1]
        if tool == "sinfo":
            out = "".join(f"{n}|{v['state'].lower()}|{v['time'] or 'Unknown'}|"
                          f"{v['reason'] or 'none'}\n" for n, v in self.nodes.items())
            if self.after_sinfo is not None:
                hook, self.after_sinfo = self.after_sinfo, None
                hook()
            return subprocess.CompletedProcess(argv, 0, out, "")
        if argv[1] == "show":
            v = self.nodes[argv[4]]
            comment = f" Comment={v['comment']}" if v["comment"] else ""
            reason = f" Reason={v['reason']} [root@{v['time']}]" if v["reason"] else ""
            line = (f"NodeName={argv[4]} Arch=x86_64 State={v['state']} ThreadsPerCore=1 "
                    f"Partitions=quad  BootTime=2026-12-04T13:27:44 ExtSensorsTemp=n/s"
                    f"{comment}{reason}\n")
            return subprocess.CompletedProcess(argv, 0, line, "")
        fields = dict(item.split("=", 1) for item in argv[2:])
        node = fields["NodeName"]
        if "Comment" in fields:
            self.nodes[node]["comment"] = fields["Comment"]
        elif fields.get("State") == "DRAIN":
            self.set(node, "IDLE+DRAIN", fields["Reason"])
        elif fields.get("State") == "RESUME":
            self.set(node, "IDLE")
        return subprocess.CompletedProcess(argv, 0, "", "")


def test_three_faults_in_four_nodes_drain_two_and_mark_one() -> None:
    fake = FakePartition()
    slurm = SlurmScheduler(runner=fake, controller="ctl:6817")
    outcomes = [drain_within_budget(n, "nodegate: xid_events[node]", slurm, HALF)
                for n in ("ng1", "ng2", "ng3")]
    assert [o.exceeded for o in outcomes] == [False, False, True]
    assert [fake.nodes[n]["state"] for n in fake.nodes] == ["IDLE+DRAIN", "IDLE+DRAIN", "IDLE",
                                                            "IDLE"]
    assert fake.nodes["ng3"]["comment"] == f"{MARK_PREFIX}: xid_events[node]"
    warn = outcomes[2].warn or ""
    assert "partition quad" in warn and "2 of 4 nodes drained by nodegate" in warn
    assert "budget 50 % allows 2" in warn
    # the metric names the partition; the counts are what the gate saw
    text = render_metrics("ng3", ("quad",), outcomes[2], HALF)
    assert 'nodegate_gate_drain_budget_exceeded{node="ng3",partition="quad"} 1' in text
    assert 'nodegate_gate_partition_nodegate_drained{partition="quad"} 2' in text
    assert 'nodegate_gate_partition_drain_allowed{partition="quad"} 2' in text
    # an administrator's drain of the fourth node uses none of nodegate's budget, and freeing
    # a slot lets the marked node drain next time, which lifts the mark
    fake.set("ng4", "IDLE+DRAIN", "bad fan")
    fake.set("ng1", "IDLE")
    again = drain_within_budget("ng3", "nodegate: xid_events[node]", slurm, HALF)
    assert not again.exceeded and fake.nodes["ng3"]["state"] == "IDLE+DRAIN"
    assert fake.nodes["ng3"]["comment"] == ""


def test_a_concurrent_drain_makes_the_later_node_step_back() -> None:
    """ng2 passes its check, then ng1 (deciding at the same moment) drains before ng2 does:
    ng2's check after its own drain sees ng1 first and resumes itself, marked."""
    fake = FakePartition()
    fake.set("ng4", "IDLE+DRAIN", "nodegate: nvlink_state[gpu0.link1]")
    fake.after_sinfo = lambda: fake.set("ng1", "IDLE+DRAIN", "nodegate: xid_events[node]")
    slurm = SlurmScheduler(runner=fake, controller="ctl:6817")
    outcome = drain_within_budget("ng2", "nodegate: xid_events[node]", slurm, HALF)
    assert outcome.exceeded and "concurrent" in (outcome.warn or "")
    assert fake.nodes["ng2"]["state"] == "IDLE" and fake.nodes["ng1"]["state"] == "IDLE+DRAIN"
    updates = [c[3:] for c in fake.calls if c[1] == "update"]
    assert updates == [["State=DRAIN", "Reason=nodegate: xid_events[node]"], ["State=RESUME"],
                       ["Comment=nodegate: over drain budget: xid_events[node]"]]


def test_a_node_already_drained_by_nodegate_is_not_counted_twice(tmp_path: Path) -> None:
    fake = FakePartition()
    for node in ("ng1", "ng2"):
        fake.set(node, "IDLE+DRAIN", "nodegate: xid_events[node]")
    store = HoldStore(tmp_path)
    store.put(Record("ng2", "nodegate: xid_events[node]", Kind.HEALTH))
    slurm = SlurmScheduler(runner=fake, controller="ctl:6817")
    outcome = drain_within_budget("ng2", "nodegate: nvlink_state[gpu0.link1]", slurm, HALF,
                                  store=store)
    assert not outcome.exceeded and fake.nodes["ng2"]["reason"].startswith("nodegate: nvlink")
