"""docs/runbook.md's recipes run as written, so that one cannot rot: each test takes its
task's command lines and YAML from the page itself (a line the page no longer holds fails
the test) and runs them on what this machine has. The stand-ins, and only these: the site
file the page shows is written to a temporary file (``NODEGATE_SITE=dc1`` names it), the GPU
board is the simulator (``nodegate sim run SCENARIO --`` before a node command, whose
battery reads the board and its kernel log only: ``--checks gpu,log``, since this machine's
own host state is not a GPU node's), Slurm's
``scontrol``/``sinfo``/``squeue`` are executables on PATH that print the node state the task
is about, and every file nodegate writes goes to the test's folder (``NODEGATE_*`` variables).
Commands that need the lab (the bring-up, validation and join over SSH, the rolling upgrade)
are not run here; the lab tests in tests/roles/ run the same entry points."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

RUNBOOK = ROOT / "docs" / "runbook.md"
PY = sys.executable
NODE = "gpu-c017"
SICK = "h100-hgx+xid79@gpu6"
HEALTHY = "h100-hgx"


def _section(task: int) -> str:
    text = RUNBOOK.read_text()
    match = re.search(rf"^## {task}\. .*?(?=^## |\Z)", text, re.S | re.M)
    assert match is not None, f"docs/runbook.md has no task {task}"
    return match.group()


def _commands(task: int) -> list[str]:
    """The section's command lines (indented four spaces, outside YAML blocks)."""
    section = re.sub(r"```.*?```", "", _section(task), flags=re.S)
    return [line[4:] for line in section.splitlines() if line.startswith("    ")]


def _command(task: int, start: str) -> str:
    found = [line for line in _commands(task) if line.startswith(start)]
    assert found, f"task {task} has no command starting {start!r}: {_commands(task)}"
    return found[0]


def _yaml(task: int) -> dict[str, object]:
    blocks = re.findall(r"```yaml\n(.*?)```", _section(task), re.S)
    assert len(blocks) == 1, task
    data = yaml.safe_load(blocks[0])
    assert isinstance(data, dict)
    return data


@pytest.fixture
def place(tmp_path: Path) -> Path:
    (tmp_path / "bin").mkdir()
    return tmp_path


def _env(place: Path) -> dict[str, str]:
    return {**os.environ,
            "PATH": f"{place / 'bin'}{os.pathsep}{Path(PY).parent}{os.pathsep}"
                    f"{os.environ['PATH']}",
            "NODEGATE_LOCK_FILE": str(place / "battery.lock"),
            "NODEGATE_REPORT_DIR": str(place / "reports"),
            "NODEGATE_TEXTFILE_DIR": str(place / "textfile"),
            "NODEGATE_REMEDIATION_DIR": str(place / "remediation"),
            "NODEGATE_HOLDS_DIR": str(place / "holds"),
            "NODEGATE_NODE_FILE": str(place / "node.json"),
            "NODEGATE_PROFILE": "sim-h100-hgx", "NODEGATE_NODE_NAME": NODE,
            "SLURM_CONF": str(place / "slurm.conf")}


def _argv(line: str, *, board: str | None = None, extra: tuple[str, ...] = ()) -> list[str]:
    """The line as a process: ``nodegate`` is this checkout's, ``pyinfra`` the venv's; a node
    command runs on the simulated ``board``."""
    words = shlex.split(line)
    if words[0] == "nodegate":
        words = [PY, "-m", "nodegate", *words[1:]]
        if board is not None:
            words = [PY, "-m", "nodegate", "sim", "run", board, "--", *words]
    elif words[0] == "pyinfra":
        words = [str(Path(PY).parent / "pyinfra"), *words[1:]]
    return [*words, *extra]


def _run(place: Path, line: str, *, board: str | None = None, env: dict[str, str] | None = None,
         extra: tuple[str, ...] = (), cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    if board is not None and line.split()[:2] == ["nodegate", "health"]:
        extra = ("--checks", "gpu,log", *extra)
    assignments = {}
    while re.match(r"^[A-Z_]+=\S+ ", line):
        name, _, line = line.partition(" ")
        key, _, value = name.partition("=")
        assignments[key] = value
    if assignments.get("NODEGATE_SITE") == "dc1":  # the page's site file, written by the test
        assignments["NODEGATE_SITE"] = str(place / "dc1.yaml")
    return subprocess.run(_argv(line, board=board, extra=extra), cwd=cwd,
                          env={**(env or _env(place)), **assignments}, capture_output=True,
                          text=True, timeout=180, check=False)


def _scontrol(place: Path, state: str, reason: str | None = None) -> None:
    """``scontrol show node`` for the task's node, as Slurm 22.05 prints it."""
    line = f"NodeName={NODE} Arch=x86_64 State={state} Partitions=gpu"
    if reason is not None:
        line += f" Reason={reason} [root@2026-12-07T03:00:00]"
    script = place / "bin" / "scontrol"
    script.write_text(f"#!/bin/sh\necho {shlex.quote(line)}\n")
    script.chmod(0o755)


def _gate_drained(place: Path, reason: str) -> None:
    """The node as the scheduled gate leaves it after a FAIL: drained with ``reason`` in
    Slurm, and the drain in nodegate's record (what lets a later pass lift it)."""
    from nodegate.cluster.holds_store import HoldStore, Kind, Record

    _scontrol(place, "IDLE+DRAIN", reason)
    HoldStore(place / "holds").put(Record(NODE, reason, Kind.HEALTH))


def _inventory(out: str) -> dict[str, dict[str, object]]:
    """``pyinfra ... debug-inventory``'s hosts and their data."""
    hosts = {}
    for host, body in re.findall(r"^\[([^\]]+)\]\s*\n--> Groups: .*?\n--> Data:\n(\{.*?\n\})",
                                 out, re.S | re.M):
        hosts[host] = json.loads(body)
    return hosts


def _write_site(place: Path, **changes: object) -> Path:
    site = dict(_yaml(1))
    site.update(changes)
    path = place / "dc1.yaml"
    path.write_text(yaml.safe_dump(site))
    return path


def _check_inventory(place: Path, task: int) -> dict[str, dict[str, object]]:
    done = _run(place, _command(task, "NODEGATE_SITE=dc1 pyinfra inventory.py debug-inventory"))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return _inventory(done.stdout + done.stderr)  # pyinfra prints it on stderr


def test_task_1_the_site_file_checks_without_contacting_a_host(place: Path) -> None:
    _write_site(place)
    hosts = _check_inventory(place, 1)
    assert len(hosts) == 64 and hosts["gpu-c064"]["ssh_hostname"] == "10.30.1.74"
    assert hosts["gpu-c064"]["nodegate_bmc"]["url"] == "https://10.30.101.74"  # type: ignore[index]
    disks = hosts["gpu-c001"]["nodegate_nvme"]["devices"]  # type: ignore[index]
    assert len(disks) == 8 and "nodegate_nvme" not in hosts["gpu-c002"]
    # a mistake is one line naming the file, host and key, exit 2
    broken = _write_site(place).read_text().replace("10.30.1.[11-74]", "10.30.1.[11-73]")
    (place / "dc1.yaml").write_text(broken)
    done = _run(place, _command(1, "NODEGATE_SITE=dc1 pyinfra"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"{place / 'dc1.yaml'}, key hosts.gpu-c[001-064].address" in done.stderr


def test_task_3_the_fleet_view_names_the_node_that_failed_acceptance(place: Path) -> None:
    """The acceptance reports as deploy/validate.py leaves them on the bastion (written here
    by the report writer, for three nodes, one with a downed NVLink), read by the recipe's
    ``nodegate report``."""
    from nodegate.report.outputs import write_outputs
    from nodegate_lab.synthetic_fleet import synthetic_report

    for node, faults in (("gpu-c001", ()), ("gpu-c002", ()),
                         ("gpu-c003", ("nvlink-down@gpu3.link5",))):
        report = synthetic_report(node, level="acceptance", faults=faults, samples=5)
        write_outputs(report, report_dir=place / "reports" / node, textfile_dir=None)
    done = _run(place, _command(3, "nodegate report reports/"), cwd=place)
    assert done.returncode == 1, done.stderr  # a node failed
    assert "gpu-c003" in done.stdout and "nvlink_state" in done.stdout, done.stdout[-2000:]
    assert (place / "fleet.html").stat().st_size > 1000


def test_task_4_an_xid_79_drains_and_a_pass_after_the_power_cycle_lifts(place: Path) -> None:
    from nodegate.cluster.gate import drain_reason
    from nodegate.report import load

    _scontrol(place, "MIXED")
    health = _run(place, _command(4, "nodegate health"), board=SICK)
    assert health.returncode == 1, health.stderr
    report = load(place / "reports" / "quick-latest.json")
    assert any(r.check == "xid_events" and r.entity == "gpu6" and r.verdict.value == "FAIL"
               for r in report.results)
    gate = _run(place, _command(4, "nodegate gate --node gpu-c017 --dry-run"))
    assert gate.returncode == 0 and f"{NODE} drain (dry run)" in gate.stdout, gate.stdout
    # the scheduled gate drained it; after the power cycle the board is healthy again
    _gate_drained(place, drain_reason(report))
    assert _run(place, _command(4, "nodegate health"), board=HEALTHY).returncode == 0
    gate = _run(place, _command(4, "nodegate gate --node gpu-c017 --dry-run"))
    assert gate.returncode == 0 and f"{NODE} resume (dry run)" in gate.stdout, gate.stdout


def test_task_5_one_partition_opts_in_to_remediation_in_dry_run(place: Path) -> None:
    from nodegate.cluster.gate import drain_reason
    from nodegate.report import load

    groups = _yaml(5)["groups"]
    _write_site(place, groups=groups)
    hosts = _check_inventory(place, 5)
    assert hosts["gpu-c001"]["remediate_enabled"] is True
    assert hosts["gpu-c001"]["remediate_dry_run"] is True
    # the dry run on a node nodegate drained for its Xid 79 says what it would do
    _scontrol(place, "MIXED")
    assert _run(place, _command(4, "nodegate health"), board=SICK).returncode == 1
    _gate_drained(place, drain_reason(load(place / "reports" / "quick-latest.json")))
    done = _run(place, _command(5, "nodegate remediate"), board=SICK)
    assert f"nodegate remediate: {NODE}:" in done.stdout + done.stderr, done.stderr
    assert "power_cycle gpu6" in done.stdout + done.stderr
    assert not (place / "remediation" / f"{NODE}.json").exists()  # a dry run records nothing


def test_task_6_the_sweep_dry_run_says_what_it_would_submit(place: Path) -> None:
    for name, line in (("sinfo", "gpu-c017|idle|Unknown|none"), ("squeue", "")):
        script = place / "bin" / name
        script.write_text(f"#!/bin/sh\necho {shlex.quote(line)}\n" if line else "#!/bin/sh\n")
        script.chmod(0o755)
    line = _command(6, "nodegate sweep")
    assert "--dry-run" in line
    # the controller's ledger is the test's (the default is /var/lib/nodegate/sweep/)
    done = _run(place, line, extra=("--ledger", str(place / "ledger.json"), "--json"))
    assert done.returncode == 0, done.stderr
    assert NODE in done.stdout and not (place / "ledger.json").exists()


def test_task_7_a_persons_drain_stays_through_a_pass(place: Path) -> None:
    line = _command(7, "scontrol update NodeName=gpu-c017 State=DRAIN")
    reason = shlex.split(line)[-1].partition("=")[2]
    assert reason == "BIOS update (alice)"
    _scontrol(place, "IDLE+DRAIN", reason)
    assert _run(place, _command(4, "nodegate health"), board=HEALTHY).returncode == 0
    gate = _run(place, _command(7, "nodegate gate --node gpu-c017 --dry-run"))
    assert gate.returncode == 0 and f"{NODE} none (dry run)" in gate.stdout
    assert "nodegate does not touch it" in gate.stdout


def test_task_8_the_driver_version_lives_in_the_site_file(place: Path) -> None:
    overrides = _yaml(8)["profile_overrides"]
    _write_site(place, profile_overrides=overrides)
    hosts = _check_inventory(place, 8)
    driver = hosts["gpu-c033"]["nodegate_profile_data"]["driver"]  # type: ignore[index]
    assert driver["version"] == "580.65.06" and driver["branch"] == "580"
    upgrade = _command(8, "pyinfra inventory.py deploy/rolling_upgrade.py")
    assert f"nvidia_driver_version={driver['version']}" in upgrade  # both say one version


def test_task_9_the_monitoring_files_check(place: Path) -> None:
    import shutil

    if shutil.which("promtool") is None:
        if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
            pytest.fail("promtool not installed under CI (Debian: prometheus)")
        pytest.skip("promtool not installed (Debian: prometheus)")
    for written in _commands(9):
        cwd, line = ROOT, written
        if written.startswith("cd "):
            folder, _, line = written[3:].partition(" && ")
            cwd = ROOT / folder
        done = _run(place, line, cwd=cwd)
        assert done.returncode == 0, written + "\n" + done.stdout + done.stderr
        assert "SUCCESS" in done.stdout + done.stderr


def test_task_10_an_rma_hold_outlasts_a_pass(place: Path) -> None:
    _scontrol(place, "IDLE+DRAIN", "nodegate: RMA gpu6 power_cycle did not cure xid_events")
    assert _run(place, _command(4, "nodegate health"), board=HEALTHY).returncode == 0
    gate = _run(place, _command(10, "nodegate gate --node gpu-c017 --dry-run"))
    assert gate.returncode == 0 and f"{NODE} none (dry run)" in gate.stdout
    assert "RMA" in gate.stdout
    bundle = _command(10, "scp ")
    assert f"rma-{NODE}-" in bundle and "/var/lib/nodegate/remediation/rma/" in bundle
