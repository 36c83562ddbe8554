"""slurm_controller: slurm.conf and gres.conf from the inventory and each node's own facts.

The controller is ``testhost``; its nodes are other inventory hosts (harness ``Other``) whose
facts the role reads, as it reads the real nodes' over SSH. The lab's slow test
(tests/roles/test_lab_slurm.py) shows the same files working with the real daemons.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from roles.slurm_controller import known_nodes, plan_node_set, slurm_controller
from tests.roles.harness import Other, Result, run
from tests.roles.scenarios import converged_facts, host_data

MUNGE_KEY = Path(__file__).parent / "data" / "munge-test.key"  # test data, not a cluster's
PLACEMENTS = [{"minor": i, "bdf": f"0000:{0x18 + 0x20 * i:02x}:00.0", "socket": i // 4,
               "cores": "0-55" if i < 4 else "56-111"} for i in range(8)]
TOPOLOGY = {"cpus": 224, "sockets": 2, "cores_per_socket": 56, "threads_per_core": 2}
SITE = {"controller": "slurmctl", "partition": "gpu", "cluster_name": "b-hall"}


def _controller(**extra: Any) -> dict[str, Any]:
    return {"ssh_hostname": "10.20.0.5", "slurm_controller_enabled": True,
            "slurm_controller_munge_key_file": str(MUNGE_KEY), "nodegate_site_slurm": SITE,
            **extra}


def _node(name: str, index: int, facts: dict[str, Any] | None = None,
          **extra: Any) -> Other:
    data = host_data(nodegate_slurm={"node_name": f"gpu-{name}"},
                     ssh_hostname=f"10.20.1.{index}", **extra)
    return Other(data=data, facts={"virt.Container": None, "gpu.GpuPlacements": PLACEMENTS,
                                   "gpu.CpuTopology": TOPOLOGY, "hardware.Cpus": 224,
                                   "hardware.Memory": 2_063_000,
                                   **(facts or {})})


def _nodes(count: int = 2) -> dict[str, Other]:
    return {f"b0{i}": _node(f"b0{i}", i) for i in range(1, count + 1)}


def _ctl(others: dict[str, Other], **kwargs: Any) -> Result:
    facts = {"server.Hostname": "slurmctl", "systemd.SystemdStatus": {},
             **kwargs.pop("facts", {})}
    if kwargs.pop("installed", False):
        facts = {**converged_facts("debian12"), **facts}
    return run(slurm_controller, os=kwargs.pop("os", "debian12"),
               data=_controller(**kwargs.pop("data", {})), facts=facts, others=others, **kwargs)


def test_fresh_controller_serves_every_nodes_gpus_and_drains_them() -> None:
    result = _ctl(_nodes(), os="ubuntu22")
    assert result.error is None, result.error
    conf = result.uploads["/etc/slurm/slurm.conf"]
    assert conf.startswith("# Managed by nodegate (slurm_controller role)")
    for line in ("ClusterName=b-hall", "SlurmctldHost=slurmctl(10.20.0.5)",
                 "SlurmctldParameters=enable_configless", "GresTypes=gpu",
                 "HealthCheckProgram=/usr/local/sbin/nodegate-slurm-healthcheck",
                 "HealthCheckNodeState=ANY,CYCLE", "Prolog=/usr/local/sbin/nodegate-slurm-prolog",
                 "Epilog=/usr/local/sbin/nodegate-slurm-epilog", "ReturnToService=2",
                 "NodeName=gpu-b01 NodeAddr=10.20.1.1 CPUs=224 Sockets=2 CoresPerSocket=56 "
                 "ThreadsPerCore=2 RealMemory=1959850 Gres=gpu:8 State=UNKNOWN",
                 "PartitionName=gpu Nodes=gpu-b01,gpu-b02 Default=YES"):
        assert line in conf.splitlines() or any(x.startswith(line) for x in conf.splitlines()), line
    gres = result.uploads["/etc/slurm/gres.conf"].splitlines()
    assert "NodeName=gpu-b01 Name=gpu File=/dev/nvidia0 Cores=0-55  # 0000:18:00.0" in gres
    assert "NodeName=gpu-b02 Name=gpu File=/dev/nvidia7 Cores=56-111  # 0000:f8:00.0" in gres
    assert "apt-get install -y -q --no-install-recommends slurmctld munge" in result.commands[1]
    text = "\n".join(result.commands)
    assert "install -m 0400 -o munge -g munge /dev/null /etc/munge/munge.key" in text
    assert MUNGE_KEY.read_text().strip() not in text  # by reference, never on a command line
    [drain] = [c for c in result.commands if "State=DRAIN" in c]
    assert "NodeName=gpu-b01,gpu-b02 State=DRAIN 'Reason=nodegate: not validated'" in drain
    assert not any("restart" in c or "reconfigure" in c for c in result.commands)  # a start


def test_converged_controller_changes_nothing_and_drains_nobody() -> None:
    result = _ctl(_nodes(), converged=True, installed=True,
                  facts={"systemd.SystemdStatus": {"slurmctld.service": True,
                                                   "munge.service": True}})
    assert result.error is None
    assert [op.name for op in result.unconditional_changes()] == []
    assert not any("State=DRAIN" in c for c in result.commands)


def test_a_new_node_is_drained_alone_and_the_controller_restarts() -> None:
    two = _nodes(2)
    first = _ctl(two)
    files = {"/etc/slurm/slurm.conf": first.uploads["/etc/slurm/slurm.conf"],
             "/etc/slurm/gres.conf": first.uploads["/etc/slurm/gres.conf"]}
    running = {"systemd.SystemdStatus": {"slurmctld.service": True, "munge.service": True}}
    result = _ctl(_nodes(3), files=files, facts=running, installed=True)
    assert result.error is None
    drains = [c for c in result.commands if "State=DRAIN" in c]
    assert len(drains) == 1 and "NodeName=gpu-b03" in drains[0]
    names = [op.name for op in result.ops]
    restart = next(i for i, n in enumerate(names) if "restarted (the node set changed)" in n)
    reconfigure = next(i for i, n in enumerate(names) if "scontrol reconfigure" in n)
    drain = next(i for i, n in enumerate(names) if "drained until validated" in n)
    assert restart < reconfigure < drain


def test_the_drain_runs_before_any_new_nodes_slurmd_starts() -> None:
    """pyinfra runs the k-th operation of every host together (State.get_op_order): the
    controller's drain must be an earlier operation than slurm_node's first slurmd start,
    in the longest controller plan (running, node set changed) with many new nodes."""
    from roles.slurm_node import slurm_node
    from tests.roles.scenarios import host_data as node_data

    first = _ctl(_nodes(1))
    files = {"/etc/slurm/slurm.conf": first.uploads["/etc/slurm/slurm.conf"]}
    running = {"systemd.SystemdStatus": {"slurmctld.service": True}}
    ctl = _ctl(_nodes(8), files=files, facts=running)
    drain = next(i for i, op in enumerate(ctl.ops) if "drained until validated" in op.name)
    node = run(slurm_node, data=node_data(slurm_node_controller="slurmctl",
                                          slurm_node_munge_key_file=str(MUNGE_KEY)))
    start = next(i for i, op in enumerate(node.ops) if "slurmd enabled and running" in op.name)
    assert drain < start, (drain, start)


def test_only_gres_changed_reconfigures_without_a_restart() -> None:
    first = _ctl(_nodes(2))
    files = {"/etc/slurm/slurm.conf": first.uploads["/etc/slurm/slurm.conf"],
             "/etc/slurm/gres.conf": first.uploads["/etc/slurm/gres.conf"]}
    others = _nodes(2)
    others["b02"] = _node("b02", 2, facts={"gpu.GpuPlacements": PLACEMENTS[:4]})
    running = {"systemd.SystemdStatus": {"slurmctld.service": True, "munge.service": True}}
    result = _ctl(others, files=files, facts=running, installed=True)
    names = [op.name for op in result.ops if op.commands]
    assert any("scontrol reconfigure" in n for n in names)
    assert not any("restarted (the node set changed)" in n for n in names)
    assert not any("State=DRAIN" in c for c in result.commands)


def test_a_container_node_gets_device_files_and_the_sites_sizes() -> None:
    node = _node("b01", 1, facts={"virt.Container": "systemd-nspawn"},
                 slurm_node_cpus=1, slurm_node_real_memory=500)
    result = _ctl({"b01": node}, data={"slurm_controller_health_check": False,
                                       "slurm_controller_prolog_epilog": False,
                                       "slurm_controller_proctrack": "proctrack/linuxproc",
                                       "slurm_controller_task_plugin": "task/none"})
    conf = result.uploads["/etc/slurm/slurm.conf"]
    assert "NodeName=gpu-b01 NodeAddr=10.20.1.1 CPUs=1 RealMemory=500 Gres=gpu:8" in conf
    assert "HealthCheckProgram" not in conf and "Prolog" not in conf
    assert "ProctrackType=proctrack/linuxproc" in conf and "TaskPlugin=task/none" in conf
    gres = result.uploads["/etc/slurm/gres.conf"]
    assert "NodeName=gpu-b01 Name=gpu File=/dev/nvidia[0-7]\n" in gres
    assert "a container (systemd-nspawn)" in gres


def test_a_typed_gpu_is_typed_in_both_files() -> None:
    """Slurm 22.05's ``slurmd -G`` warns "A line in gres.conf for GRES gpu:h100 has 1 more
    configured than expected in slurm.conf" and ignores them when slurm.conf says an untyped
    ``Gres=gpu:N`` (tried on this host's slurmd): the type goes in both."""
    result = _ctl({"b01": _node("b01", 1, slurm_node_gpu_type="h100")})
    assert " Gres=gpu:h100:8 " in result.uploads["/etc/slurm/slurm.conf"]
    gres = result.uploads["/etc/slurm/gres.conf"].splitlines()
    assert "NodeName=gpu-b01 Name=gpu Type=h100 File=/dev/nvidia3 Cores=0-55  # 0000:78:00.0" \
        in gres


def test_autodetect_is_the_nodes_choice() -> None:
    node = _node("b01", 1, slurm_node_gres_autodetect=True)
    gres = _ctl({"b01": node}).uploads["/etc/slurm/gres.conf"]
    assert "NodeName=gpu-b01 AutoDetect=nvml" in gres.splitlines()
    assert "File=" not in gres


@pytest.mark.parametrize(("data", "others", "error"), [
    ({"slurm_controller_munge_key_file": "/nonexistent/munge.key"}, True,
     "slurm_controller_munge_key_file /nonexistent/munge.key: file not found"),
    ({"slurm_controller_munge_key_file": None}, True, "needs slurm_controller_munge_key_file"),
    ({"slurm_controller_nodes_group": "b_hall"}, True,
     "inventory group 'b_hall' (slurm_controller_nodes_group) has no hosts"),
])
def test_bad_input_refuses_the_controller_naming_the_key(data: dict[str, Any], others: bool,
                                                        error: str) -> None:
    result = _ctl(_nodes() if others else {}, data=data)
    assert result.error is not None and error in result.error
    assert not result.commands


def test_off_without_the_knob() -> None:
    result = run(slurm_controller, data={}, others=_nodes())
    assert result.error is None and not result.commands
    assert any("slurm_controller_enabled" in n for n in result.noops)


def test_cpu_topology_counts_sockets_cores_and_threads() -> None:
    from nodegate.facts.gpu import CpuTopology

    # 2 sockets x 2 cores x 2 threads, as sysfs numbers them (core ids restart per socket)
    lines = [f"{s} {c}" for s in (0, 1) for c in (0, 1)] * 2
    assert CpuTopology().process(lines) == {"cpus": 8, "sockets": 2, "cores_per_socket": 2,
                                            "threads_per_core": 2}
    assert CpuTopology().process(["garbage"]) is None


def test_known_nodes_reads_the_current_slurm_conf() -> None:
    result = _ctl(_nodes())
    conf = result.uploads["/etc/slurm/slurm.conf"]
    from pyinfra.api.config import Config
    from pyinfra.api.inventory import Inventory
    from pyinfra.api.state import State
    from pyinfra.context import ctx_host, ctx_state

    from tests.roles.harness import FakeFacts

    inventory = Inventory(([("testhost", {})], {}))  # type: ignore[no-untyped-call]
    state = State(inventory, Config())  # type: ignore[no-untyped-call]
    node = inventory.get_host("testhost")
    node.get_fact = FakeFacts("debian12", {}, {"/etc/slurm/slurm.conf": conf})  # type: ignore[method-assign,assignment]
    with ctx_state.use(state), ctx_host.use(node):
        assert known_nodes() == {"gpu-b01", "gpu-b02"}


# --- the cluster changes only on purpose ---------------------------------------------------

KNOWN = {"gpu-b01": "10.20.1.1", "gpu-b02": "10.20.1.2", "gpu-b03": "10.20.1.3"}
INVENTORY = [("b01", "gpu-b01", "10.20.1.1"), ("b02", "gpu-b02", "10.20.1.2"),
             ("b03", "gpu-b03", "10.20.1.3")]


def test_plan_a_converged_cluster_changes_nothing() -> None:
    plan = plan_node_set(KNOWN, INVENTORY, set())
    assert (plan.add, plan.keep, plan.remove, plan.refused, plan.restart) == \
        ((), (), (), {}, False)


def test_plan_a_slurm_name_typo_is_refused_for_that_host_and_the_node_kept() -> None:
    typo = [*INVENTORY[:2], ("b03", "gpu-b3", "10.20.1.3")]
    plan = plan_node_set(KNOWN, typo, set())
    assert plan.add == () and plan.remove == () and not plan.restart
    assert plan.keep == ("gpu-b03",)  # its line stays as slurm.conf has it
    assert set(plan.refused) == {"b03"}
    assert "'gpu-b3' is new to Slurm, but 10.20.1.3 is node 'gpu-b03'" in plan.refused["b03"]
    assert "slurm_controller_remove_nodes" in plan.refused["b03"]


def test_plan_a_limited_run_keeps_every_node_it_does_not_name() -> None:
    plan = plan_node_set(KNOWN, INVENTORY[:1], set())
    assert plan.keep == ("gpu-b02", "gpu-b03") and not plan.restart and plan.refused == {}


def test_plan_a_rename_takes_the_knob_and_restarts() -> None:
    renamed = [*INVENTORY[:2], ("b03", "gpu-b03new", "10.20.1.3")]
    plan = plan_node_set(KNOWN, renamed, {"gpu-b03"})
    assert (plan.add, plan.remove, plan.refused, plan.restart) == \
        (("gpu-b03new",), ("gpu-b03",), {}, True)
    # the knob never removes a node this run still names
    assert plan_node_set(KNOWN, INVENTORY, {"gpu-b03"}).remove == ()


def test_plan_one_machine_under_two_names_is_refused() -> None:
    twice = [*INVENTORY, ("b03-again", "gpu-b99", "10.20.1.3")]
    plan = plan_node_set(KNOWN, twice, set())
    assert set(plan.refused) == {"b03-again"} and plan.add == () and not plan.restart
    assert "10.20.1.3 is also b03's" in plan.refused["b03-again"]
    fresh = plan_node_set({}, [("a", "n1", "10.0.0.1"), ("b", "n2", "10.0.0.1")], set())
    assert fresh.add == ("n1",) and set(fresh.refused) == {"b"}


def test_plan_a_new_node_at_a_new_address_is_added() -> None:
    plan = plan_node_set(KNOWN, [*INVENTORY, ("b04", "gpu-b04", "10.20.1.4")], set())
    assert (plan.add, plan.restart) == (("gpu-b04",), True)


def _three_known() -> tuple[dict[str, str], dict[str, Any]]:
    first = _ctl(_nodes(3))
    files = {"/etc/slurm/slurm.conf": first.uploads["/etc/slurm/slurm.conf"],
             "/etc/slurm/gres.conf": first.uploads["/etc/slurm/gres.conf"]}
    running = {"systemd.SystemdStatus": {"slurmctld.service": True, "munge.service": True}}
    return files, running


def test_a_slurm_name_typo_leaves_slurm_conf_and_slurmctld_alone_and_fails_that_host() -> None:
    files, running = _three_known()
    others = _nodes(3)
    others["b03"] = _node("b03", 3)
    others["b03"].data["nodegate_slurm"] = {"node_name": "gpu-b3"}
    from roles.ops.common import FAILURES

    result = _ctl(others, files=files, facts=running, installed=True)
    assert result.error is None, result.error
    assert "/etc/slurm/slurm.conf" not in result.uploads  # unchanged: no upload
    assert "/etc/slurm/gres.conf" not in result.uploads
    changes = [c for op in result.unconditional_changes() for c in op.commands]
    assert not any("restart" in c or "State=DRAIN" in c for c in changes), changes
    assert not any("slurmctld restarted" in op.name for op in result.ops)
    assert "'gpu-b3' is new to Slurm, but 10.20.1.3 is node 'gpu-b03'" in FAILURES["b03"]


def test_a_run_without_a_known_node_keeps_its_lines() -> None:
    files, running = _three_known()
    result = _ctl(_nodes(2), files=files, facts=running, installed=True)
    assert "/etc/slurm/slurm.conf" not in result.uploads  # the kept lines are the same lines
    assert "/etc/slurm/gres.conf" not in result.uploads
    assert not any("slurmctld restarted" in op.name for op in result.ops)


def test_a_listed_node_is_drained_then_removed_with_a_restart() -> None:
    files, running = _three_known()
    result = _ctl(_nodes(2), files=files, facts=running, installed=True,
                  data={"slurm_controller_remove_nodes": ["gpu-b03"]})
    names = [op.name for op in result.ops if op.commands]
    drain = next(i for i, n in enumerate(names) if "nodes to remove drained first" in n)
    conf = next(i for i, n in enumerate(names) if "| slurm_controller: slurm.conf" in n)
    restart = next(i for i, n in enumerate(names) if "restarted (the node set changed): -gpu-b03"
                   in n)
    assert drain < conf < restart
    script = result.ops[[op.name for op in result.ops].index(names[drain])].commands[0]
    assert "squeue -h -w gpu-b03" in script and "State=DRAIN" in script
    assert "NodeName=gpu-b03" not in result.uploads["/etc/slurm/slurm.conf"]
    assert "Nodes=gpu-b01,gpu-b02 " in result.uploads["/etc/slurm/slurm.conf"]
