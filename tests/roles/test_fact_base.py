"""The pieces the nodegate facts share: the "key value" line parser and the empty defaults, as
the facts built on them read their commands' output."""

from __future__ import annotations

from nodegate.facts.base import key_values
from nodegate.facts.gate import JoinPlan, RecordedRun
from nodegate.facts.gpu import GpuPlacements, SlurmNode, SlurmNodeState
from nodegate.facts.kernel import LoadedModuleVersions
from nodegate.facts.packages import DnfModuleState, HeldPackages
from nodegate.facts.pcie import AcsState
from nodegate.facts.roce import RocePorts
from nodegate.facts.storage import MdArrays, MdSuperblocks


def test_key_values_splits_at_the_first_separator_and_passes_over_lines_without_one() -> None:
    assert key_values(["nvidia 570.133.20", "  nvme  1.0 ", "lonely", "", " x"]) == {
        "nvidia": "570.133.20", "nvme": "1.0"}


def test_key_values_with_last_keeps_a_separator_inside_the_key() -> None:
    assert key_values(["/dev/my disk abc-123", "abc"], last=True) == {"/dev/my disk": "abc-123"}


def test_key_values_with_keys_keeps_only_those_and_an_empty_value() -> None:
    lines = ["[nvidia-driver]", "name=nvidia-driver", "stream=", "state = enabled", "x=1"]
    assert key_values(lines, "=", keys=("name", "stream", "state")) == {
        "name": "nvidia-driver", "stream": ""}


def test_facts_read_their_lines_as_before() -> None:
    assert LoadedModuleVersions().process(["nvidia 570.133.20", "i915"]) == {
        "nvidia": "570.133.20"}
    assert MdSuperblocks().process(["/dev/nvme0n1 a:b:c:d", "/dev/nvme1n1"]) == {
        "/dev/nvme0n1": "a:b:c:d"}
    assert DnfModuleState().process(["[nvidia-driver]", "name=nvidia-driver",
                                     "stream=570-open", "profiles=", "state=enabled"]) == {
        "name": "nvidia-driver", "stream": "570-open", "profiles": "", "state": "enabled"}


def test_defaults_are_empty_and_fresh_each_time() -> None:
    for fact in (LoadedModuleVersions, MdArrays, MdSuperblocks, AcsState, HeldPackages,
                 DnfModuleState):
        first = fact().default()
        assert first == {}
        first["x"] = "y"
        assert fact().default() == {}
    for listing in (GpuPlacements, RocePorts):
        assert listing().default() == []


def test_exit_and_json_facts_keep_their_own_field() -> None:
    assert RecordedRun().default() == {"exit": 3, "report": None, "stderr": ""}
    assert JoinPlan().default() == {"exit": 3, "decision": None, "stderr": ""}
    assert JoinPlan().process(['{"action": "resume"}', "NODEGATE_EXIT=0"]) == {
        "exit": 0, "decision": {"action": "resume"}, "stderr": ""}
    assert RecordedRun().process(["[1]", "NODEGATE_EXIT=1"]) == {"exit": 1, "report": None,
                                                                  "stderr": ""}


def test_both_slurm_facts_ask_scontrol_the_same_way() -> None:
    assert SlurmNode().requires_command("n1") == SlurmNodeState().requires_command("n1") == (
        "scontrol")
    assert str(SlurmNode().command("n1")) == str(SlurmNodeState().command("n1"))
    assert "scontrol show node -o n1" in str(SlurmNode().command("n1"))
