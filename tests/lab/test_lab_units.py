"""Fast checks of the lab's pure parts: no root, no containers."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodegate.errors import ConfigError
from nodegate_lab import base, cli, config, lab, sitefile


def test_lab_refuses_without_root(monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    assert cli.main(["status"]) == 3
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


def test_the_md_vm_root_is_keyed_by_the_base_code_with_its_old_keys() -> None:
    """mdvm's image key is the base's ``image_key`` under its own recipe name, derived as each
    key was before they shared it, so tarballs already built stay valid."""
    import hashlib

    from nodegate_lab import mdvm

    def old_key(*parts: str) -> str:
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]

    assert mdvm.image_key() == old_key(config.SUITE, "mdvm", mdvm.RECIPE_VERSION,
                                       *sorted(mdvm.PACKAGES))
    assert base.base_key() == old_key(config.SUITE, base.RECIPE_VERSION,
                                      *sorted(config.BASE_PACKAGES))
    assert mdvm.tarball_path().name == f"rootfs-{config.SUITE}-{mdvm.image_key()}.tar"


def test_strip_identity_leaves_no_host_key_or_machine_id(tmp_path: Path) -> None:
    (tmp_path / "etc/ssh").mkdir(parents=True)
    (tmp_path / "etc/ssh/ssh_host_ed25519_key").write_text("secret")
    (tmp_path / "etc/machine-id").write_text("0123\n")
    base.strip_identity(tmp_path, "x.conf")
    assert not list((tmp_path / "etc/ssh").glob("ssh_host_*"))
    assert (tmp_path / "etc/machine-id").read_text() == ""
    assert "PasswordAuthentication no" in (tmp_path / "etc/ssh/sshd_config.d/x.conf").read_text()


def test_nodegate_lab_is_a_one_line_pointer_on_the_node_cli(
        capsys: pytest.CaptureFixture[str]) -> None:
    import re

    from nodegate import cli as node_cli

    for argv in (["lab"], ["lab", "up", "--nodes", "3", "--fault", "node3:x"], ["lab", "-h"]):
        assert node_cli.main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "`nodegate-lab`" in err[0], err
    assert re.search(r"^\s+lab\s", node_cli.build_parser().format_help(), re.M) is None


def test_mdvm_status_of_no_vm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["mdvm", "--dir", str(tmp_path / "vm"), "status"]) == 1
    assert capsys.readouterr().out.strip() == "mdvm: none"
    assert cli.main(["mdvm"]) == 2  # the group alone: its help


def test_debootstrap_uses_the_mirror_apt_uses() -> None:
    assert base.debian_mirror().startswith(("http://", "https://"))


def test_addresses_stay_in_the_lab_subnet() -> None:
    members = [config.CONTROLLER, *(config.node(i) for i in range(1, config.MAX_NODES + 1))]
    addresses = [m.address for m in members] + [m.bmc_address for m in members[1:]]
    addresses += [config.HOST_ADDRESS, config.PDU_ADDRESS]
    assert len(set(addresses)) == len(addresses)
    assert all(a.startswith(f"{config.SUBNET_PREFIX}.") and 0 < int(a.rsplit(".", 1)[1]) < 255
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


def test_site_file_pins_the_build_the_mirror_serves(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sitefile, "site_path", lambda: tmp_path / "inventory" / "lab.yaml")
    args = ([config.node(1)], {"node1": "h100-hgx"}, {"node1": []}, tmp_path / "k",
            tmp_path / "kh")
    pinned = sitefile.site_data(*args, nodegate_version="0.1.0+src.0a1b2c3d4e5f")
    assert pinned["defaults"]["data"]["agent_package"] == "nodegate==0.1.0+src.0a1b2c3d4e5f"
    sitefile.write(pinned)  # a knob the site loader accepts
    assert "agent_package" not in sitefile.site_data(*args)["defaults"]["data"]


def test_the_site_file_turns_the_slurm_roles_on_with_the_container_recipe(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lab's Slurm is the roles' (deploy/slurm.py): the site file carries their knobs."""
    from nodegate_lab import controller

    monkeypatch.setenv("NODEGATE_LAB_DIR", str(tmp_path / "lab"))
    data = sitefile.site_data([config.node(1), config.node(2)], {"node1": "x", "node2": "x"},
                              {"node1": [], "node2": []}, tmp_path / "k", tmp_path / "kh")
    ctl = data["hosts"]["slurmctl"]["data"]
    assert ctl["slurm_controller_enabled"] is True
    assert ctl["slurm_controller_munge_key_file"] == str(controller.munge_key_path())
    assert (ctl["slurm_controller_proctrack"], ctl["slurm_controller_task_plugin"]) == (
        "proctrack/linuxproc", "task/none")  # no cgroup delegation in the containers
    assert ctl["slurm_controller_health_check"] is False  # the tests run the gate themselves
    nodes = data["defaults"]["data"]
    assert nodes["slurm_node_controller"] == "slurmctl"
    assert nodes["slurm_node_munge_key_file"] == str(controller.munge_key_path())
    assert (nodes["slurm_node_cpus"], nodes["slurm_node_real_memory"]) == (1, 500)
    sitefile.write(data)  # knobs the site loader accepts
    bare = sitefile.site_data([config.node(1)], {"node1": "x"}, {"node1": []},
                              tmp_path / "k", tmp_path / "kh", with_mirror=False)
    assert "data" not in bare["hosts"]["slurmctl"]  # --no-mirror: no Slurm packages


def test_site_file_names_secrets_by_variable_only(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEGATE_LAB_DIR", str(tmp_path / "lab"))
    data = sitefile.site_data([config.node(1)], {"node1": "h100-hgx"},
                              {"node1": ["/dev/disk/by-id/nvme-X"]}, tmp_path / "k",
                              tmp_path / "kh")
    node1 = data["hosts"]["node1"]
    assert node1["pdu"] == {"name": "lab-pdu", "url": f"snmp://{config.PDU_ADDRESS}:1161",
                            "model": "apc-rpdu2", "outlets": [1],
                            "community_env": "NODEGATE_LAB_PDU_COMMUNITY"}
    assert node1["bmc"]["password_env"] == "NODEGATE_LAB_BMC_PASSWORD"
    assert data["defaults"]["profile"] == "sim-h100-hgx"
    assert data["defaults"]["data"]["nvidia_driver_source"] == "mirror"
    nopdu = sitefile.site_data([config.node(1)], {"node1": "h100-hgx"},
                               {"node1": []}, tmp_path / "k", tmp_path / "kh", with_pdu=False)
    assert "pdu" not in nopdu["hosts"]["node1"]


def test_the_munge_key_is_made_once_per_lab_dir(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from nodegate_lab import controller

    monkeypatch.setenv("NODEGATE_LAB_DIR", str(tmp_path))
    key = controller.munge_key()
    assert len(key) == 1024 and controller.munge_key() == key
    assert controller.munge_key_path().stat().st_mode & 0o777 == 0o400
    assert set(controller.PACKAGES["node"]) == {"slurmd", "slurm-client", "munge"}


def test_bmc_certificate_verifies_against_the_lab_ca(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil
    import subprocess

    from nodegate_lab import services

    if shutil.which("openssl") is None:
        pytest.skip("openssl missing: install lab/src/nodegate_lab/host-packages.txt")
    monkeypatch.setenv("NODEGATE_LAB_DIR", str(tmp_path))
    cert, key = services._tls_pair()
    ca = services.bmc_ca_path()
    assert ca.parent == tmp_path / "pki" and not list(ca.parent.glob("*key*"))
    assert key.stat().st_mode & 0o077 == 0
    for ip in (config.node(1).bmc_address, config.node(config.MAX_NODES).bmc_address):
        proc = subprocess.run(["openssl", "verify", "-CAfile", str(ca), "-verify_ip", ip,
                               "-purpose", "sslserver", str(cert)], capture_output=True,
                              text=True, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert services._tls_pair() == (cert, key)  # made once
    site = sitefile.site_data([config.node(1)], {"node1": "h100-hgx"}, {"node1": []},
                              tmp_path / "k", tmp_path / "kh")
    assert site["hosts"]["node1"]["bmc"]["verify_tls"] is True
    assert site["hosts"]["node1"]["bmc"]["ca_bundle"] == str(ca)


def test_a_second_lab_instance_uses_its_own_names(tmp_path: Path) -> None:
    import json
    import os
    import subprocess
    import sys

    code = ("import json; from nodegate_lab import config, sitefile; print(json.dumps(["
            "config.SUBNET_PREFIX, config.UPLINK, config.BRIDGE_NS, config.node(1).veth, "
            "str(config.lab_dir()), str(sitefile.site_path()), config.owns_link('ngl0')]))")
    env = {**os.environ, "NODEGATE_LAB_INSTANCE": "2"}
    env.pop("NODEGATE_LAB_DIR", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout
    assert json.loads(out) == ["10.77.9", "ngl2", "ngl2-bridge", "ngl2v-node1",
                               "/var/lib/nodegate-lab2", "/var/lib/nodegate-lab2/lab.yaml", False]
    assert config.owns_link(config.UPLINK) and not config.owns_link("eth0")


def test_lab_up_outside_a_checkout_says_it_needs_one(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """An installed nodegate has no tree to build the nodes' wheel from: exit 2 at once, not
    pip's 'No matching distribution found for nodegate' at the first deploy."""
    from nodegate import paths
    from nodegate_lab import mirror

    monkeypatch.setattr(paths, "project_root", lambda: None)
    with pytest.raises(ConfigError, match="checkout"):
        mirror._wheels(tmp_path / "wheels")
    assert not (tmp_path / "wheels").exists()


def test_prebuild_builds_the_three_images_at_once_and_says_which_failed(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    """``make test`` starts ``nodegate-lab prebuild`` beside the fast tests: each image is
    built under its own lock; one that fails is named and the exit says so (the slow tests
    then build it themselves)."""
    from nodegate_lab import mdvm, mirror

    monkeypatch.setattr(mdvm, "build", lambda: tmp_path / "mdvm.tar")
    monkeypatch.setattr(base, "build", lambda: tmp_path / "base.tar")
    monkeypatch.setattr(mirror, "build", lambda: tmp_path / "mirror")
    assert cli.main(["prebuild"]) == 0
    out = capsys.readouterr().out
    for name, path in (("md VM image", "mdvm.tar"), ("lab base", "base.tar"),
                       ("package mirror", "mirror")):
        assert f"nodegate-lab prebuild: {name}: {tmp_path / path} (ready after" in out

    def no_network() -> Path:
        raise OSError("apt-get download failed: Temporary failure resolving")

    monkeypatch.setattr(mirror, "build", no_network)
    assert cli.main(["prebuild"]) == 1
    assert ("nodegate-lab prebuild: package mirror: not built: apt-get download failed"
            in capsys.readouterr().out)


def test_a_host_booted_on_another_checkouts_simulator_is_stale(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``lab up`` over a lab left up before a pull: a node booted on another build of the
    simulated driver is powered off and booted on this one (docs/lab.md)."""
    import json

    from nodegate.sim import build
    from nodegate_lab import hosts

    member = config.node(1)
    monkeypatch.setattr(config.Member, "dir", property(lambda self: tmp_path / self.name))
    (tmp_path / member.name).mkdir()
    assert hosts.running_sim_lib(member) is None and not lab._stale_simulator(member)
    old, new = tmp_path / "sim" / "old", tmp_path / "sim" / "new"
    argv = ["systemd-nspawn", "--bind=/dev/loop12", f"--bind-ro={old}:{hosts.SIM_LIB_IN_NODE}",
            "--bind-ro=/var/lib/nodegate-lab/pki:/var/lib/nodegate-lab/pki"]
    (tmp_path / member.name / "supervisor.json").write_text(json.dumps({"argv": argv}))
    assert hosts.running_sim_lib(member) == str(old)
    monkeypatch.setattr(build, "ensure_built", lambda: new)
    assert lab._stale_simulator(member)
    monkeypatch.setattr(build, "ensure_built", lambda: old)
    assert not lab._stale_simulator(member)
