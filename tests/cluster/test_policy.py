"""The gate policy and the Slurm output parsers, without a scheduler (fast)."""

from __future__ import annotations

import datetime as dt
import subprocess
from collections.abc import Mapping, Sequence

import pytest

from nodegate.cluster.gate import (
    Action,
    HealthPolicy,
    JoinPolicy,
    decide_health,
    decide_join,
    drain_reason,
)
from nodegate.cluster.reasons import hold_level
from nodegate.cluster.scheduler import NodeState
from nodegate.cluster.slurm import (
    RetryPolicy,
    SlurmScheduler,
    controller_from_conf,
    is_drained,
    parse_show_node,
    parse_sinfo,
    parse_state,
)
from nodegate.errors import CannotRunError, ConfigError
from nodegate.vocabulary import Level
from tests.cluster.helpers import report

IDLE = NodeState("n1", "idle")
NVLINK = ("nvlink-down@gpu3.link5",)

# captured from Slurm 22.05.8 (Debian 12), trimmed only where marked
SHOW_DRAINED = (
    "NodeName=ng2 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=1 CPUTot=1 CPULoad=0.42 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:2 NodeAddr=127.0.0.1 "
    "NodeHostName=ng2 Port=16822 Version=22.05.8 OS=Linux 6.18.44-fc-v1098 #1 SMP "
    "PREEMPT_DYNAMIC @0  RealMemory=500 AllocMem=0 FreeMem=22958 Sockets=1 Boards=1 "
    "State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A "
    "Partitions=gpu  BootTime=2026-12-02T12:42:00 SlurmdStartTime=2026-12-02T13:27:18 "
    "LastBusyTime=2026-12-02T13:27:18 CfgTRES=cpu=1,mem=500M,billing=1 AllocTRES= "
    "CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 "
    "ExtSensorsTemp=n/s Reason=admin: bad fan | x=y [z] [root@2026-12-02T13:27:25]"
)
SHOW_IDLE = ("NodeName=ng1 Arch=x86_64 CoresPerSocket=1 Gres=gpu:2 OS=Linux 6.1 #1 SMP "
             "State=IDLE ThreadsPerCore=1 ExtSensorsTemp=n/s")
SINFO = ("ng1|idle|none\nng2|idle+drain|admin: bad fan | x=y [z]\n"
         "ng2|idle+drain|admin: bad fan | x=y [z]\nng3|down*+drain|Not responding\n")


def test_parse_show_node() -> None:
    state = parse_show_node(SHOW_DRAINED)
    assert state == NodeState("ng2", "idle", frozenset({"DRAIN"}), "admin: bad fan | x=y [z]",
                              partitions=("gpu",))
    assert state.drained and not state.available
    idle = parse_show_node(SHOW_IDLE)
    assert idle.available and idle.reason is None


def test_parse_sinfo_dedupes_partitions() -> None:
    states = parse_sinfo(SINFO)
    assert [s.node for s in states] == ["ng1", "ng2", "ng3"]
    assert states[2].down and states[2].drained and states[2].reason == "Not responding"


@pytest.mark.parametrize(("token", "base", "flags"), [
    ("IDLE", "idle", set()), ("MIXED+DRAIN", "mixed", {"DRAIN"}), ("drained", "drained", {"DRAIN"}),
    ("down*", "down", {"NOT_RESPONDING"}), ("IDLE+DRAIN+NOT_RESPONDING", "idle",
                                             {"DRAIN", "NOT_RESPONDING"}),
])
def test_parse_state(token: str, base: str, flags: set[str]) -> None:
    assert parse_state(token) == (base, frozenset(flags))


@pytest.mark.parametrize(("token", "drained"), [
    ("IDLE+DRAIN", True), ("DOWN+DRAIN", True), ("DOWN*+DRAIN", True), ("drained", True),
    ("IDLE+DRAINED", True), ("MIXED+DRAIN", False), ("ALLOCATED+DRAIN", False),
    ("IDLE", False), ("draining", False), ("", False),
])
def test_drained_means_no_job_left(token: str, drained: bool) -> None:
    """The one reading the driver role (reboot only when drained) and the gate share."""
    assert is_drained(token) is drained


class FakeSlurm:
    """Answers like scontrol would; counts calls, can play a dead controller."""

    def __init__(self, down: bool = False) -> None:
        self.down = down
        self.calls: list[list[str]] = []
        self.state = "IDLE"
        self.reason = ""

    def __call__(self, argv: Sequence[str], env: Mapping[str, str],
                 timeout: float) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        if self.down:
            return subprocess.CompletedProcess(argv, 1, "", "slurm_load_node error: Unable to "
                                               "contact slurm controller (connect failure)")
        if argv[1] == "show":
            reason = f" Reason={self.reason} [root@2024-05-14T03:15:00]" if self.reason else ""
            return subprocess.CompletedProcess(
                argv, 0, f"NodeName=n1 Arch=x86_64 State={self.state}{reason}\n", "")
        fields = dict(item.split("=", 1) for item in argv[3:])
        if fields["State"] == "DRAIN":
            self.state, self.reason = "IDLE+DRAIN", fields["Reason"]
        else:
            self.state, self.reason = "IDLE", ""
        return subprocess.CompletedProcess(argv, 0, "", "")


def test_adapter_is_idempotent_and_uses_argv() -> None:
    fake = FakeSlurm()
    slurm = SlurmScheduler(runner=fake, controller="ctl:6817")
    assert slurm.drain("n1", "nodegate: a b; rm -rf /").changed
    update = fake.calls[1]
    assert update[1:] == ["update", "NodeName=n1", "State=DRAIN", "Reason=nodegate: a b; rm -rf /"]
    calls = len(fake.calls)
    assert not slurm.drain("n1", "nodegate: a b; rm -rf /").changed
    assert len(fake.calls) == calls + 1  # one read, no update
    assert slurm.resume("n1").changed and not slurm.resume("n1").changed


def test_adapter_retries_then_names_controller(tmp_path: pytest.TempPathFactory) -> None:
    conf = tmp_path / "slurm.conf"  # type: ignore[operator]
    conf.write_text("ClusterName=x\nSlurmctldHost=head1(10.0.0.1)\nSlurmctldPort=7817\n")
    assert controller_from_conf(conf) == ("head1", 7817)
    fake = FakeSlurm(down=True)
    sleeps: list[float] = []
    slurm = SlurmScheduler(conf=conf, runner=fake, sleep=sleeps.append,
                           retry=RetryPolicy(attempts=3, initial_delay_s=1, factor=2))
    with pytest.raises(CannotRunError, match=r"slurmctld head1:7817 \(from .*\) unreachable: "
                       r"read failed 3 times .* no state was changed"):
        slurm.drain("n1", "nodegate: x")
    assert sleeps == [1, 2]
    assert all(call[1] == "show" for call in fake.calls)  # never got as far as an update


def test_adapter_refuses_hostlists() -> None:
    with pytest.raises(ConfigError, match="not a single node name"):
        SlurmScheduler(runner=FakeSlurm()).state("n[1-4]")


def test_reasons() -> None:
    assert drain_reason(report("n1", level="quick", faults=NVLINK)) == (
        "nodegate: nvlink_state[gpu3.link5]")
    two = report("n1", level="acceptance", faults=(*NVLINK, "xid@node"))
    assert drain_reason(two) == "nodegate: acceptance failed nvlink_state[gpu3.link5] (+1 more)"
    assert hold_level(drain_reason(two)) is Level.ACCEPTANCE
    assert hold_level("nodegate: nvlink_state[gpu3.link5]") is None


def test_join() -> None:
    drained = NodeState("n1", "idle", frozenset({"DRAIN"}), "nodegate: standard report missing")
    assert decide_join(drained, [report("n1")]).action is Action.RESUME
    assert decide_join(IDLE, [report("n1")]).action is Action.NONE
    assert decide_join(IDLE, [report("n1", level="quick")]).reason == (
        "nodegate: standard report missing")
    # a newer quick failure outweighs an older standard pass
    newer = report("n1", level="quick", faults=NVLINK, age=dt.timedelta(minutes=1))
    assert decide_join(IDLE, [report("n1"), newer]).reason == "nodegate: nvlink_state[gpu3.link5]"
    stale = decide_join(IDLE, [report("n1", age=dt.timedelta(hours=30))])
    assert stale.action is Action.DRAIN and "older than 1d" in (stale.reason or "")
    assert decide_join(IDLE, [report("n1", age=dt.timedelta(hours=30))],
                       policy=JoinPolicy(max_age_s=2 * 86400)).action is Action.NONE
    future = decide_join(IDLE, [report("n1", age=-dt.timedelta(hours=1))])
    assert "in the future" in (future.reason or "")


def test_join_respects_holds_and_admins() -> None:
    held = NodeState("n1", "idle", frozenset({"DRAIN"}), "nodegate: acceptance failed x[y]")
    assert decide_join(held, [report("n1")]).action is Action.DRAIN  # needs acceptance now
    assert decide_join(held, [report("n1", level="acceptance")]).action is Action.RESUME
    admin = NodeState("n1", "idle", frozenset({"DRAIN"}), "bad fan")
    assert decide_join(admin, [report("n1")]).action is Action.NONE
    slurm_down = NodeState("n1", "down", frozenset({"NOT_RESPONDING"}), "Not responding")
    assert decide_join(slurm_down, [report("n1", faults=NVLINK)]).action is Action.NONE


def test_health() -> None:
    quick_fail = report("n1", level="quick", faults=NVLINK, age=dt.timedelta(minutes=2))
    quick_pass = report("n1", level="quick", age=dt.timedelta(minutes=1))
    drain = decide_health(IDLE, quick_fail)
    assert (drain.action, drain.reason) == (Action.DRAIN, "nodegate: nvlink_state[gpu3.link5]")
    drained = NodeState("n1", "idle", frozenset({"DRAIN"}), drain.reason)
    assert decide_health(drained, quick_fail).action is Action.NONE  # already so
    assert decide_health(drained, quick_pass).action is Action.RESUME
    held = NodeState("n1", "idle", frozenset({"DRAIN"}), "nodegate: standard failed x[y]")
    assert decide_health(held, quick_pass).action is Action.NONE
    kept = decide_health(held, quick_fail)
    assert kept.action is Action.NONE and "stronger hold" in kept.why
    assert decide_health(IDLE, report("n1", level="quick", age=dt.timedelta(hours=3),
                                      faults=NVLINK)).action is Action.NONE  # stale: no change
    assert decide_health(IDLE, report("n1", level="quick", age=dt.timedelta(hours=3),
                                      faults=NVLINK),
                         policy=HealthPolicy(max_age_s=4 * 3600)).action is Action.DRAIN


def test_an_upgrade_drain_is_left_to_the_upgrade() -> None:
    """Upgrades: the cron health never resumes (nor rewrites) a node out for an upgrade; the
    upgrade's own join resumes it on a fresh pass, or drains it with the failure."""
    from nodegate.cluster.gate import decide_join
    from nodegate.cluster.reasons import is_upgrade_hold, upgrade_reason

    reason = upgrade_reason("570.133.20", "580.65.06")
    assert reason == "nodegate: upgrade 570.133.20 -> 580.65.06" and is_upgrade_hold(reason)
    assert not is_upgrade_hold("nodegate: upgraded_by_hand") and not is_upgrade_hold(None)
    out = NodeState("n1", "idle", frozenset({"DRAIN"}), reason)
    quick_pass = report("n1", level="quick", age=dt.timedelta(minutes=1))
    quick_fail = report("n1", level="quick", faults=NVLINK, age=dt.timedelta(minutes=1))
    for latest in (quick_pass, quick_fail):
        kept = decide_health(out, latest)
        assert kept.action is Action.NONE and "upgrade" in kept.why
    assert decide_join(out, [quick_pass], policy=JoinPolicy(level=Level.QUICK)).action \
        is Action.RESUME
    failed = decide_join(out, [quick_fail], policy=JoinPolicy(level=Level.QUICK))
    assert (failed.action, failed.reason) == (Action.DRAIN, "nodegate: nvlink_state[gpu3.link5]")


def test_an_rma_drain_is_lifted_by_no_report_only_by_a_person() -> None:
    """Remediation gave the card up: a quick pass after a reset that cleared the symptom, a
    standard pass, a join and a new failure all leave the RMA drain as it is."""
    from nodegate.cluster.gate import decide_join
    from nodegate.cluster.reasons import is_rma_hold
    from nodegate.remediation.escalation import rma_reason

    reason = rma_reason("gpu5", {"serial": "1654922001234"}, "row remap failure")
    assert reason.startswith("nodegate: RMA gpu5 serial 1654922001234") and is_rma_hold(reason)
    assert is_rma_hold(rma_reason(None, {})) and not is_rma_hold("nodegate: RMAed_by_hand")
    assert not is_rma_hold("nodegate: nvlink_state[gpu3.link5]") and not is_rma_hold(None)
    out = NodeState("n1", "idle", frozenset({"DRAIN"}), reason)
    recent = dt.timedelta(minutes=1)
    for latest in (report("n1", level="quick", age=recent),
                   report("n1", level="standard", age=recent),
                   report("n1", level="quick", faults=NVLINK, age=recent)):
        kept = decide_health(out, latest)
        assert kept.action is Action.NONE and "RMA" in kept.why, kept
        joined = decide_join(out, [latest], policy=JoinPolicy(level=Level.QUICK))
        assert joined.action is Action.NONE and "RMA" in joined.why, joined
