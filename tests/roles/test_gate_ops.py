"""The gate operations (roles/ops/gate.py): the battery, the all-reduce and the join run as commands
of operations; facts only read (the join plan, a recorded result); the verdict is taken while
executing, from what was fetched or read. Facts in, commands out, as for the roles, plus the
harness's execution walk for the fetch and the verdict."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nodegate.facts.gate import JoinPlan, RecordedRun, parse_recorded
from roles.ops import gate
from tests.roles.harness import Result, run

NODEGATE = "/opt/nodegate/venv/bin/nodegate"
PROFILE = "/etc/nodegate/profile.json"
REPORT = {"schema": "nodegate.report/1", "node": "testhost", "verdict": "PASS",
          "results": [{"check": "gpu_count", "verdict": "PASS", "measured": 8.0}]}
RUN = "/run/nodegate/gate"
BATTERY = (f"mkdir -p {RUN} && rm -f {RUN}/quick.json {RUN}/quick.exit {RUN}/quick.err && "
           f"{{ {NODEGATE} health --profile {PROFILE} --json --color never --checks gpu,log "
           f"> {RUN}/quick.json 2> {RUN}/quick.err ; echo $? > {RUN}/quick.exit ; }}")
EXITS = "(1 = a check failed, 2 = bad input, 3 = could not run)"


def battery(fetch: Path, *, fail_host: bool = True, executing: bool = True,
            remote: dict[str, str] | None = None) -> Result:
    def role() -> None:
        gate.health_gate(name="gate: nodegate health", nodegate_bin=NODEGATE,
                         profile_path=PROFILE, fetch_dir=str(fetch),
                         extra_args=["--checks", "gpu,log"], fail_host=fail_host)

    return run(role, executing=executing, remote=remote)


def recorded(name: str, document: str, code: str, err: str = "") -> dict[str, str]:
    """What a recorded run leaves on the node (its stderr too)."""
    return {f"{RUN}/{name}.json": document, f"{RUN}/{name}.exit": code, f"{RUN}/{name}.err": err}


def test_prepared_the_battery_is_the_operations_one_command(tmp_path: Path) -> None:
    result = battery(tmp_path, executing=False)
    assert result.commands == [BATTERY]
    assert not tmp_path.exists() or not any(tmp_path.iterdir())  # nothing fetched or written


def test_a_passing_battery_is_fetched_and_kept_as_before(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    host_dir = tmp_path / "testhost"
    result = battery(tmp_path, remote=recorded("quick", json.dumps(REPORT) + "\n\n", "0\n"))
    assert result.commands == [
        BATTERY,
        f"download {RUN}/quick.json {host_dir}/.quick.report",
        f"download {RUN}/quick.exit {host_dir}/.quick.exit",
        f"download {RUN}/quick.err {host_dir}/.quick.err",
        "function _verdict",
    ]
    assert result.failed == []
    # the same bytes the fact-based gate wrote: json.dumps(report, indent=2) + newline
    assert (host_dir / "quick-latest.json").read_text() == json.dumps(REPORT, indent=2) + "\n"
    assert sorted(p.name for p in host_dir.iterdir()) == ["quick-latest.json"]  # staging gone
    assert result.noops == [f"validation gate passed (report in {host_dir})"]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_failing_battery_fails_the_host_with_the_same_message(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    failing = {**REPORT, "verdict": "FAIL"}
    result = battery(tmp_path, remote=recorded("quick", json.dumps(failing), "1"))
    host_dir = tmp_path / "testhost"
    assert result.failed == ["gate: nodegate health"]
    assert json.loads((host_dir / "quick-latest.json").read_text())["verdict"] == "FAIL"
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == [f"testhost: validation gate: nodegate health exited 1 {EXITS}; "
                      f"report in {host_dir}"]


def test_without_fail_host_a_failed_check_goes_on_to_the_join(tmp_path: Path) -> None:
    failing = {**REPORT, "verdict": "FAIL"}
    result = battery(tmp_path, fail_host=False, remote=recorded("quick", json.dumps(failing), "1"))
    assert result.failed == []
    assert result.noops == [f"validation gate FAILED (report in {tmp_path / 'testhost'}); "
                            "the join gate drains the node"]
    # but a battery that could not run fails the host even then
    result = battery(tmp_path, fail_host=False, remote=recorded("quick", "", "3"))
    assert result.failed == ["gate: nodegate health"]


def test_a_run_without_a_report_leaves_the_last_one(tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    latest = tmp_path / "testhost" / "quick-latest.json"
    latest.parent.mkdir()
    latest.write_text("the previous report\n")
    result = battery(tmp_path, remote=recorded("quick", "Traceback (most recent", ""))
    assert result.failed == ["gate: nodegate health"]
    assert latest.read_text() == "the previous report\n"
    assert any("exited 3 " in r.getMessage() for r in caplog.records)  # no exit code: 3


def test_recorded_results_parse_as_the_facts_did() -> None:
    assert parse_recorded(json.dumps(REPORT, indent=2), "0\n") == {"exit": 0, "report": REPORT,
                                                                    "stderr": ""}
    assert parse_recorded("", "") == {"exit": 3, "report": None, "stderr": ""}
    assert parse_recorded("[1, 2]", "1") == {"exit": 1, "report": None,  # not a report
                                             "stderr": ""}
    assert parse_recorded("{", "127", "a\n\nb\n") == {"exit": 127, "report": None,
                                                       "stderr": "a | b"}
    fact = RecordedRun()
    assert str(fact.command(stem=f"{RUN}/join").get_raw_value()) == (
        f"cat {RUN}/join.json 2>/dev/null; echo NODEGATE_EXIT=$(cat {RUN}/join.exit 2>/dev/null);"
        f" tail -n 20 {RUN}/join.err 2>/dev/null | sed 's/^/NODEGATE_STDERR=/'")
    assert fact.process(['{"action": "none"}', "NODEGATE_EXIT=0"]) == {
        "exit": 0, "report": {"action": "none"}, "stderr": ""}
    assert fact.process(["NODEGATE_EXIT=2", "NODEGATE_STDERR=nodegate gate: error: no "
                         "report"]) == {"exit": 2, "report": None,
                                        "stderr": "nodegate gate: error: no report"}


# --- the multi-node pair ----------------------------------------------------------------------


def pair(fetch: Path, *, peer: str, new: str, remote: dict[str, str] | None = None,
         executing: bool = True, more: tuple[str, ...] = ()) -> Result:
    def role() -> None:
        gate.multinode_group(name="gate: multinode", nodegate_bin=NODEGATE,
                             profile_path=PROFILE, report_dir="/var/lib/nodegate/reports",
                             fetch_dir=str(fetch), peer=peer, members=[new, *more],
                             addresses={"testhost": "10.0.0.2", "other": "10.0.0.1",
                                        "third": "10.0.0.3"},
                             port=29400, join_timeout_s=120.0)

    return run(role, executing=executing, remote=remote)


def test_the_node_under_test_runs_its_side_and_keeps_the_report(tmp_path: Path) -> None:
    report = {**REPORT, "labels": {"suite": "multinode"}}
    result = pair(tmp_path, peer="other", new="testhost",
                  remote=recorded("multinode", json.dumps(report), "0"))
    run_cmd, *fetched, judge = result.commands
    assert "multinode --role join --endpoint 10.0.0.1:29400 --peer-name other " \
           "--rdzv-id nodegate-testhost-other --local-addr 10.0.0.2" in run_cmd
    assert run_cmd.endswith(f"> {RUN}/multinode.json 2> {RUN}/multinode.err ; "
                            f"echo $? > {RUN}/multinode.exit ; }}")
    assert [f.split()[1] for f in fetched] == [f"{RUN}/multinode.json", f"{RUN}/multinode.exit",
                                               f"{RUN}/multinode.err"]
    assert judge == "function _verdict" and result.failed == []
    assert json.loads((tmp_path / "testhost" / "multinode-latest.json").read_text()) == report


def test_a_failed_pair_fails_the_node_under_test(tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    result = pair(tmp_path, peer="other", new="testhost",
                  remote=recorded("multinode", json.dumps(REPORT), "1"))
    assert result.failed == ["gate: multinode"]
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR] == [
        f"testhost: multinode testhost + other: nodegate multinode exited 1 {EXITS}; "
        f"report in {tmp_path / 'testhost'}"]


def test_the_peer_is_the_reference_never_failed_nor_kept(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    result = pair(tmp_path, peer="testhost", new="other",
                  remote={f"{RUN}/multinode.exit": "1\n",  # only the exit code (and stderr)
                          f"{RUN}/multinode.err": ""})
    assert "--role host --endpoint 10.0.0.2:29400" in result.commands[0]
    assert result.commands[1:] == [
        f"download {RUN}/multinode.exit {tmp_path / 'testhost'}/.multinode.exit",
        f"download {RUN}/multinode.err {tmp_path / 'testhost'}/.multinode.err",
        "function _verdict"]
    assert result.failed == []
    assert not (tmp_path / "testhost" / "multinode-latest.json").exists()
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        "testhost: multinode other + testhost: nodegate multinode exited 1 (the node under "
        "test is judged, not this one)"]


@dataclass(frozen=True)
class Gone:
    name: str


def test_a_partner_that_failed_leaves_nothing_to_run(tmp_path: Path,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    def role() -> None:
        from pyinfra.context import host

        host.state.failed_hosts.add(Gone("other"))  # failed earlier in the run
        gate.multinode_group(name="gate: multinode", nodegate_bin=NODEGATE,
                             profile_path=PROFILE, report_dir="/var/lib/nodegate/reports",
                             fetch_dir=str(tmp_path), peer="other", members=["testhost"],
                             addresses={"testhost": "10.0.0.2", "other": "10.0.0.1"},
                             port=29400, join_timeout_s=120.0)

    result = run(role, executing=True)
    assert result.commands == [] and result.failed == []
    assert result.noops == ["multinode: other failed or left the run"]
    assert "testhost: multinode: other is not in the run any more; no group run with it" in \
        caplog.messages


def test_a_host_outside_the_pair_runs_nothing(tmp_path: Path) -> None:
    result = pair(tmp_path, peer="other", new="third")
    assert result.commands == [] and result.noops == ["multinode: not in the group third + other"]


def test_a_group_of_three_runs_with_nnodes_3_and_the_host_names_every_member(
        tmp_path: Path) -> None:
    joined = pair(tmp_path, peer="other", new="testhost", more=("third",),
                  remote=recorded("multinode", json.dumps(REPORT), "0"))
    assert "--peer-name other --rdzv-id nodegate-testhost-third-other " in joined.commands[0]
    assert "--nnodes 3" in joined.commands[0] and joined.failed == []
    hosting = pair(tmp_path, peer="testhost", new="other", more=("third",),
                   remote={f"{RUN}/multinode.exit": "0\n", f"{RUN}/multinode.err": ""})
    assert "--role host --endpoint 10.0.0.2:29400 --peer-name other,third " in \
        hosting.commands[0] and "--nnodes 3" in hosting.commands[0]


def test_a_member_that_failed_is_left_out_of_the_group(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    def role() -> None:
        from pyinfra.context import host

        host.state.failed_hosts.add(Gone("third"))
        gate.multinode_group(name="gate: multinode", nodegate_bin=NODEGATE,
                             profile_path=PROFILE, report_dir="/var/lib/nodegate/reports",
                             fetch_dir=str(tmp_path), peer="other",
                             members=["testhost", "third"],
                             addresses={"testhost": "10.0.0.2", "other": "10.0.0.1",
                                        "third": "10.0.0.3"},
                             port=29400, join_timeout_s=120.0)

    result = run(role, executing=True, remote=recorded("multinode", json.dumps(REPORT), "0"))
    assert "--nnodes 2" in result.commands[0] and "nodegate-testhost-other" in result.commands[0]
    assert "testhost: multinode: third is not in the run any more; the group runs without it" \
        in caplog.messages


# --- the join ---------------------------------------------------------------------------------

PLAN_KEY = (f"level=standard,node=gpu-b01,nodegate={NODEGATE},"
            "report_dir=/var/lib/nodegate/reports,require=multinode")
JOIN = (f"{NODEGATE} gate --mode join --level standard --node gpu-b01 "
        "--report-dir /var/lib/nodegate/reports --require multinode --json")


def join(plan: dict[str, Any], acted: dict[str, Any] | None = None) -> Result:
    facts: dict[str, Any] = {"gate.JoinPlan": {PLAN_KEY: plan}}
    if acted is not None:
        facts["gate.RecordedRun"] = acted

    def role() -> None:
        gate.join_gate(name="gate: Slurm join/drain", nodegate_bin=NODEGATE, level="standard",
                       node="gpu-b01", report_dir="/var/lib/nodegate/reports",
                       require=("multinode",))

    return run(role, facts=facts, executing=True)


def decision(action: str, changed: bool, why: str = "standard report PASS and fresh",
             after: str = "IDLE") -> dict[str, Any]:
    return {"node": "gpu-b01", "mode": "join", "action": action, "why": why,
            "changed": changed, "after": after}


def test_the_plan_is_a_dry_run_and_the_act_is_not() -> None:
    plan = str(JoinPlan().command(nodegate=NODEGATE, level="standard", node="gpu-b01",
                                  report_dir="/var/lib/nodegate/reports",
                                  require=["multinode"]).get_raw_value())
    assert plan == "err=$(mktemp) || exit 3; " + JOIN.replace(" --json", " --dry-run --json") \
        + ' 2>"$err"; echo NODEGATE_EXIT=$?; tail -n 20 "$err" | ' \
        + "sed 's/^/NODEGATE_STDERR=/'; rm -f \"$err\""
    # a plan that could not be made says why, in the node's own words
    assert JoinPlan().process(["NODEGATE_EXIT=2", "NODEGATE_STDERR=nodegate gate: error: "
                               "no profile"]) == {"exit": 2, "decision": None,
                                                  "stderr": "nodegate gate: error: no profile"}


def test_a_converged_node_runs_no_command() -> None:
    result = join({"exit": 0, "decision": decision("none", False, "in service; standard "
                                                   "report PASSes")})
    assert result.commands == [] and result.failed == []
    assert result.noops == ["join gate: gpu-b01 none: in service; standard report PASSes [IDLE]"]
    # an administrator's drain: no change and no failure (the plan says none, no reason)
    foreign = decision("none", False, "IDLE+DRAIN (maintenance): taken out by an "
                       "administrator or Slurm; nodegate does not touch it",
                       "IDLE+DRAIN (maintenance)")
    result = join({"exit": 0, "decision": {**foreign, "reason": None}})
    assert result.commands == [] and result.failed == []


def test_a_resume_runs_the_real_join(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    result = join({"exit": 0, "decision": decision("resume", False, after="IDLE+DRAIN")},
                  acted={"exit": 0, "report": decision("resume", True)})
    assert result.commands == [
        f"mkdir -p {RUN} && rm -f {RUN}/join.json {RUN}/join.exit {RUN}/join.err && {{ {JOIN} > "
        f"{RUN}/join.json 2> {RUN}/join.err ; echo $? > {RUN}/join.exit ; }}",
        "function _verdict"]
    assert result.failed == []
    assert "testhost: join gate: gpu-b01 resume: standard report PASS and fresh [IDLE]" in \
        caplog.messages


def test_a_drain_drains_then_fails_the_host(caplog: pytest.LogCaptureFixture) -> None:
    drained = {**decision("drain", True, "no multinode report",
                          "IDLE+DRAIN (nodegate: multinode report missing)"),
               "reason": "nodegate: multinode report missing"}
    result = join({"exit": 0, "decision": {**drained, "changed": False, "after": "IDLE"}},
                  acted={"exit": 0, "report": drained})
    assert result.commands[0].startswith(f"mkdir -p {RUN} && ") and JOIN in result.commands[0]
    assert result.failed == ["gate: Slurm join/drain"]
    summary = ("join gate: gpu-b01 drain: no multinode report "
               "[IDLE+DRAIN (nodegate: multinode report missing)]")
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", f"testhost: {summary}"), ("ERROR", f"testhost: {HELD}")]


REASON = "nodegate: nvlink_state[gpu3.link5] FAIL"
AFTER = f"IDLE+DRAIN ({REASON})"
HELD = ("join gate: gpu-b01 held out of service: nodegate: multinode report missing "
        "[IDLE+DRAIN (nodegate: multinode report missing)]")


def test_a_node_still_drained_on_a_rerun_fails_the_host_as_the_first_run_did(
        caplog: pytest.LogCaptureFixture) -> None:
    """The same fleet state (the node FAILs and is drained) gives the same failure and the
    same message whether this run drained it or an earlier one did: the deploy's exit code
    follows the state (the second `make demo` exited 0 with node3 still drained)."""
    acted = {**decision("drain", True, "standard report FAIL", AFTER), "reason": REASON}
    first = join({"exit": 0, "decision": {**acted, "changed": False, "after": "IDLE"}},
                 acted={"exit": 0, "report": acted})
    first_errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    caplog.clear()
    again = {**decision("none", False, f"already drained: {REASON}", AFTER), "reason": REASON}
    rerun = join({"exit": 0, "decision": again})
    rerun_errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert first.failed == rerun.failed == ["gate: Slurm join/drain"]
    assert first_errors == rerun_errors == [
        f"testhost: join gate: gpu-b01 held out of service: {REASON} [{AFTER}]"]
    assert rerun.commands == ["function _verdict"]  # no nodegate gate run: nothing to change


def test_an_unreachable_scheduler_fails_the_host_and_changes_nothing(
        caplog: pytest.LogCaptureFixture) -> None:
    message = ("join gate: nodegate gate exited 3 (2 = bad input, 3 = scheduler unreachable; "
               "nothing was changed)")
    result = join({"exit": 3, "decision": None})
    assert result.commands == ["function _verdict"]  # no nodegate gate that could act
    assert result.failed == ["gate: Slurm join/drain"]
    assert caplog.messages == [f"testhost: {message}"]
    # unreachable between the plan and the act: the same message, after the real command
    result = join({"exit": 0, "decision": decision("resume", False)},
                  acted={"exit": 3, "report": None})
    assert len(result.commands) == 2 and result.failed == ["gate: Slurm join/drain"]
    assert caplog.messages[-1] == f"testhost: {message}"


def test_prepared_the_join_reads_nothing() -> None:
    def role() -> None:
        gate.join_gate(name="gate", nodegate_bin=NODEGATE, level="quick", node="gpu-b01",
                       report_dir="/var/lib/nodegate/reports")

    result = run(role)  # a plan read here would be the default, exit 3, and fail the host
    assert result.commands == []
    assert set(result.noops) == {"join gate runs after validation (level quick)"}


def test_a_join_that_cannot_run_quotes_the_nodes_own_error(
        caplog: pytest.LogCaptureFixture) -> None:
    """A failed join used to say only ``nodegate gate exited 2``; now the node's own last
    stderr lines follow (redacted), from the plan or from the real run."""
    said = "nodegate gate: error: --report-dir /var/lib/nodegate/reports: no such directory"
    result = join({"exit": 2, "decision": None, "stderr": said})
    assert result.failed == ["gate: Slurm join/drain"]
    assert caplog.messages[-1].endswith(f"nothing was changed); the node said: {said}")
    result = join({"exit": 0, "decision": decision("resume", False)},
                  acted={"exit": 2, "report": None, "stderr": said})
    assert caplog.messages[-1].endswith(f"the node said: {said}")


def test_a_battery_that_cannot_run_quotes_the_nodes_own_error(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    err = "Traceback (most recent call last):\n  ...\nnodegate health: error: no profile at " \
          "/etc/nodegate/profile.json (exit 2)\n"
    result = battery(tmp_path, remote=recorded("quick", "", "2", err))
    assert result.failed == ["gate: nodegate health"]
    [error] = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert error.endswith("; the node said: Traceback (most recent call last): | ... | "
                          "nodegate health: error: no profile at /etc/nodegate/profile.json "
                          "(exit 2)")
