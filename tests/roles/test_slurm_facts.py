"""What the Slurm facts make of scontrol's answers. "Not in Slurm" (None) lets a reboot or an
upgrade go on, so it must mean only that: no scontrol, or a cluster that does not know the node.
A controller that cannot be reached, or a node without Slurm configuration, is "cannot say"."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from nodegate.facts.gpu import SlurmNode, SlurmNodeState, read_show_node, scontrol_failure

#: ``scontrol show node -o`` of a drained node, as Debian 12's Slurm 22.05 prints it (trimmed)
DRAINED = ("NodeName=gpu-b01 Arch=x86_64 CoresPerSocket=56 CPUAlloc=0 CPUEfctv=224 CPUTot=224 "
           "Gres=gpu:h100:8 State=IDLE+DRAIN ThreadsPerCore=2 Partitions=gpu "
           "Reason=nodegate: upgrade 570.124.06 -> 580.65.06 [root@2026-12-05T10:00:00]")
EXIT = "nodegate-scontrol-exit="
UNREACHABLE = "slurm_load_node error: Unable to contact slurm controller (connect failure)"


@pytest.mark.parametrize(("output", "line", "error"), [
    ([DRAINED, f"{EXIT}0"], DRAINED, None),
    (["Node gpu-b09 not found", f"{EXIT}1"], None, None),  # the cluster does not know it
    ([f"{EXIT}0"], None, None),
    ([UNREACHABLE, f"{EXIT}1"], None, UNREACHABLE),
    (["scontrol: error: ClusterName needs to be specified",
      "scontrol: fatal: Unable to process configuration file", f"{EXIT}1"], None,
     "scontrol: error: ClusterName needs to be specified scontrol: fatal: Unable to process "
     "configuration file"),
    ([f"{EXIT}124"], None, "scontrol exited 124"),  # killed, said nothing
])
def test_show_node_output_reads_as_the_node_not_in_slurm_or_cannot_say(
        output: list[str], line: str | None, error: str | None) -> None:
    assert read_show_node(output) == (line, error)


def test_both_facts_carry_cannot_say_and_never_turn_it_into_not_in_slurm() -> None:
    node, state = SlurmNode(), SlurmNodeState()
    assert node.process([DRAINED, f"{EXIT}0"]) == {
        "state": "IDLE+DRAIN", "reason": "nodegate: upgrade 570.124.06 -> 580.65.06"}
    assert state.process([DRAINED, f"{EXIT}0"]) == "IDLE+DRAIN"
    assert node.process([UNREACHABLE, f"{EXIT}1"]) == {"state": None, "reason": None,
                                                       "error": UNREACHABLE}
    unreadable = state.process([UNREACHABLE, f"{EXIT}1"])
    assert scontrol_failure(unreadable) == UNREACHABLE
    assert scontrol_failure("IDLE+DRAIN") is None and scontrol_failure(None) is None
    assert node.process(["Node gpu-b09 not found", f"{EXIT}1"]) is None
    assert state.process(["Node gpu-b09 not found", f"{EXIT}1"]) is None


@pytest.mark.skipif(shutil.which("scontrol") is None, reason="needs slurm-client (make host-setup)")
def test_the_real_scontrol_with_its_controller_down_is_cannot_say(tmp_path: Path) -> None:
    """The facts' own command, run by sh against Debian's scontrol, with a slurm.conf whose
    controller listens nowhere (port 1)."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=nodegate\nSlurmctldHost=ctl(127.0.0.1)\nSlurmctldPort=1\n"
                    "MessageTimeout=1\nNodeName=gpu-b01 CPUs=1\nPartitionName=gpu Nodes=gpu-b01\n")
    command = SlurmNode().command("gpu-b01").get_raw_value()
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "SLURM_CONF": str(conf)}, check=False)
    assert done.returncode == 0, done.stderr  # the exit status rides the output, sh succeeds
    output = done.stdout.splitlines()
    fact = SlurmNode().process(output)
    assert fact is not None and "contact slurm controller" in str(fact["error"]), output
    assert scontrol_failure(SlurmNodeState().process(output))
