"""Fast checks of the lab's pure parts: no root, no containers."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodegate import cli
from nodegate.errors import ConfigError
from nodegate.lab import base, config, lab, sitefile


def test_lab_refuses_without_root(monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    assert cli.main(["lab", "status"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs root" in err[0]


def test_fault_tokens_name_lab_nodes() -> None:
    assert lab.parse_faults(["node2:xid79@gpu6", "node2:persistence-off"], 2) == {
        "node2": ["xid79@gpu6", "persistence-off"]}
    with pytest.raises(ConfigError, match="NODE:FAULT"):
        lab.parse_faults(["node3:xid79@gpu6"], 2)
    with pytest.raises(ConfigError):
        lab.parse_faults(["xid79@gpu6"], 2)


def test_base_key_follows_the_package_list() -> None:
    assert base.base_key(("a", "b")) == base.base_key(("b", "a"))
    assert base.base_key(("a", "b")) != base.base_key(("a", "b", "c"))
    assert base.tarball_path().name.startswith(f"base-{config.SUITE}-")


def test_debootstrap_uses_the_mirror_apt_uses() -> None:
    assert base.debian_mirror().startswith(("http://", "https://"))


def test_addresses_stay_in_the_lab_subnet() -> None:
    members = [config.CONTROLLER, *(config.node(i) for i in range(1, config.MAX_NODES + 1))]
    addresses = [m.address for m in members] + [m.bmc_address for m in members[1:]]
    addresses += [config.HOST_ADDRESS, config.PDU_ADDRESS]
    assert len(set(addresses)) == len(addresses)
    assert all(a.startswith("10.77.7.") and 0 < int(a.rsplit(".", 1)[1]) < 255
               for a in addresses)
    assert all(len(m.veth) <= 15 for m in members)


def test_site_file_loads_as_pyinfra_will(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sitefile, "site_path", lambda: tmp_path / "inventory" / "lab.yaml")
    nodes = [config.node(1), config.node(2)]
    data = sitefile.site_data(
        nodes, {"node1": "h100-hgx", "node2": "h100-hgx+xid79@gpu6"},
        {n.name: [f"/dev/disk/by-id/nvme-X_{n.name}_{i}" for i in range(4)] for n in nodes},
        tmp_path / "id_ed25519", tmp_path / "known_hosts")
    sitefile.write(data)
    from nodegate.site import load_site

    site = load_site(str(tmp_path / "inventory" / "lab.yaml"))
    assert [h.name for h in site.gpu_nodes()] == ["node1", "node2"]
    assert site.hosts["slurmctl"].profile is None
    assert site.groups["controllers"] == ["slurmctl"]
