"""The Soft-RoCE testbed's wiring without booting it: names, addresses, site file, qemu args."""

from __future__ import annotations

from pathlib import Path

import yaml

from nodegate.site import load_site
from nodegate_lab import config, mdvm, rxevm


def test_taps_are_this_instances_links_and_fit_ifnamsiz() -> None:
    for member in rxevm.MEMBERS:
        assert config.owns_link(member.tap) and len(member.tap) <= 15
    assert len({m.mac for m in rxevm.MEMBERS}) == len({m.address for m in rxevm.MEMBERS}) == 2
    assert rxevm.NETNS.startswith(config.NS_PREFIX)  # the lab's teardown sees it too


def test_the_rdma_nic_declares_its_speed_and_rides_on_the_vm(tmp_path: Path) -> None:
    vm = mdvm.VM(dir=tmp_path, kernel="6.1.0-50-amd64", accel="tcg", port=2222,
                 extra_qemu=rxevm._nic_args(rxevm.MEMBERS[0]))
    argv = mdvm.qemu_argv(vm, tmp_path / "vmlinuz", tmp_path / "initrd")
    nic = argv[-4:]  # after the md VM's own devices
    assert nic[:2] == ["-netdev", f"tap,id=rdma0,ifname={rxevm.MEMBERS[0].tap},script=no,"
                                  "downscript=no"]
    assert "speed=100000,duplex=full" in nic[3]
    vm.save()
    assert mdvm.load(tmp_path) == vm  # vm.json keeps the extra devices for a reboot


def test_the_site_file_loads_with_the_softroce_profile(tmp_path: Path) -> None:
    vms = [mdvm.VM(dir=tmp_path / m.name, kernel="k", port=2200 + m.index)
           for m in rxevm.MEMBERS]
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(rxevm.site_data(vms)))
    site = load_site(str(path))
    assert sorted(site.hosts) == list(rxevm.NAMES)
    assert {h.profile.name for h in site.hosts.values() if h.profile} == {rxevm.PROFILE}


def test_guest_setup_makes_rxe_over_eth1_once() -> None:
    text = rxevm.guest_setup(rxevm.MEMBERS[1])
    assert "rdma link add rxe0 type rxe netdev eth1" in text
    assert "test -e /sys/class/infiniband/rxe0 ||" in text  # a rerun does not add a second
