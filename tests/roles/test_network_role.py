"""The network role: RDMA stack, GPUDirect RDMA's kernel side, RoCE settings, NCCL hand-off.

Facts in, commands out (tests/roles/harness.py); the RoCE cases use the Soft-RoCE testbed's
profile (``softroce-vm``) and RDMA ports shaped as ``nodegate.facts.roce.RocePorts`` reads them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyinfra.context import host

from nodegate.errors import ConfigError
from nodegate.facts.roce import RocePorts
from nodegate.site import load_site
from roles.network import SCRIPT, network
from tests.roles.harness import run
from tests.roles.scenarios import host_data

PORTS_1500 = [{"device": "rxe0", "port": 1, "link_layer": "Ethernet", "netdev": "eth1",
               "mtu": 1500, "tos": None}]
PORTS_9000 = [{**PORTS_1500[0], "mtu": 9000}]
INSTALLED = {"deb.DebPackages": {p: ["1"] for p in ("rdma-core", "ibverbs-utils",
                                                    "infiniband-diags", "perftest")}}


def _roce(**extra: Any) -> dict[str, Any]:
    return host_data("softroce-vm", **extra)


def test_infiniband_node_gets_the_distribution_stack_and_nothing_for_dmabuf() -> None:
    result = run(network, data=host_data("xe9680-h100"))
    assert result.error is None
    assert ("env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "
            "rdma-core ibverbs-utils infiniband-diags perftest -o DPkg::Lock::Timeout=300") \
        in result.commands
    assert not any("modprobe" in c or SCRIPT in c for c in result.commands)
    assert any("DMA-BUF: nothing to load" in n for n in result.noops)
    assert any("no RoCE rails" in n for n in result.noops)
    rhel = run(network, os="rocky9", data=host_data("xe9680-h100"))
    assert "dnf -y -q install rdma-core libibverbs-utils infiniband-diags perftest" \
        in rhel.commands


def test_a_node_without_rails_gets_nothing() -> None:
    result = run(network, data=host_data("h200-single"))  # no rails, no host.infiniband
    assert result.error is None and result.commands == []
    assert any("no RDMA rails" in n for n in result.noops)


def test_roce_mtu_drift_is_applied_now_and_at_boot() -> None:
    result = run(network, os="debian12", data=_roce(), facts={"roce.RocePorts": PORTS_1500})
    assert result.error is None
    script = result.uploads[SCRIPT]
    assert "ip link set dev eth1 mtu 9000" in script
    assert "default_roce_tos" not in script and "dcb" not in script  # nothing declared
    assert "systemctl enable nodegate-roce.service" in result.commands
    apply = [op for op in result.ops if "apply RoCE settings (eth1 mtu 1500)" in op.name]
    assert apply and apply[0].commands == [SCRIPT] and not apply[0].conditional


def test_roce_converged_changes_nothing() -> None:
    facts = {"roce.RocePorts": PORTS_9000, **INSTALLED,
             "systemd.SystemdEnabled": {"nodegate-roce.service": True}}
    result = run(network, os="debian12", data=_roce(), facts=facts, converged=True)
    assert result.error is None
    assert [op.name for op in result.unconditional_changes()] == []
    assert any("RoCE settings in place on eth1" in n for n in result.noops)


def test_site_dscp_pfc_ecn_are_rendered_and_nccl_gets_the_traffic_class() -> None:
    seen: dict[str, Any] = {}

    def network_then_nccl_view() -> None:
        network()
        seen["nccl_ib_tc"] = host.data.get("nccl_ib_tc")

    site = {"dscp": 26, "pfc_priority": 3, "ecn": True}
    result = run(network_then_nccl_view, os="debian12", data=_roce(nodegate_network=site),
                 facts={"roce.RocePorts": PORTS_9000})
    assert result.error is None
    script = result.uploads[SCRIPT]
    assert 'echo 104 > "$cfg/rdma_cm/rxe0/ports/1/default_roce_tos"' in script  # 26 << 2
    assert "dcb apptrust set dev eth1 order dscp" in script
    assert "dcb pfc set dev eth1 prio-pfc 0:off 1:off 2:off 3:on 4:off 5:off 6:off 7:off" \
        in script
    assert "ecn/$side/enable/3" in script
    assert any("eth1 mtu" not in op.name and "rxe0/1 tos None" in op.name for op in result.ops)
    assert seen["nccl_ib_tc"] == "104"
    operator = run(network_then_nccl_view, os="debian12",
                   data=_roce(nodegate_network=site, nccl_ib_tc="96"),
                   facts={"roce.RocePorts": PORTS_9000})
    assert operator.error is None and seen["nccl_ib_tc"] == "96"  # the operator's value wins


@pytest.mark.parametrize(("site", "message"), [
    ({"dscp": 64}, "is not a DSCP (0-63)"),
    ({"pfc_priority": 8}, "is not a priority (0-7)"),
    ({"ecn": True}, "network_ecn needs network_pfc_priority"),
    ({"stack": "doca-ofed"}, "needs network_ofed_mirror_url"),
    ({"stack": "ofed"}, "network_stack must be one of distro, doca-ofed, mlnx-ofed"),
])
def test_bad_site_values_stop_the_host(site: dict[str, Any], message: str) -> None:
    result = run(network, data=_roce(nodegate_network=site), facts={"roce.RocePorts": PORTS_9000})
    assert result.error and message in result.error and "testhost" in result.error
    assert not any(c.startswith(("apt-get", "ip ")) for c in result.commands)


def test_roce_profile_without_an_rdma_port_is_an_error() -> None:
    result = run(network, data=_roce())
    assert result.error and "no RDMA port over Ethernet matching ['rxe[0-9]*']" in result.error
    ib_only = [{**PORTS_9000[0], "link_layer": "InfiniBand", "netdev": None}]
    assert run(network, data=_roce(), facts={"roce.RocePorts": ib_only}).error


def test_a_netdev_name_that_is_not_plain_is_refused() -> None:
    hostile = [{**PORTS_1500[0], "netdev": "eth1;reboot"}]
    result = run(network, data=_roce(), facts={"roce.RocePorts": hostile})
    assert result.error and "will not put in a shell script" in result.error


def test_ofed_from_the_site_mirror() -> None:
    site = {"stack": "mlnx-ofed", "ofed_mirror_url": "http://mirror.site/mlnx_ofed/rhel9"}
    result = run(network, os="rocky9", data=host_data("xe9680-h100", nodegate_network=site))
    assert result.error is None
    repo = result.uploads["/etc/yum.repos.d/nodegate-ofed.repo"]
    assert "baseurl=http://mirror.site/mlnx_ofed/rhel9" in repo and "gpgcheck=0" in repo
    assert "dnf -y -q install mlnx-ofed-all perftest" in result.commands
    doca = {"stack": "doca-ofed", "ofed_mirror_url": "http://mirror.site/doca/ubuntu22",
            "ofed_keyring_url": "http://mirror.site/doca/GPG-KEY"}
    deb = run(network, data=host_data("xe9680-h100", nodegate_network=doca))
    assert "deb [signed-by=/usr/share/keyrings/nodegate-ofed.gpg] " \
           "http://mirror.site/doca/ubuntu22 ./" in deb.uploads[
               "/etc/apt/sources.list.d/nodegate-ofed.list"]
    assert any(c.endswith("install -y -q --no-install-recommends doca-ofed perftest "
                          "-o DPkg::Lock::Timeout=300")
               for c in deb.commands)


def test_peermem_is_loaded_against_the_stack_in_use() -> None:
    loaded = {"kernel.LoadedModuleVersions": {"nvidia": "535.183.01"}}
    result = run(network, data=host_data("hgx-a100-80gb"), facts=loaded)
    assert result.error is None and "modprobe -a nvidia_peermem" in result.commands
    converged = run(network, data=host_data("hgx-a100-80gb"),
                    facts={**loaded, "server.KernelModules": {"nvidia_peermem": {}}})
    assert "modprobe -a nvidia_peermem" not in converged.commands
    no_driver = run(network, data=host_data("hgx-a100-80gb"))
    assert not any("modprobe" in c for c in no_driver.commands)
    assert any("loads with the nvidia driver" in n for n in no_driver.noops)
    nspawn = run(network, data=host_data("hgx-a100-80gb"),
                 facts={**loaded, "virt.Container": "systemd-nspawn"})
    assert not any("modprobe" in c for c in nspawn.commands)


def test_dmabuf_on_an_old_kernel_is_refused() -> None:
    result = run(network, data=host_data("xe9680-h100"),
                 facts={"server.KernelVersion": "5.4.0-150-generic"})
    assert result.error and "DMA-BUF needs Linux >= 5.12" in result.error


def test_the_fact_reads_sysfs_lines() -> None:
    fact = RocePorts()
    out = fact.process(["rxe0|1|Ethernet|eth1|9000|104", "mlx5_0|1|InfiniBand|||",
                        "garbage"])
    assert out == [{"device": "rxe0", "port": 1, "link_layer": "Ethernet", "netdev": "eth1",
                    "mtu": 9000, "tos": 104},
                   {"device": "mlx5_0", "port": 1, "link_layer": "InfiniBand", "netdev": None,
                    "mtu": None, "tos": None}]


def test_the_site_network_section_reaches_the_role_and_is_validated(tmp_path: Path) -> None:
    head = "schema: nodegate.site/1\nname: t\nhosts:\n  n1:\n    address: 10.0.0.1\n" \
           "    profile: softroce-vm\n"
    path = tmp_path / "site.yaml"
    path.write_text(head + "    network: {dscp: 26, pfc_priority: 3, stack: distro}\n")
    (site_host,) = load_site(str(path)).hosts.values()
    data = site_host.pyinfra_data("t")
    assert data["nodegate_network"] == {"dscp": 26, "pfc_priority": 3, "stack": "distro"}
    result = run(network, data=data, facts={"roce.RocePorts": PORTS_9000})
    assert result.error is None and "echo 104 >" in result.uploads[SCRIPT]
    path.write_text(head + "    network: {dscp: 64}\n")
    with pytest.raises(ConfigError) as info:
        load_site(str(path))
    assert info.value.key == "hosts.n1.network.dscp"


def test_nvswitch_management_functions_get_no_roce_setting() -> None:
    """An NVLink 5 board's SW_MNG functions (facts.rdma.RdmaRails ``sw_mng``) are no rails,
    whatever link layer they show: no MTU, ToS or PFC for them, the rails keep theirs. (Named
    to match this profile's rail globs, so only the marker keeps it out.)"""
    lpf = {**PORTS_1500[0], "device": "rxe8", "netdev": "eth8"}
    hcas = {"rxe0": {"path": None, "ports": {"1": "Ethernet"}},
            "rxe8": {"path": None, "ports": {"1": "Ethernet"}, "sw_mng": True}}
    result = run(network, os="debian12", data=_roce(),
                 facts={"roce.RocePorts": [*PORTS_1500, lpf],
                        "rdma.RdmaRails": {"gpus": [], "hcas": hcas}})
    assert result.error is None
    script = result.uploads[SCRIPT]
    assert "ip link set dev eth1 mtu 9000" in script and "eth8" not in script
    assert any("not rails: rxe8" in n for n in result.noops)
    control = run(network, os="debian12", data=_roce(),
                  facts={"roce.RocePorts": [*PORTS_1500, lpf]})
    assert "eth8" in control.uploads[SCRIPT]
