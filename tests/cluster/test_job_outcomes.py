"""A scheduler's word verified: srun/sbatch outcomes classified, bounded, framed, and every
output checked before a cluster check or a sweep acts.

Slurm here is a set of fake client executables on PATH that can lie: ``srun`` runs each
task's real script locally (``SLURMD_NODENAME`` set, stdout labelled as ``srun --label``
does) unless told to pend, be refused, find the controller unreachable, print 120 MB or
ignore SIGTERM; ``nodegate`` on the "nodes" prints a prepared report, with garbage before it
or an empty one when told; ``scontrol``/``sinfo``/``scancel`` keep their state in files.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from nodegate.cli import main
from nodegate.cluster import cluster_check as cc
from nodegate.cluster import sweep as sw
from nodegate.cluster.slurm import RetryPolicy, SlurmScheduler
from nodegate.errors import ConfigError
from nodegate.report import build, to_json
from tests.cluster.test_cluster_check import side

NODES = ("n1", "n2", "n3", "n4")

SRUN = r'''
import os, subprocess, sys, time
fake = os.environ["FAKE_SLURM"]
argv = sys.argv[1:]
with open(os.path.join(fake, "srun.log"), "a") as log:
    log.write(" ".join(a for a in argv if a.startswith("--nodelist=")) + "\n")
nodelist = next((a.split("=", 1)[1] for a in argv if a.startswith("--nodelist=")), "")
mode = open(os.path.join(fake, "srun.mode")).read().split() if os.path.exists(
    os.path.join(fake, "srun.mode")) else []
hit = mode and (len(mode) == 1 or any(n in nodelist.split(",") for n in mode[1:]))
if hit and "--nodes=2" in argv:
    if mode[0] == "pending":
        sys.stderr.write("srun: job 17 queued and waiting for resources\n"); sys.stderr.flush()
        time.sleep(60)
    if mode[0] == "refused":
        sys.stderr.write("srun: error: Unable to allocate resources: Requested node "
                         "configuration is not available\n")
        sys.exit(1)
    if mode[0] == "unreachable":
        sys.stderr.write("srun: error: Unable to contact slurm controller (connect failure)\n")
        sys.exit(1)
if "sh" not in argv:
    sys.exit(0)
script = argv[argv.index("sh") + 2]
stdin = sys.stdin.read() if "--nodes=1" in argv else None
rc = 0
for task, node in enumerate(nodelist.split(",")):
    if stdin is not None:  # a report delivery: keep what it would write
        with open(os.path.join(fake, f"delivered.{node}"), "w") as out:
            out.write(stdin)
        continue
    done = subprocess.run(["sh", "-c", script], env={**os.environ, "SLURMD_NODENAME": node},
                          capture_output=True, text=True)
    for line in done.stdout.splitlines():
        sys.stdout.write(f"{task}: {line}\n")
    sys.stderr.write(done.stderr)
    rc = rc or done.returncode
sys.exit(rc)
'''

NODEGATE = r'''
import os, sys
fake = os.environ["FAKE_SLURM"]
node = os.environ["SLURMD_NODENAME"]
junk = os.path.join(fake, "nodegate.junk")
if os.path.exists(junk):
    sys.stdout.write(open(junk).read())
sys.stdout.write(open(os.path.join(fake, f"report.{node}")).read() + "\n")
'''

SCONTROL = r'''
import json, os, sys
fake = os.environ["FAKE_SLURM"]
state_file = os.path.join(fake, "scontrol.state")
state = json.load(open(state_file)) if os.path.exists(state_file) else {}
args = sys.argv[1:]
if args[:1] == ["update"]:
    fields = dict(a.split("=", 1) for a in args[1:])
    with open(os.path.join(fake, "updates.log"), "a") as log:
        log.write(" ".join(args[1:]) + "\n")
    node = fields["NodeName"]
    if fields.get("State") == "DRAIN":
        state[node] = {"state": "IDLE+DRAIN", "reason": fields.get("Reason", "")}
    json.dump(state, open(state_file, "w"))
    sys.exit(0)
node = args[-1]
entry = state.get(node, {"state": "IDLE", "reason": ""})
line = f"NodeName={node} NodeAddr=127.0.0.1 State={entry['state']} Partitions=gpu"
if entry["reason"]:
    line += f" Reason={entry['reason']} [root@2026-12-07T10:00:00]"
print(line)
'''

SINFO = "#!/bin/sh\nfor n in n1 n2 n3 n4; do echo \"$n|idle|Unknown|none\"; done\n"
SCANCEL = "#!/bin/sh\necho \"$@\" >> \"$FAKE_SLURM/scancel.log\"\n"


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fake Slurm's folder: its clients on PATH, a good report for every node."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("srun", SRUN), ("nodegate", NODEGATE), ("scontrol", SCONTROL)):
        (bin_dir / name).write_text(f"#!{sys.executable}\n{body}")
    for name, body in (("sinfo", SINFO), ("scancel", SCANCEL)):
        (bin_dir / name).write_text(body)
    for path in bin_dir.iterdir():
        path.chmod(0o755)
    for node in NODES:
        peer = "n2" if node == "n1" else "n1"
        (tmp_path / f"report.{node}").write_text(side(node, peer, 40.0))
    monkeypatch.setenv("FAKE_SLURM", str(tmp_path))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return tmp_path


def check(fake: Path, *extra: str) -> int:
    return main(["cluster-check", "--partition", "gpu", "--nodegate", str(fake / "bin" /
                 "nodegate"), "--out", str(fake / "out"), "--timeout", "3",
                 "--node-report-dir", str(fake / "node-reports"), *extra])


def srun_calls(fake: Path) -> list[str]:
    log = fake / "srun.log"
    return [line for line in log.read_text().splitlines() if line.count(",")] \
        if log.exists() else []


def updates(fake: Path) -> str:
    log = fake / "updates.log"
    return log.read_text() if log.exists() else ""


# --- finding 5: never started is not failed ----------------------------------------------------

def test_a_well_formed_check_passes_through_the_real_pair_script(fake: Path) -> None:
    assert check(fake) == 0
    data = json.loads((fake / "out" / "cluster-check.json").read_text())
    assert data["verdict"] == "PASS" and len(data["pairs"]) == 6
    assert all(p["busbw_gbps"] == 40.0 for p in data["pairs"])
    assert updates(fake) == ""


@pytest.mark.parametrize("mode", ["pending", "refused"])
def test_a_pair_that_never_started_drains_no_node_and_never_says_failed(
        fake: Path, mode: str, capsys: pytest.CaptureFixture[str]) -> None:
    (fake / "srun.mode").write_text(f"{mode} n4")
    assert check(fake) == 3  # nothing failed, something could not be measured
    err = capsys.readouterr().err
    assert updates(fake) == ""  # n4 not drained: nothing was measured with it
    data = json.loads((fake / "out" / "cluster-check.json").read_text())
    assert data["named"] == {} and data["verdict"] == "NOT_STARTED"
    assert sorted(tuple(sorted((p["a"], p["b"]))) for p in data["not_started"]) == [
        ("n1", "n4"), ("n2", "n4"), ("n3", "n4")]
    assert all(p["attempts"] == 2 for p in data["not_started"])  # retried once
    text = json.dumps(data["not_started"]) + err
    assert "fail" not in text.lower().replace("failed with", "")
    assert all(("n4" not in (p["a"], p["b"])) for p in data["pairs"])
    assert sum("n4" in call for call in srun_calls(fake)) == 6
    assert not (fake / "delivered.n4").exists()  # its last report stays
    assert (fake / "delivered.n1").exists() is False  # n1's pair with n4 never ran either


def test_an_unreachable_controller_is_exit_3_and_nothing_is_drained(
        fake: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (fake / "srun.mode").write_text("unreachable")
    assert check(fake) == 3
    err = capsys.readouterr().err
    assert "Slurm controller unreachable" in err and "nothing drained" in err
    assert updates(fake) == ""


def test_an_srun_whose_child_ignores_sigterm_never_outlives_its_timeout(
        tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    srun = tmp_path / "srun"
    srun.write_text(f"#!/bin/sh\ntrap '' TERM\nsleep 30 &\necho $! > {pid_file}\nwait\n"
                    "wait\n")
    srun.chmod(0o755)
    started = time.monotonic()
    run = cc.srun_runner(str(srun), "true")(["--job-name=x"], 1.0, None)
    took = time.monotonic() - started
    assert run.returncode is None
    assert took < 1.0 + 5.0 + 2.0, took  # the timeout, the grace, scheduling slack
    child = int(pid_file.read_text())
    time.sleep(0.2)
    assert not _running(child)


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie waits for whoever reaps orphans here)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_120_mb_of_output_is_error_and_memory_stays_bounded(tmp_path: Path) -> None:
    srun = tmp_path / "srun"
    srun.write_text("#!/bin/sh\necho '0: nodegate-task-started'\n"
                    "head -c 120000000 /dev/zero | tr '\\0' x\n")
    srun.chmod(0o755)
    run = cc.srun_runner(str(srun), "true")(["--job-name=x"], 60.0, None)
    assert len(run.stdout) + len(run.stderr) <= 2 * 4 * 1024 * 1024
    got = cc.judge_pair("n1", "n2", run, 60.0)
    assert isinstance(got, list) and got[0].verdict == "ERROR"
    assert got[0].detail.startswith("output over 4194304 bytes")


# --- finding 6: output parsed by a frame and a schema ----------------------------------------

def test_a_warning_with_a_brace_before_the_report_does_not_hide_it(fake: Path) -> None:
    (fake / "nodegate.junk").write_text("UserWarning: {'nccl': 'deprecated'} see docs\n{\n")
    assert check(fake) == 0
    assert updates(fake) == ""


@pytest.mark.parametrize("body", [
    '{"node": "n1", "verdict": "PASS", "results": []}',
    "schema-valid-empty",
])
def test_a_report_without_results_is_error_never_pass(fake: Path, body: str) -> None:
    for node in NODES:
        text = body.replace('"n1"', f'"{node}"')
        if body == "schema-valid-empty":  # a valid report of nothing: the schema allows it
            text = to_json(build([], node=node, profile="h100-hgx", level="standard",
                                 started_at=1_700_000_000.0, backend="cpu",
                                 labels={"suite": "multinode"}))
        (fake / f"report.{node}").write_text(text)
    assert check(fake) == 1
    data = json.loads((fake / "out" / "cluster-check.json").read_text())
    assert {p["verdict"] for p in data["pairs"]} == {"ERROR"}
    assert data["named"] == {}  # no pair passed: nothing named, nothing drained


# --- finding 5 (input): empty lists and ports ------------------------------------------------

@pytest.mark.parametrize("nodes", [",", "", " , ", "n1,,n2"])
def test_an_empty_node_list_is_bad_input_naming_the_option(
        fake: Path, nodes: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert check(fake, "--nodes", nodes) == 2
    assert "--nodes" in capsys.readouterr().err
    assert srun_calls(fake) == []


def test_a_port_whose_rounds_pass_65535_is_bad_input(
        fake: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert check(fake, "--port", "65535") == 2  # 4 nodes: 3 rounds, ports up to 65537
    assert "--port" in capsys.readouterr().err
    assert srun_calls(fake) == []
    assert check(fake, "--port", "65533") == 0


# --- finding 7: outputs checked before acting ------------------------------------------------

def test_out_naming_a_regular_file_is_bad_input_before_any_pair_runs(
        fake: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (fake / "out").write_text("an operator's file\n")
    assert check(fake) == 2
    assert str(fake / "out") in capsys.readouterr().err
    assert srun_calls(fake) == [] and (fake / "out").read_text() == "an operator's file\n"


def test_out_under_a_file_is_bad_input_before_any_pair_runs(fake: Path) -> None:
    (fake / "file").write_text("x")
    assert main(["cluster-check", "--partition", "gpu", "--out", str(fake / "file" / "o")]) == 2
    assert srun_calls(fake) == []


class SweepSlurm:
    """sinfo, squeue and an sbatch whose answer the test sets."""

    def __init__(self, answer: str = "1000;lab\n") -> None:
        self.answer = answer
        self.sbatch = 0

    def __call__(self, argv: Sequence[str], env: Mapping[str, str],
                 timeout: float) -> subprocess.CompletedProcess[str]:
        tool = argv[0].rsplit("/", 1)[-1]
        if tool == "sinfo":
            return subprocess.CompletedProcess(argv, 0, "n1|idle|Unknown|none\n"
                                                        "n2|idle|Unknown|none\n", "")
        if tool == "squeue":
            return subprocess.CompletedProcess(argv, 0, "", "")
        self.sbatch += 1
        return subprocess.CompletedProcess(argv, 0, self.answer, "")


def _scheduler(fake: SweepSlurm) -> SlurmScheduler:
    return SlurmScheduler(runner=fake, retry=RetryPolicy(attempts=1), sleep=lambda _s: None,
                          controller="slurmctl:6817")


POLICY = sw.SweepPolicy(partition="gpu", period_s=86400.0, max_concurrent=4)


def test_a_symlinked_ledger_is_refused_before_anything_is_submitted(tmp_path: Path) -> None:
    real = tmp_path / "elsewhere.json"
    real.write_text('{"schema": "nodegate.sweep-ledger/1", "nodes": {}}\n')
    ledger = tmp_path / "ledger.json"
    ledger.symlink_to(real)
    slurm = SweepSlurm()
    with pytest.raises(ConfigError, match="symbolic link"):
        sw.sweep(_scheduler(slurm), POLICY, ledger, now=1_800_000_000.0)
    assert slurm.sbatch == 0


def test_a_two_million_digit_job_id_is_garbled_and_the_ledger_stays_small(
        tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.json"
    slurm = SweepSlurm("7" * 2_000_000 + "\n")
    out = sw.sweep(_scheduler(slurm), POLICY, ledger, now=1_800_000_000.0)
    assert out.error is not None and "garbled job id (2000000 characters" in out.error
    assert slurm.sbatch == 1  # stopped at the garbled answer
    assert ledger.stat().st_size < 4096
    assert sw.read_ledger(ledger)["n1"]["job"] is None  # the act is recorded, bounded
    slurm.answer = "1001\n"
    later = sw.sweep(_scheduler(slurm), POLICY, ledger, now=1_800_000_000.0 + 2 * 86400)
    assert later.error is None and set(later.submitted) == {"n1", "n2"}


def test_a_ledger_over_its_cap_is_rotated_not_a_reason_to_stop(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ledger = tmp_path / "ledger.json"
    nodes = {f"old{i:06d}": {"submitted": 1.0, "job": str(i)} for i in range(40000)}
    sw.write_ledger(ledger, nodes)
    assert ledger.stat().st_size > 1024 * 1024
    slurm = SweepSlurm()
    out = sw.sweep(_scheduler(slurm), POLICY, ledger, now=1_800_000_000.0)
    assert out.error is None and set(out.submitted) == {"n1", "n2"}
    assert any("over its" in note for note in out.notes)
    assert (tmp_path / "ledger.json.1").stat().st_size > 1024 * 1024
    assert set(sw.read_ledger(ledger)) == {"n1", "n2"}


# --- finding 4 (cluster-check's part): Slurm's answer verified -------------------------------

def test_an_empty_sinfo_answer_is_could_not_ask_not_bad_input(
        fake: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (fake / "bin" / "sinfo").write_text("#!/bin/sh\nexit 0\n")
    assert check(fake) == 3
    assert "could not ask" in capsys.readouterr().err
    assert srun_calls(fake) == [] and updates(fake) == ""


def test_an_scontrol_answer_for_another_node_is_could_not_ask(
        fake: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (fake / "bin" / "scontrol").write_text(
        "#!/bin/sh\necho 'NodeName=n2 NodeAddr=10.9.9.2 State=IDLE Partitions=gpu'\n")
    assert check(fake) == 3
    err = capsys.readouterr().err
    assert "could not ask" in err and "n2" in err  # the adapter's verified read names both
    assert srun_calls(fake) == [] and updates(fake) == ""
    assert srun_calls(fake) == [] and updates(fake) == ""


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A small tmpfs with one page free (the lock's pid takes it): a full ledger disk."""
    mount = tmp_path / "full"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)],
            capture_output=True, check=False).returncode != 0:
        pytest.skip("needs root to mount a small tmpfs")
    try:
        (mount / "gap").write_bytes(b"x" * 4096)
        with contextlib.suppress(OSError), (mount / "filler").open("wb") as out:
            while True:
                out.write(b"x" * 4096)
                out.flush()
        (mount / "gap").unlink()
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_a_submission_that_cannot_be_recorded_is_exit_3_naming_the_job(
        full_disk: Path, capsys: pytest.CaptureFixture[str]) -> None:
    slurm = SweepSlurm("4242\n")
    out = sw.sweep(_scheduler(slurm), POLICY, full_disk / "ledger.json", now=1_800_000_000.0)
    assert slurm.sbatch == 1  # stopped at the first job it could not record
    assert out.error is not None and out.error.startswith("n1: job 4242 submitted but not "
                                                          "recorded")
