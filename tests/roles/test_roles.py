"""Role operation tests: facts in, commands out, for every role on every OS.

Fixture scenarios (fixtures/*.json) hold the exact command lists, as pyinfra's own tests do;
regenerate after a deliberate change with NODEGATE_UPDATE_FIXTURES=1 and review the diff.
"""

from __future__ import annotations

import importlib.util
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from pyinfra.api.config import Config
from pyinfra.api.exceptions import OperationError
from pyinfra.api.inventory import Inventory
from pyinfra.api.state import State
from pyinfra.context import ctx_host, ctx_state

from nodegate.errors import ConfigError
from nodegate.profiles import resolve_profile
from nodegate.site import load_site
from roles.agent import agent
from roles.base import base
from roles.dcgm import dcgm
from roles.fabricmanager import fabricmanager
from roles.nccl import nccl
from roles.network import network
from roles.nvidia_driver import nvidia_driver
from roles.nvme import nvme
from roles.ops import server
from roles.ops.files import put_template
from roles.pdu_monitor import pdu_monitor
from roles.slurm_node import slurm_node
from tests.roles.harness import FakeFacts, run
from tests.roles.scenarios import (
    ARRAY_UUID,
    DEVICES,
    DRIVER,
    OSES,
    converged_facts,
    converged_files,
    host_data,
)

ROLES = {"base": base, "nvidia_driver": nvidia_driver, "fabricmanager": fabricmanager,
         "network": network, "nccl": nccl, "dcgm": dcgm, "nvme": nvme, "agent": agent,
         "pdu_monitor": pdu_monitor, "slurm_node": slurm_node}
FIXTURES = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).resolve().parents[2]
ENV = {"IDRAC_PASSWORD": "s3cret", "PDU_COMMUNITY": "c0mm"}
MUNGE_KEY = Path(__file__).parent / "data" / "munge-test.key"  # test data, not a cluster's


@pytest.fixture(autouse=True)
def _secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)


def _data(**extra: Any) -> dict[str, Any]:
    return host_data(dcgm_enabled=True, slurm_node_controller="slurmctl",
                     slurm_node_munge_key_file=str(MUNGE_KEY), **extra)


@pytest.mark.parametrize("os_name", OSES)
@pytest.mark.parametrize("role", sorted(ROLES))
def test_fresh_host_gets_a_plan(role: str, os_name: str) -> None:
    result = run(ROLES[role], os=os_name, data=_data())
    assert result.error is None
    assert result.unconditional_changes(), f"{role} did nothing on a fresh {os_name} host"


@pytest.mark.parametrize("os_name", OSES)
@pytest.mark.parametrize("role", sorted(ROLES))
def test_converged_host_is_a_noop(role: str, os_name: str) -> None:
    result = run(ROLES[role], os=os_name, data=_data(), converged=True,
                 facts=converged_facts(os_name), files=converged_files(os_name))
    assert result.error is None
    assert [op.name for op in result.unconditional_changes()] == []
    assert result.noops


def _fixture_cases() -> list[Path]:
    return sorted(FIXTURES.glob("*.json"))


@pytest.mark.parametrize("path", _fixture_cases(), ids=lambda p: p.stem)
def test_fixture(path: Path) -> None:
    case = json.loads(path.read_text())
    data = host_data(case.get("profile", "xe9680-h100"), **case.get("data", {}))
    if "profile_overrides" in case:  # a board no profile file describes yet, validated
        data["nodegate_profile_data"] = resolve_profile(
            data["nodegate_profile"], host_overrides=case["profile_overrides"]).data
    for key in case.get("remove", []):
        data.pop(key, None)
    result = run(ROLES[case["role"]], os=case["os"], data=data, facts=case.get("facts", {}),
                 files=case.get("files", {}), converged=case.get("converged", False))
    expect = case.get("expect", {})
    if "error" in expect:
        assert result.error is not None and expect["error"] in result.error
    else:
        assert result.error is None, result.error
    text = "\n".join(result.commands)
    for needle in expect.get("contains", []):
        assert needle in text, needle
    for needle in expect.get("absent", []):
        assert needle not in text, needle
    for dest, needles in expect.get("uploads", {}).items():
        for needle in needles:
            assert needle in result.uploads[dest], (dest, needle)
    if os.environ.get("NODEGATE_UPDATE_FIXTURES"):
        case["commands"] = result.golden()
        path.write_text(json.dumps(case, indent=2) + "\n")
    assert result.golden() == case.get("commands"), "plan differs from the fixture"


def test_array_present_is_never_recreated_on_any_os() -> None:
    for os_name in OSES:
        facts = {"storage.MdArrays": {"/dev/md127": {"uuid": ARRAY_UUID,
                                                     "name": "gpu-b01:nodegate0",
                                                     "level": "raid0"}},
                 "storage.MdSuperblocks": {d: ARRAY_UUID for d in DEVICES},
                 "storage.Blkid": {"UUID": "x", "TYPE": "xfs"}}
        result = run(nvme, os=os_name, data=host_data(), facts=facts)
        assert not any("mdadm --create" in c or "mkfs" in c for c in result.commands)


def test_gpu_processes_refuse_every_driver_change() -> None:
    procs = [{"pid": 4242, "name": "python", "used_mib": 1024}]
    for os_name in OSES:
        result = run(nvidia_driver, os=os_name, data=host_data(),
                     facts={"gpu.GpuProcesses": procs,
                            "kernel.LoadedModuleVersions": {"nvidia": "550.90.07"}})
        assert result.error and "GPU process" in result.error and "Drain" in result.error
        assert not any("install" in c for c in result.commands)


def test_hostile_values_are_quoted_or_refused() -> None:
    hostile = "eth0; rm -rf / #'\" x"
    nccl_result = run(nccl, data=host_data(nodegate_nccl={"socket_ifname": hostile}))
    assert nccl_result.error and "not a plain NCCL value" in nccl_result.error
    devices = [f"/dev/disk/by-id/nvme-evil; reboot #{i}" for i in (1, 2)]
    result = run(nvme, data=host_data(nodegate_nvme={"devices": devices}))
    create = next(c for c in result.commands if c.startswith("mdadm --create"))
    for device in devices:
        assert f"'{device}'" in create
    wheel = "https://mirror.example/wheels dir?x=1;touch /tmp/pwned"
    agent_result = run(agent, data=host_data(agent_wheelhouse_url=wheel))
    pip = next(c for c in agent_result.commands if "pip" in c and "install" in c)
    assert f"'{wheel}'" in pip


def test_driver_reboot_only_when_stale_and_allowed() -> None:
    facts = {**converged_facts("ubuntu22"),
             "kernel.LoadedModuleVersions": {"nvidia": "550.90.07"}}
    files = converged_files("ubuntu22")
    refused = run(nvidia_driver, data=host_data(), facts=facts, files=files, converged=True)
    assert not any("reboot" in c for c in refused.commands)
    assert any("not allowed for this run" in n for n in refused.noops)
    allowed = run(nvidia_driver, data=host_data(nvidia_driver_allow_reboot=True), facts=facts,
                  files=files, converged=True)
    assert any("reboot" in c for c in allowed.commands)
    current = run(nvidia_driver, data=host_data(nvidia_driver_allow_reboot=True),
                  facts=converged_facts("ubuntu22"), files=files, converged=True)
    assert not any("reboot" in c for c in current.commands)
    assert DRIVER in " ".join(current.noops)


BUSY = [{"pid": 4242, "name": "python", "used_mib": 70000},
        {"pid": 4243, "name": "python", "used_mib": 70000},
        {"pid": 4244, "name": "torchrun", "used_mib": 512}]


@pytest.mark.parametrize(("facts", "override", "reboots", "why"), [
    ({"gpu.GpuProcesses": BUSY, "gpu.SlurmNodeState": "IDLE+DRAIN"}, False, False,
     "3 GPU process(es) running (pid 4242 python"),
    ({"gpu.GpuProcesses": [], "gpu.SlurmNodeState": "MIXED"}, False, False,
     "Slurm node testhost is MIXED, not drained; drain first"),
    ({"gpu.GpuProcesses": [], "gpu.SlurmNodeState": "MIXED+DRAIN"}, False, False,
     "is MIXED+DRAIN, not drained"),  # draining: its jobs still run
    ({"gpu.GpuProcesses": None, "gpu.SlurmNodeState": "IDLE+DRAIN"}, False, False,
     "GPU processes cannot be listed"),
    ({"gpu.GpuProcesses": BUSY, "gpu.SlurmNodeState": None}, True, False,
     "3 GPU process(es)"),  # the override vouches for the drain, never for processes
    ({"gpu.GpuProcesses": [], "gpu.SlurmNodeState": "IDLE+DRAIN"}, False, True, None),
    ({"gpu.GpuProcesses": [], "gpu.SlurmNodeState": "DOWN+DRAIN"}, False, True, None),
    ({"gpu.GpuProcesses": [], "gpu.SlurmNodeState": None}, False, True, None),  # not in Slurm
    ({"gpu.GpuProcesses": [], "gpu.SlurmNodeState": "ALLOCATED"}, True, True, None),
    # scontrol there but unanswered: unknown is not "not in Slurm"
    ({"gpu.GpuProcesses": [], "gpu.SlurmNodeState": "SCONTROL_FAILED: slurm_load_node error: "
      "Unable to contact slurm controller (connect failure)"}, False, False,
     "Slurm cannot say whether testhost is drained (slurm_load_node error: Unable to contact"),
])
def test_a_reboot_waits_for_a_drained_idle_node(facts: dict[str, Any], override: bool,
                                                reboots: bool, why: str | None) -> None:
    """Driver upgrade: the stale module may be swapped only on a node with nothing running."""
    stale = {**converged_facts("ubuntu22"), **facts,
             "kernel.LoadedModuleVersions": {"nvidia": "550.90.07"}}
    data = host_data(nvidia_driver_allow_reboot=True, nvidia_driver_drained=override)
    result = run(nvidia_driver, data=data, facts=stale, files=converged_files("ubuntu22"),
                 converged=True)
    op = next(o for o in result.ops if o.name.endswith("reboot if the loaded module is stale"))
    assert any("reboot" in c for c in op.commands) is reboots, op.commands
    assert (op.commands == ["function _verdict"]) is (not reboots), op.commands

    inventory = Inventory(([("testhost", {})], {}))  # type: ignore[no-untyped-call]
    state = State(inventory, Config())  # type: ignore[no-untyped-call]
    node = inventory.get_host("testhost")
    node.get_fact = FakeFacts("ubuntu22", stale, {})  # type: ignore[method-assign,assignment]
    with ctx_state.use(state), ctx_host.use(node):
        refusal = server.reboot_refusal("/opt/nodegate/venv/bin/python", "testhost", override)
    assert (refusal is None) is reboots
    if why:
        assert refusal is not None and why in refusal


def test_poller_config_holds_references_never_secrets() -> None:
    result = run(pdu_monitor, data=host_data())
    config = result.uploads["/etc/nodegate/power-poller.yaml"]
    assert "s3cret" not in config and "c0mm\n" not in config
    assert "s3cret" not in "\n".join(result.commands)


def test_deploy_py_orders_the_roles() -> None:
    # by path, as pyinfra runs it: the name ``deploy`` is the deploy/ package beside it
    spec = importlib.util.spec_from_file_location("deploy_py", ROOT / "deploy.py")
    assert spec is not None and spec.loader is not None
    bring_up = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bring_up)

    names = [getattr(r, "__name__", "") for r in bring_up.ROLES]
    assert names == ["base", "nvidia_driver", "fabricmanager", "network", "nccl", "dcgm", "nvme",
                     "agent", "pdu_monitor", "slurm_node"]


def test_deploy_is_the_package_beside_deploy_py() -> None:
    """deploy.py's ``from deploy.validate import ...`` needs deploy/ to win over deploy.py."""
    import deploy
    import deploy.validate

    assert Path(deploy.__file__ or "") == ROOT / "deploy" / "__init__.py"
    assert Path(deploy.validate.__file__) == ROOT / "deploy" / "validate.py"


def test_a_template_value_left_out_stops_the_host() -> None:
    """pyinfra's files.template renders with StrictUndefined, as the hand-written render did:
    a value a role forgets is an error naming it, never an empty line in a config file."""
    def forgets_settings() -> None:
        put_template(name="nccl.conf without settings", src="nccl/nccl.conf.j2",
                     dest="/etc/nccl.conf")

    with pytest.raises(OperationError, match="'settings' is undefined"):
        run(forgets_settings)


def test_scheduled_health_is_followed_by_the_gate_on_a_slurm_node() -> None:
    cron = run(agent, data=host_data()).uploads["/etc/cron.d/nodegate-health"]
    line = next(x for x in cron.splitlines() if x.startswith("*/5"))
    health, gate = line.index("nodegate health"), line.index("nodegate gate --node gpu-b01")
    assert health < gate and "--report-dir /var/lib/nodegate/reports" in line[gate:]
    timer = run(agent, data=host_data(agent_schedule="systemd-timer"))
    unit = timer.uploads["/etc/systemd/system/nodegate-health.service"]
    assert [x.split()[1] for x in unit.splitlines() if x.startswith("ExecStart=")] == [
        "health", "gate"]
    off = run(agent, data=host_data(agent_schedule_gate=False)).uploads[
        "/etc/cron.d/nodegate-health"]
    assert "nodegate gate" not in off


def test_scheduled_health_names_its_report_as_slurm_names_the_node() -> None:
    """Health named its report after uname (an FQDN) and the gate asked for the
    Slurm name: the agent passes the Slurm name to health (--node-name)."""
    cron = run(agent, data=host_data()).uploads["/etc/cron.d/nodegate-health"]
    line = next(x for x in cron.splitlines() if x.startswith("*/5"))
    health = line[line.index("nodegate health"):line.index("nodegate gate")]
    assert "--node-name gpu-b01" in health
    off = run(agent, data=host_data(agent_schedule_gate=False)).uploads[
        "/etc/cron.d/nodegate-health"]
    assert "--node-name gpu-b01" in off  # the report names the Slurm node either way


def test_scheduled_remediation_follows_the_gate_only_where_it_is_on() -> None:
    """One ``nodegate remediate`` step after the gate where remediation is on (the site's
    opt-in), the same words deploy/remediate.py runs; nothing of it where it is off."""
    cron = run(agent, data=host_data(remediate_enabled=True)).uploads[
        "/etc/cron.d/nodegate-health"]
    line = next(x for x in cron.splitlines() if x.startswith("*/5"))
    gate, step = line.index("nodegate gate --node gpu-b01"), line.index(
        "nodegate remediate --node gpu-b01")
    assert gate < step and line[step:].split(";")[0].endswith(" --enable")
    timer = run(agent, data=host_data(agent_schedule="systemd-timer", remediate_enabled=True))
    unit = timer.uploads["/etc/systemd/system/nodegate-health.service"]
    assert [x.split()[1] for x in unit.splitlines() if x.startswith("ExecStart=")] == [
        "health", "gate", "remediate"]
    for data in (host_data(), host_data(remediate_enabled=True, agent_schedule_gate=False)):
        assert "remediate" not in run(agent, data=data).uploads["/etc/cron.d/nodegate-health"]


def test_the_scheduled_gate_carries_the_sites_drain_budget() -> None:
    data = host_data(nodegate_slurm={"node_name": "gpu-b01", "drain_budget": 0.5})
    cron = run(agent, data=data).uploads["/etc/cron.d/nodegate-health"]
    gate = cron[cron.index("nodegate gate"):]
    assert ("--drain-budget 0.5 --textfile-dir /var/lib/node_exporter/textfile_collector"
            in gate)
    assert "--drain-budget" not in run(agent, data=host_data()).uploads[
        "/etc/cron.d/nodegate-health"]
    check = "/usr/local/sbin/nodegate-slurm-healthcheck"
    wrapper = run(slurm_node, data=_data(nodegate_slurm={
        "node_name": "gpu-b01", "drain_budget": 0.5})).uploads[check]
    assert wrapper.splitlines()[-1].endswith(
        "gate --healthcheck --drain-budget 0.5 --textfile-dir "
        "/var/lib/node_exporter/textfile_collector")
    assert run(slurm_node, data=_data()).uploads[check].splitlines()[-1].endswith(
        "gate --healthcheck --textfile-dir /var/lib/node_exporter/textfile_collector")


def test_a_slurm_node_without_a_slurm_section_gets_the_sites_drain_budget(
        tmp_path: Path) -> None:
    """A GPU node with no ``slurm:`` of its own runs slurm_node all the same (NodeName: its
    host name), so its HealthCheckProgram gate takes the site's budget like any other."""
    site = tmp_path / "s.yaml"
    site.write_text("schema: nodegate.site/1\nname: s\nslurm: {drain_budget: 0.5}\n"
                    "hosts:\n  n1: {profile: xe9680-h100}\n")
    data = _data()
    data.pop("nodegate_slurm")
    data.update(load_site(str(site)).hosts["n1"].pyinfra_data("s"))
    wrapper = run(slurm_node, data=data).uploads["/usr/local/sbin/nodegate-slurm-healthcheck"]
    assert wrapper.splitlines()[-1].endswith(
        "gate --healthcheck --drain-budget 0.5 --textfile-dir "
        "/var/lib/node_exporter/textfile_collector")


def test_a_missing_extra_is_installed_beside_a_current_nodegate() -> None:
    facts = converged_facts("ubuntu22")
    facts["packages.VenvDistributions"] = {"nodegate": ["0.1.0"], "pysnmp": ["7.1.22"]}  # no torch yet
    result = run(agent, data=host_data(gate_level="standard"), facts=facts,
                 files=converged_files("ubuntu22"), converged=True)
    pip = [c for c in result.commands if "/bin/pip install" in c]
    assert len(pip) == 1 and pip[0].endswith(" torch"), pip
    quick = run(agent, data=host_data(gate_level="quick"), facts=facts,
                files=converged_files("ubuntu22"), converged=True)
    assert not [c for c in quick.commands if "/bin/pip install" in c]


def test_agent_pip_compile_false_installs_without_byte_code_and_only_then() -> None:
    facts = converged_facts("ubuntu22")
    facts["packages.VenvDistributions"] = {"nodegate": ["0.1.0"], "pysnmp": ["7.1.22"]}
    for compile_, flagged in ((True, False), (False, True)):
        result = run(agent, data=host_data(gate_level="standard", agent_pip_compile=compile_),
                     facts=facts, files=converged_files("ubuntu22"), converged=True)
        pip = [c for c in result.commands if "/bin/pip install" in c]
        assert len(pip) == 1 and pip[0].endswith(" torch"), pip
        assert ("--no-compile" in pip[0].split()) is flagged, pip


@pytest.mark.parametrize(("installed", "pinned", "installs"), [
    ("0.1.0+src.aaa", "0.1.0+src.bbb", True),    # the lab's source changed: its new build
    ("0.1.0+src.aaa", "0.1.0+src.aaa", False),   # unchanged: a re-deploy changes nothing
    ("0.1.0", "0.1.0+src.bbb", True),            # a release node gets the lab's build
    ("0.1.0+src.aaa", "0.1.0", False),           # pip: ==0.1.0 is met by any 0.1.0 build
])
def test_agent_installs_another_build_of_the_same_release(installed: str, pinned: str,
                                                          installs: bool) -> None:
    from roles.agent import satisfied

    assert satisfied([installed], pinned) is not installs
    facts = converged_facts("ubuntu22")
    facts["packages.VenvDistributions"] = {"nodegate": [installed], "pysnmp": ["7.1.22"]}
    result = run(agent, data=host_data(gate_level="quick", agent_package=f"nodegate=={pinned}"),
                 facts=facts, files=converged_files("ubuntu22"), converged=True)
    pip = [c for c in result.commands if "/bin/pip install" in c]
    assert len(pip) == installs, pip
    if installs:
        assert pip[0].endswith(f"'nodegate[power]=={pinned}'"), pip


def test_venv_distributions_keep_local_versions() -> None:
    from nodegate.facts.packages import VenvDistributions

    out = ['[{"name": "torch", "version": "2.13.0+cpu"}, {"name": "Nvidia_ML-Py", '
           '"version": "13.615.71"}, {"name": "nodegate", "version": "0.1.0"}]']
    assert VenvDistributions().process(out) == {
        "torch": ["2.13.0+cpu"], "nvidia-ml-py": ["13.615.71"], "nodegate": ["0.1.0"]}
    assert VenvDistributions().process(["not json"]) == {}


def test_node_wiring_carries_each_pdus_rating_to_the_circuit_check() -> None:
    pdus = [{"name": "b01-pdu-a", "url": "snmp://10.20.201.1:161", "model": "apc-rpdu2",
             "outlets": [1], "circuit_amps": 60, "circuit_volts": 415, "phases": 3},
            {"name": "b01-pdu-b", "url": "snmp://10.20.201.2:161", "model": "apc-rpdu2",
             "outlets": [1]}]
    result = run(pdu_monitor, data=host_data(nodegate_pdus=pdus))
    wiring = json.loads(result.uploads["/etc/nodegate/node.json"])
    assert wiring["circuits"] == 2
    assert wiring["feeds"] == [{"pdu": "b01-pdu-a", "amps": 60, "volts": 415, "phases": 3},
                               {"pdu": "b01-pdu-b"}]


def test_a_running_driver_other_than_the_installed_one_needs_the_reboot() -> None:
    """Where the kernel shows no nvidia module (a container, the lab) the driver NVML reports
    is what runs: after the packages moved to the pin, the old one running asks for a reboot."""
    facts = {**converged_facts("ubuntu22"), "gpu.GpuProcesses": [],
             "gpu.SlurmNodeState": "IDLE+DRAIN", "kernel.RunningDriverVersion": "570.124.06"}
    files = converged_files("ubuntu22")
    result = run(nvidia_driver, data=host_data(nvidia_driver_allow_reboot=True,
                                               nvidia_driver_reboot_timeout=120),
                 facts=facts, files=files, converged=True)
    op = next(o for o in result.ops if o.name.endswith("reboot if the loaded module is stale"))
    assert any("reboot" in c for c in op.commands), op.commands
    same = run(nvidia_driver, data=host_data(nvidia_driver_allow_reboot=True),
               facts={**facts, "kernel.RunningDriverVersion": DRIVER}, files=files,
               converged=True)
    op = next(o for o in same.ops if o.name.endswith("reboot if the loaded module is stale"))
    assert not any("reboot" in c for c in op.commands), op.commands


class _Rebooting:
    """A host whose boot id changes after ``after`` reads (None: never comes back)."""

    name = "testhost"

    def __init__(self, after: int | None) -> None:
        self.after, self.reads, self.connected = after, 0, True

    def get_fact(self, _cls: Any) -> str:
        self.reads += 1
        return "new-boot" if self.after is not None and self.reads > self.after else "old-boot"

    def connect(self, show_errors: bool = True) -> None:
        self.connected = True

    def disconnect(self) -> None:
        self.connected = False


@pytest.mark.parametrize(("after", "back"), [(3, True), (None, False)])
def test_the_reboot_waits_for_a_new_boot_id_within_its_timeout(
        monkeypatch: pytest.MonkeyPatch, after: int | None, back: bool) -> None:
    """The wait ends on a new boot id (not on uptime: a container shows the host's) and
    gives up, failing the host, at its timeout."""
    monkeypatch.setattr(server.time, "sleep", lambda _s: None)
    clock = iter(range(0, 10_000, 10))
    monkeypatch.setattr(server.time, "monotonic", lambda: float(next(clock)))
    remember, reboot, wait = server.reboot_and_wait(60)
    node = _Rebooting(after)
    assert remember.function(None, node) is True
    assert "reboot" in str(reboot)
    assert wait.function(None, node) is back
    assert node.reads <= 8  # bounded: 60 s at one read per 10 s


@pytest.mark.parametrize(("data", "node"), [
    ({}, "gpu-b01"),                                   # the site's slurm.node_name
    ({"nodegate_slurm": {}, "slurm_node_controller": "ctl"}, "testhost"),  # slurm_node role
    ({"nodegate_slurm": {}}, None),                    # no Slurm here: no gate scheduled
])
def test_the_scheduled_gate_names_the_node_as_slurm_knows_it(data: dict[str, Any],
                                                             node: str | None) -> None:
    """A node slurm_node configures but the site does not name is listed by slurm_controller
    under its inventory name; its periodic gate must drain it by that name, not be left out."""
    import re

    result = run(agent, data=host_data(**data))
    text = "\n".join(result.commands) + "\n".join(result.uploads.values())
    assert set(re.findall(r"gate --node (\S+)", text)) == ({node} if node else set())


@pytest.mark.parametrize("insecure", [True, False])
def test_an_http_bmc_reaches_the_poller_only_with_the_sites_insecure_flag(
        insecure: bool) -> None:
    """The poller refuses a plain http:// BMC unless the site opted out of TLS: the role must
    carry that flag, or a site that set it deploys a poller that will not start."""
    from nodegate.power.poller import load_config

    data = host_data()
    bmc = {**data["nodegate_bmc"], "url": "http://10.20.101.11"}
    if insecure:
        bmc["insecure"] = True
    config = run(pdu_monitor, data={**data, "nodegate_bmc": bmc}).uploads[
        "/etc/nodegate/power-poller.yaml"]
    assert ("insecure: true" in config) is insecure
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "poller.yaml"
        path.write_text(config)
        if insecure:
            assert load_config(path).bmcs
        else:
            with pytest.raises(ConfigError, match="insecure"):
                load_config(path)
