"""Site files, secrets by reference, the Ansible import, and pyinfra's view of the inventory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nodegate.errors import ConfigError
from nodegate.secret_refs import find_literal_secrets, resolve_secret
from nodegate.site import load_site
from nodegate.site.ansible import load_ansible_inventory
from tests.conftest import ROOT

DATA = Path(__file__).parent / "data"


def test_example_site_loads_with_resolved_profiles() -> None:
    site = load_site("example-site")
    assert set(site.hosts) == {"gpu-b01", "gpu-b02", "gpu-b11", "gpu-b12"}
    b01 = site.hosts["gpu-b01"]
    assert b01.profile is not None and b01.profile.name == "xe9680-h100"
    assert b01.data["slurm"]["node_name"] == "gpu-b01"
    assert len(b01.data["pdus"]) == 2
    # site layer: inlet threshold from the site file; host layer: gpu-b02's NVMe count
    inlet = b01.profile.threshold("inlet_temp_max_c")
    assert inlet is not None and inlet.value == 32
    b02 = site.hosts["gpu-b02"]
    assert b02.profile is not None and b02.profile.data["nvme"]["devices"] == 4
    assert site.hosts["gpu-b11"].profile.name == "xd670-h200"  # type: ignore[union-attr]


SITE_HEAD = "schema: nodegate.site/1\nname: t\nhosts:\n  n1:\n    address: 10.0.0.1\n"


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ("    bmc: {url: 'https://10.0.0.2', password: hunter2}\n", "hosts.n1.bmc.password"),
        ("    pdu: {url: 'snmp://public@10.0.0.3:161', model: apc-rpdu2}\n", "hosts.n1.pdu.url"),
        ("    pdu: {url: 'snmp://10.0.0.3', model: apc-rpdu2, community: private}\n",
         "hosts.n1.pdu.community"),
        ("    bmc: {url: 'https://root:calvin@10.0.0.2'}\n", "hosts.n1.bmc.url"),
    ],
)
def test_literal_secrets_are_rejected(tmp_path: Path, extra: str, key: str) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(SITE_HEAD + "    profile: xe9680-h100\n" + extra)
    with pytest.raises(ConfigError) as info:
        load_site(str(path))
    assert info.value.key == key
    assert info.value.file == str(path)
    assert "hunter2" not in str(info.value) and "calvin" not in str(info.value)


def test_secret_references_resolve(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("s3cret\n")
    secret.chmod(0o600)
    assert resolve_secret({"password_file": str(secret)}, "password", where="x") == "s3cret"
    assert resolve_secret({"password_env": "PW"}, "password", where="x",
                          environ={"PW": "v"}) == "v"
    secret.chmod(0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        resolve_secret({"password_file": str(secret)}, "password", where="x")
    with pytest.raises(ConfigError, match="not set"):
        resolve_secret({"password_env": "NOPE_UNSET"}, "password", where="x", environ={})
    assert find_literal_secrets({"a": {"community_env": "X", "auth_password_file": "/f"}}) == []


def test_bad_site_key_names_host_and_key(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(SITE_HEAD + "    profile: xe9680-h100\n    ssh_prot: 22\n")
    with pytest.raises(ConfigError) as info:
        load_site(str(path))
    assert (info.value.host, info.value.key) == ("n1", "hosts.n1.ssh_prot")


@pytest.mark.parametrize(("text", "host", "key"), [
    ("slurm: {drain_budget: .nan}\n", None, "slurm.drain_budget"),
    ("slurm: {drain_budget: .inf}\n", None, "slurm.drain_budget"),
    ("    profile: xe9680-h100\n    slurm: {node_name: n1, drain_budget: .nan}\n", "n1",
     "hosts.n1.slurm.drain_budget"),
])
def test_a_non_finite_number_names_file_host_and_key(tmp_path: Path, text: str,
                                                      host: str | None, key: str) -> None:
    """``.nan`` passed the schema's 0..1 (it fails no comparison) and was rendered into every
    scheduled gate as ``--drain-budget nan``, which the gate refuses: no node would drain."""
    path = tmp_path / "t.yaml"
    path.write_text(SITE_HEAD + text)
    with pytest.raises(ConfigError, match="not a finite number") as info:
        load_site(str(path))
    assert (info.value.file, info.value.host, info.value.key) == (str(path), host, key)


def test_drain_budget_reaches_every_slurm_node(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(SITE_HEAD + "    profile: xe9680-h100\n    slurm: {node_name: n1}\n"
                    "slurm: {partition: gpu, drain_budget: 0.25}\n")
    site = load_site(str(path))
    assert site.hosts["n1"].pyinfra_data("t")["nodegate_slurm"] == {
        "node_name": "n1", "drain_budget": 0.25}
    path.write_text(SITE_HEAD + "slurm: {drain_budget: -0.1}\n")
    with pytest.raises(ConfigError) as info:
        load_site(str(path))
    assert (info.value.file, info.value.key) == (str(path), "slurm.drain_budget")


def test_drain_budget_reaches_a_gpu_node_without_its_own_slurm_section(tmp_path: Path) -> None:
    """A GPU node without ``slurm:`` is still a Slurm node (named by its host name) whose
    HealthCheckProgram gate takes the budget; the controller (no profile) gets no section."""
    path = tmp_path / "t.yaml"
    path.write_text(SITE_HEAD + "    profile: xe9680-h100\n    slurm: {node_name: n1}\n"
                    "  n2:\n    profile: xe9680-h100\n  ctl: {}\n"
                    "groups: {controllers: [ctl]}\n"
                    "slurm: {partition: gpu, drain_budget: 0.25}\n")
    site = load_site(str(path))
    data = {name: host.pyinfra_data("t") for name, host in site.hosts.items()}
    assert data["n1"]["nodegate_slurm"] == {"node_name": "n1", "drain_budget": 0.25}
    assert data["n2"]["nodegate_slurm"] == {"drain_budget": 0.25}
    assert "nodegate_slurm" not in data["ctl"]
    path.write_text(SITE_HEAD + "    profile: xe9680-h100\n")  # no budget: nothing invented
    assert "nodegate_slurm" not in load_site(str(path)).hosts["n1"].pyinfra_data("t")


def test_unknown_profile_names_host(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(SITE_HEAD + "    profile: xe9999-h900\n")
    with pytest.raises(ConfigError) as info:
        load_site(str(path))
    assert info.value.host == "n1" and "xe9999-h900" in info.value.message


def test_group_member_must_exist(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(SITE_HEAD + "groups:\n  pod: [n1, n9]\n")
    with pytest.raises(ConfigError, match="n9"):
        load_site(str(path))


def test_ansible_ini_with_group_and_host_vars() -> None:
    site = load_ansible_inventory(str(DATA / "ansible-ini" / "hosts.ini"))
    assert set(site.hosts) == {"gpu-a01", "gpu-a02", "gpu-c01", "slurmctl"}
    a02 = site.hosts["gpu-a02"]
    assert a02.address == "10.30.1.12"
    assert a02.data["ssh_port"] == 2222
    assert a02.data["ssh_user"] == "ops"  # group_vars/all
    assert a02.profile is not None and a02.profile.name == "xe9680-h100"  # group_vars/h100
    assert a02.profile.data["gpu"]["power_limit_w"] == 650  # host_vars override layer
    assert site.hosts["gpu-c01"].profile.name == "xd670-h200"  # type: ignore[union-attr]
    assert site.hosts["slurmctl"].profile is None
    assert sorted(site.groups["gpu"]) == ["gpu-a01", "gpu-a02", "gpu-c01"]


def test_ansible_yaml_inventory() -> None:
    site = load_ansible_inventory(str(DATA / "ansible-yaml" / "inventory.yaml"))
    y02 = site.hosts["gpu-y02"]
    assert y02.data["ssh_user"] == "root"
    assert y02.data["sim_scenario"] == "h100-hgx+nvlink-down@gpu3.link5"
    assert y02.data["nvme"]["devices"][0].startswith("/dev/disk/by-id/")
    assert site.hosts["ctl-y"].profile is None


def _debug_inventory(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    pyinfra = Path(sys.executable).parent / "pyinfra"
    return subprocess.run(
        [str(pyinfra), "inventory.py", "debug-inventory"], cwd=ROOT, capture_output=True,
        text=True, env={**os.environ, **env}, timeout=120, check=False,
    )


@pytest.mark.parametrize(
    ("env", "hosts"),
    [
        ({"NODEGATE_SITE": "example-site"}, ["gpu-b01", "gpu-b02", "gpu-b11", "gpu-b12"]),
        ({"NODEGATE_ANSIBLE_INVENTORY": str(DATA / "ansible-ini" / "hosts.ini")},
         ["gpu-a01", "gpu-a02", "gpu-c01", "slurmctl"]),
    ],
)
def test_pyinfra_debug_inventory(env: dict[str, str], hosts: list[str]) -> None:
    result = _debug_inventory(env)
    assert result.returncode == 0, result.stderr
    output = result.stdout + result.stderr  # pyinfra logs to stderr
    assert "Traceback" not in output  # ansible-core under pyinfra's gevent: no noise
    for host in hosts:
        assert f"[{host}]" in output
    assert '"nodegate_profile"' in output


def test_pyinfra_inventory_with_bad_site_fails_before_connecting(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(SITE_HEAD + "    profile: xe9680-h100\n    bmc: {url: 'https://x', password: p}\n")
    result = _debug_inventory({"NODEGATE_SITE": str(path)})
    assert result.returncode != 0
    assert "hosts.n1.bmc.password" in result.stdout + result.stderr


def test_host_data_and_overrides_refine_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(
        "schema: nodegate.site/1\nname: t\n"
        "defaults:\n  profile: xe9680-h100\n"
        "  data: {agent_wheelhouse_url: 'http://m/wheels/', gate_level: quick}\n"
        "  profile_overrides: {nvme: {devices: 1}}\n"
        "hosts:\n"
        "  n1: {}\n"
        "  n2:\n    data: {gate_level: standard}\n"
        "    profile_overrides:\n      thresholds:\n"
        "        gemm_bf16_tflops_min: {min: 1.0, unit: TFLOPS, source: 'policy: test'}\n")
    site = load_site(str(path))
    n1, n2 = site.hosts["n1"], site.hosts["n2"]
    assert n2.data["data"] == {"agent_wheelhouse_url": "http://m/wheels/",
                               "gate_level": "standard"}
    assert n1.data["data"]["gate_level"] == "quick"
    assert n1.profile is not None and n2.profile is not None
    assert n2.profile.data["nvme"]["devices"] == 1  # the defaults' override survives
    assert n2.profile.data["thresholds"]["gemm_bf16_tflops_min"]["min"] == 1.0


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ("    bmc: {url: 'https://10.0.0.2/?password=canary-x1', model: idrac9}\n",
         "hosts.n1.bmc.url"),
        ("    pdu: {url: 'snmp://10.0.0.3?community=canary-x1', model: apc-rpdu2}\n",
         "hosts.n1.pdu.url"),
        ("    pdu: {url: 'snmpv3://u@10.0.0.3?auth_key=canary-x1&priv_key=env:P', "
         "model: apc-rpdu2}\n", "hosts.n1.pdu.url"),
        ("    data: {ipmi_pass: canary-x1}\n", "hosts.n1.data.ipmi_pass"),
        ("    data: {bmc_pwd: canary-x1}\n", "hosts.n1.data.bmc_pwd"),
        ("    data: {slack_token: canary-x1}\n", "hosts.n1.data.slack_token"),
        ("    data: {client_secret_value: canary-x1}\n", "hosts.n1.data.client_secret_value"),
        ("    data: {pdus: [{auth_key: canary-x1}]}\n", "hosts.n1.data.pdus[0].auth_key"),
        ("    data: {mirror: ['https://u:canary-x1@mirror']}\n", "hosts.n1.data.mirror[0]"),
        ("    bmc: {url: 'https://root:canary-x1@[::1', model: idrac9}\n", "hosts.n1.bmc.url"),
    ],
)
def test_every_credential_shape_is_rejected_naming_host_and_key(tmp_path: Path, extra: str,
                                                                key: str) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(SITE_HEAD + extra)
    with pytest.raises(ConfigError) as info:
        load_site(str(path))
    assert (info.value.file, info.value.host, info.value.key) == (str(path), "n1", key)
    assert "canary-x1" not in str(info.value)


def test_references_by_value_and_private_files_load(tmp_path: Path) -> None:
    secret = tmp_path / "community"
    secret.write_text("x\n")
    secret.chmod(0o600)
    path = tmp_path / "t.yaml"
    path.write_text(SITE_HEAD + f"    pdu: {{url: 'snmp://10.0.0.3?community=file:{secret}', "
                    f"model: apc-rpdu2, community_file: {secret}}}\n"
                    "    bmc: {url: 'https://10.0.0.2', password: 'env:BMC_PW', "
                    "password_file: /nonexistent/on/this/machine}\n")
    assert load_site(str(path)).hosts["n1"].data["bmc"]["password"] == "env:BMC_PW"


@pytest.mark.parametrize("form", ["community_file: {f}", "community: 'file:{f}'"])
def test_an_open_secret_file_fails_at_load_naming_the_key(tmp_path: Path, form: str) -> None:
    secret = tmp_path / "community"
    secret.write_text("x\n")
    secret.chmod(0o640)
    path = tmp_path / "t.yaml"
    path.write_text(SITE_HEAD + "    pdu: {url: 'snmp://10.0.0.3', model: apc-rpdu2, "
                    + form.format(f=secret) + "}\n")
    with pytest.raises(ConfigError, match="0640") as info:
        load_site(str(path))
    assert info.value.host == "n1" and info.value.key in ("hosts.n1.pdu.community_file",
                                                          "hosts.n1.pdu.community")


def test_ansible_site_name_is_the_file_name_or_nodegate_site() -> None:
    source = str(DATA / "ansible-ini" / "hosts.ini")
    assert load_ansible_inventory(source).name == "hosts"
    assert load_ansible_inventory(source, site_name="dc7").name == "dc7"


def test_deepops_inventory_keeps_ansible_group_names() -> None:
    site = load_ansible_inventory(str(DATA / "deepops" / "inventory"))
    assert site.name == "inventory"
    assert set(site.hosts) == {"mgmt01", "mgmt02", "mgmt03", "login01", "gpu01", "gpu02"}
    assert sorted(site.groups["slurm-node"]) == ["gpu01", "gpu02"]
    assert site.groups["slurm-master"] == ["login01"]
    assert sorted(site.groups["k8s_cluster"]) == ["gpu01", "gpu02", "mgmt01", "mgmt02",
                                                  "mgmt03"]
    assert sorted(site.groups["slurm-cluster"]) == ["gpu01", "gpu02", "login01"]
    gpu01 = site.hosts["gpu01"]
    assert gpu01.address == "10.0.2.1" and gpu01.data["ssh_user"] == "ubuntu"
    assert gpu01.profile is not None and gpu01.profile.name == "xe9680-h100"
    assert site.hosts["login01"].profile is None


def test_site_file_accepts_hyphenated_group_names(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(SITE_HEAD + "groups:\n  slurm-node: [n1]\n")
    assert load_site(str(path)).groups == {"slurm-node": ["n1"]}


def _vault(text: str) -> str:
    from ansible.parsing.vault import VaultLib, VaultSecret

    body = VaultLib([("default", VaultSecret(b"vault-pw"))]).encrypt(text).decode()
    return "!vault |\n" + "".join(f"  {line}\n" for line in body.splitlines())


def _vaulted_inventory(tmp_path: Path, host_vars: str) -> str:
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "gpu01.yml").write_text(host_vars)
    (tmp_path / "fleet.ini").write_text("[slurm-node]\ngpu01\n")
    return str(tmp_path / "fleet.ini")


def test_vaulted_value_needs_a_password_source(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    source = _vaulted_inventory(tmp_path, "ansible_host: " + _vault("10.0.2.9")
                                + "ansible_become_pass: " + _vault("not-ours"))
    monkeypatch.delenv("ANSIBLE_VAULT_PASSWORD_FILE", raising=False)
    with pytest.raises(ConfigError, match="ANSIBLE_VAULT_PASSWORD_FILE") as info:
        load_ansible_inventory(source)
    assert (info.value.host, info.value.key) == ("gpu01", "ansible_host")
    password = tmp_path / "vault-pass"
    password.write_text("vault-pw\n")
    password.chmod(0o600)
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(password))
    site = load_ansible_inventory(source)  # ansible_become_pass is never read
    assert site.hosts["gpu01"].address == "10.0.2.9" and site.name == "fleet"


def test_a_vaulted_credential_is_refused_even_with_a_password(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = _vaulted_inventory(tmp_path, "nodegate_bmc:\n  url: https://10.0.3.1\n"
                                "  password: " + _vault("canary-v1").replace("\n", "\n  "))
    password = tmp_path / "vault-pass"
    password.write_text("vault-pw\n")
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(password))
    with pytest.raises(ConfigError, match="by reference") as info:
        load_ansible_inventory(source)
    assert (info.value.host, info.value.key) == ("gpu01", "nodegate_bmc.password")


def test_inline_ini_vault_value_names_host_and_key(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "hosts.ini").write_text("[gpu]\ngpu01 ansible_host=$ANSIBLE_VAULT;1.1;AES256\n")
    monkeypatch.delenv("ANSIBLE_VAULT_PASSWORD_FILE", raising=False)
    with pytest.raises(ConfigError) as info:
        load_ansible_inventory(str(tmp_path / "hosts.ini"))
    assert (info.value.host, info.value.key) == ("gpu01", "ansible_host")


def test_literal_secret_in_ansible_host_vars_is_rejected(tmp_path: Path) -> None:
    source = _vaulted_inventory(tmp_path, "nodegate_pdu: {url: 'snmp://10.0.3.2?community="
                                "canary-v2', model: apc-rpdu2}\n")
    with pytest.raises(ConfigError) as info:
        load_ansible_inventory(source)
    assert (info.value.host, info.value.key) == ("gpu01", "pdu.url")
    assert "canary-v2" not in str(info.value)


def test_pyinfra_debug_inventory_on_deepops_layout() -> None:
    result = _debug_inventory({"NODEGATE_ANSIBLE_INVENTORY": str(DATA / "deepops" / "inventory"),
                               "NODEGATE_SITE": ""})
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "Traceback" not in output and "OSError" not in output
    for host in ("mgmt01", "mgmt02", "mgmt03", "login01", "gpu01", "gpu02"):
        assert f"[{host}]" in output
    assert "slurm-node" in output and "k8s_cluster" in output and "slurm-master" in output
    assert '"nodegate_site": "inventory"' in output
