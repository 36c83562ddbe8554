"""Driver upgrades on the lab over real SSH, apt and Slurm.

One lab of 4 nodes (node2 runs a simulated GPU process: ``foreign-process@gpu0``), deployed
once at the lab's driver A = 570.133.20. The tests run in file order and build on each other:

1. reboots: the busy node2 is refused, the drained idle node1 reboots and comes back;
2. a rolling upgrade to B = 580.65.06 in batches of 2: node1 upgrades, node2 fails (its GPU
   process refuses the reboot), the rollout stops: node3 and node4 untouched;
3. the single-node upgrade A -> B end to end on node3: drain, upgrade, reboot, validate,
   resume: it runs B, its report passes and it is idle in Slurm;
4. a broken build (580.76.05: its kernel module fails to build) on node4: left drained with
   the upgrade reason and the version it left recorded.

Runs on NODEGATE_LAB_INSTANCE (set it: the default lab is someone else's), on the lab-upgrade
group's one lab (tests/roles/lab_group.py): reset to its baseline with this fault, or brought
up when there is none (and taken down after the group's last file).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodegate.cluster.slurm import parse_show_node
from nodegate_lab import config as lab_config
from tests.roles.lab_group import group_lab, lab_command
from tests.roles.test_lab_e2e import pyinfra

ROOT = Path(__file__).resolve().parents[2]
NODES = ("node1", "node2", "node3", "node4")
A, B, BROKEN = "570.133.20", "580.65.06", "580.76.05"
REBOOT_TIMEOUT = "180"  # the lab's nodes boot in seconds; a hang must end the test, not CI
pytestmark = [
    pytest.mark.lab, pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("systemd-nspawn") is None,
                       reason="the lab needs root and systemd-nspawn"),
    pytest.mark.skipif(lab_config.INSTANCE == 0,
                       reason="set NODEGATE_LAB_INSTANCE: instance 0 is the shared default lab"),
]


def sh(node: str, command: str) -> str:
    result = lab_command("shell", node, "--", command, timeout=120)
    assert result.returncode == 0, (node, command, result.stdout, result.stderr)
    return result.stdout.strip()


def slurm(node: str) -> tuple[str, str]:
    """(state token, reason) of ``node`` as the controller sees it."""
    line = sh("slurmctl", f"scontrol show node -o {node}")
    state = re.search(r"\sState=(\S+)", line)
    return (state.group(1) if state else "?", parse_show_node(line).reason or "")


def boots(node: str) -> int:
    return int((lab_config.lab_dir() / "hosts" / node / "boots").read_text())


def package(node: str, name: str) -> str:
    return sh(node, f"dpkg-query -W -f='${{Version}}' {name} 2>/dev/null || true")


def running_driver(node: str) -> str:
    return sh(node, "/opt/nodegate/venv/bin/python -c 'import pynvml as n; n.nvmlInit(); "
                    "print(n.nvmlSystemGetDriverVersion())'")


#: The lab's driver set is the recorded Debian 12 graph (nodegate_lab.driver_graph): these are
#: some of the packages the old pin globs missed, installed only through exact-version Depends.
SET_SAMPLE = ("libcuda1", "nvidia-alternative", "xserver-xorg-video-nvidia", "libglx-nvidia0",
              "nvidia-legacy-check", "nvidia-egl-common")


def driver_set(node: str) -> dict[str, str]:
    """name -> version of the node's installed packages the role pins (APT_PIN_PATTERNS);
    ``ii`` and ``hi`` (held) both say installed."""
    from fnmatch import fnmatchcase

    from roles.driver_pins import APT_PIN_PATTERNS

    lines = sh(node, "dpkg-query -W -f='${db:Status-Abbrev} ${Package} ${Version}\\n'")
    return {f[1]: f[2] for f in (line.split() for line in lines.splitlines())
            if f[0][1:2] == "i" and any(fnmatchcase(f[1], p) for p in APT_PIN_PATTERNS)}


def apt_transaction(node: str, package: str) -> tuple[float, int]:
    """(seconds, packages) of the last apt transaction that named ``package`` on its command
    line, from the node's /var/log/apt/history.log (apt's own Start-Date/End-Date)."""
    from datetime import datetime

    text = sh(node, "cat /var/log/apt/history.log")
    blocks = [b for b in text.split("\n\n") if re.search(
        rf"^Commandline: .*apt-get install .*\b{re.escape(package)}\b", b, re.M)]
    block = blocks[-1]
    start, end = (datetime.strptime(re.search(rf"^{k}: (.*)$", block, re.M).group(1).strip(),
                                    "%Y-%m-%d  %H:%M:%S")  # type: ignore[union-attr]
                  for k in ("Start-Date", "End-Date"))
    changed = len(re.findall(r"\(\d[^)]*\)", "".join(
        line for line in block.splitlines() if line.startswith(("Install:", "Upgrade:")))))
    return (end - start).total_seconds(), changed


@pytest.fixture(scope="module")
def lab(request: pytest.FixtureRequest) -> Iterator[None]:
    with group_lab(request, {"node2": "foreign-process@gpu0"}):
        first = pyinfra("deploy.py", timeout=1200)
        assert first.returncode == 0, first.stdout[-4000:]
        for node in NODES:
            assert package(node, "nvidia-driver").startswith(f"{A}-"), node
            installed = driver_set(node)
            assert set(SET_SAMPLE) <= set(installed), (node, sorted(installed))
            assert set(installed.values()) == {f"{A}-1"}, (node, installed)
            assert set(SET_SAMPLE) <= set(sh(node, "apt-mark showhold").split()), node
        took, count = apt_transaction("node1", "nvidia-driver")
        print(f"\nnode1: the driver's apt install at {A}: {count} packages in {took:.0f}s "
              f"({len(driver_set('node1'))} of the pinned set installed)")
        yield


def test_a_reboot_skips_the_busy_node_and_brings_the_drained_idle_node_back(lab: None) -> None:
    """Reboots: both need a reboot (a boot setting changed); node2 has a GPU process."""
    for node in ("node1", "node2"):
        sh(node, "mkdir -p /run/nodegate && touch /run/nodegate/reboot-required")
        sh("slurmctl", f"scontrol update NodeName={node} State=DRAIN Reason='admin: reboot'")
    before = {n: (boots(n), sh(n, "cat /proc/sys/kernel/random/boot_id")) for n in NODES[:2]}
    started = time.monotonic()
    run = pyinfra("roles/nvidia_driver.py", "--limit", "node1", "--limit", "node2",
                  "--data", "nvidia_driver_allow_reboot=true",
                  "--data", f"nvidia_driver_reboot_timeout={REBOOT_TIMEOUT}", timeout=600)
    took = time.monotonic() - started
    out = run.stdout
    assert run.returncode != 0, out[-3000:]  # node2 failed
    assert re.search(r"node2: reboot refused \(boot settings changed .*\): 1 GPU process\(es\) "
                     r"running \(pid \d+ .*\); drain first", out), out[-3000:]
    assert "node1: back after the reboot" in out, out[-3000:]
    assert boots("node1") == before["node1"][0] + 1
    assert sh("node1", "cat /proc/sys/kernel/random/boot_id") != before["node1"][1]
    assert sh("node1", "test -e /run/nodegate/reboot-required || echo gone") == "gone"
    assert (boots("node2"), sh("node2", "cat /proc/sys/kernel/random/boot_id")) == before["node2"]
    assert took < 300, f"the reboot run took {took:.0f}s"
    print(f"\nreboot run: {took:.0f}s (node1 rebooted and back, node2 refused)")
    sh("node2", "rm -f /run/nodegate/reboot-required")
    for node in ("node1", "node2"):
        sh("slurmctl", f"scontrol update NodeName={node} State=RESUME")


def test_a_rolling_upgrade_stops_at_the_first_failed_node(lab: None) -> None:
    """The rolling upgrade: batches of 2; node2's GPU process refuses its reboot, so batch 2
    never starts."""
    run = pyinfra("deploy/rolling_upgrade.py", "--data", f"nvidia_driver_version={B}",
                  "--data", "rolling_batch=2", "--data", "rolling_job_timeout_s=60",
                  # standard would load 8 simulated GPUs per node: minutes on 2 cores
                  "--data", "rolling_gate_level=quick",
                  "--data", f"nvidia_driver_reboot_timeout={REBOOT_TIMEOUT}", timeout=1200)
    out = run.stdout
    assert run.returncode != 0, out[-4000:]
    summary = out[out.index("rolling upgrade to"):]
    print("\n" + summary)
    rows = {m.group(1): (int(m.group(2)), m.group(3)) for m in re.finditer(
        r"^\s+(node\d)\s+(\d+)\s+(\w+)\s", summary, re.M)}
    assert rows == {"node1": (1, "upgraded"), "node2": (1, "failed"),
                    "node3": (2, "untouched"), "node4": (2, "untouched")}, summary
    assert re.search(r"node2 .* failed +reboot refused \(driver 570.133.20 is running but "
                     r"580.65.06 is installed\): 1 GPU process", summary), summary
    # progress, as the run goes
    for line in ("rollout: batch 1/2: node1, node2", "node1: upgrade: drained (IDLE+DRAIN), "
                 "no jobs", "node1: back after the reboot", "node1: upgrade: at 580.65.06",
                 "rollout: batch 2/2 (node3, node4) not started: node2 failed"):
        assert line in out, line
    summary_file = json.loads((ROOT / "reports" / "rollout-summary.json").read_text())
    assert [n["status"] for n in summary_file["nodes"]] == ["upgraded", "failed", "untouched",
                                                            "untouched"]
    # node1: at B, running B, back in service
    assert package("node1", "nvidia-driver").startswith(f"{B}-")
    assert running_driver("node1") == B
    assert slurm("node1")[0] == "IDLE"
    # node2: drained with the upgrade reason, the version it left recorded
    state, reason = slurm("node2")
    assert "DRAIN" in state and reason == f"nodegate: upgrade {A} -> {B}", (state, reason)
    record = json.loads(sh("node2", "cat /var/lib/nodegate/upgrade.json"))
    assert (record["from"], record["to"]) == (A, B)
    assert running_driver("node2") == A
    # node3, node4: untouched
    for node in ("node3", "node4"):
        assert package(node, "nvidia-driver").startswith(f"{A}-"), node
        assert slurm(node)[0] == "IDLE", node
        assert sh(node, "test -e /var/lib/nodegate/upgrade.json || echo none") == "none"


def test_an_upgrade_completes_drain_upgrade_reboot_validate_resume(lab: None) -> None:
    """The single-node upgrade on node3: it runs B, its report passes at B's pins and it is
    idle in Slurm."""
    drained = pyinfra("deploy/drain.py", "--limit", "node3", "--data", "drain_reason=upgrade")
    assert drained.returncode == 0, drained.stdout[-2000:]
    assert "DRAIN" in slurm("node3")[0]
    boots_before = boots("node3")
    run = pyinfra("deploy/upgrade_driver.py", "--limit", "node3",
                  "--data", f"nvidia_driver_version={B}",
                  "--data", "nvidia_driver_allow_reboot=true",
                  "--data", f"nvidia_driver_reboot_timeout={REBOOT_TIMEOUT}", timeout=900)
    assert run.returncode == 0, run.stdout[-4000:]
    assert boots("node3") == boots_before + 1
    assert running_driver("node3") == B
    for name in ("nvidia-driver", "nvidia-kernel-open-dkms", "nvidia-fabricmanager",
                 "libnvidia-nscq"):
        assert package("node3", name).startswith(f"{B}-"), name
    # the whole set moved: none of the old build left beside the new one, all held at B
    installed = driver_set("node3")
    assert set(SET_SAMPLE) <= set(installed)
    assert set(installed.values()) == {f"{B}-1"}, installed
    assert set(installed) <= set(sh("node3", "apt-mark showhold").split())
    took, count = apt_transaction("node3", "nvidia-driver")
    print(f"\nnode3: the driver's apt upgrade to {B}: {count} packages in {took:.0f}s")
    assert sh("node3", "systemctl is-active nvidia-fabricmanager") == "active"
    profile = json.loads(sh("node3", "cat /etc/nodegate/profile.json"))
    assert (profile["driver"]["branch"], profile["driver"]["version"]) == ("580", B)
    report = json.loads((ROOT / "reports" / "node3" / "quick-latest.json").read_text())
    verdicts = {r["check"]: r["verdict"] for r in report["results"]}
    assert report["verdict"] == "PASS", verdicts
    assert verdicts["driver_version"] == "PASS" and verdicts["fabricmanager_service"] == "PASS"
    assert slurm("node3")[0] == "IDLE"


def test_a_broken_build_leaves_the_node_drained_with_the_version_it_left(lab: None) -> None:
    """The single-node upgrade's failure: the mirror's 580.76.05 fails to build its kernel
    module."""
    boots_before = boots("node4")
    run = pyinfra("deploy/upgrade_driver.py", "--limit", "node4",
                  "--data", f"nvidia_driver_version={BROKEN}",
                  "--data", "nvidia_driver_allow_reboot=true",
                  "--data", f"nvidia_driver_reboot_timeout={REBOOT_TIMEOUT}", timeout=900)
    out = run.stdout
    assert run.returncode != 0, out[-3000:]
    assert "Bad return status for module build" in out, out[-3000:]
    state, reason = slurm("node4")
    assert "DRAIN" in state and reason == f"nodegate: upgrade {A} -> {BROKEN}", (state, reason)
    record = json.loads(sh("node4", "cat /var/lib/nodegate/upgrade.json"))
    assert (record["from"], record["to"]) == (A, BROKEN)
    assert boots("node4") == boots_before and running_driver("node4") == A
