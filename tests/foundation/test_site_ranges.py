"""The site format at fleet size: host ranges (zero padding kept), NVMe by-id ranges, group
data (a partition's opt-in), and one machine listed twice refused at inventory time. Every
bad input is exit 2 with one line naming the file, host and key."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nodegate.errors import ConfigError
from nodegate.site import load_site
from nodegate.site.ranges import MAX_EXPANSION, expand
from tests.conftest import ROOT

HEAD = "schema: nodegate.site/1\nname: t\n"


def _site(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "t.yaml"
    path.write_text(HEAD + body)
    return path


def _refused(path: Path) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load_site(str(path))
    assert caught.value.file == str(path)
    return caught.value


def test_a_range_keeps_its_zero_padding_and_slurm_order() -> None:
    assert expand("gpu-c[001-003]", file="f", key="k") == ["gpu-c001", "gpu-c002", "gpu-c003"]
    assert expand("n[8-10]", file="f", key="k") == ["n8", "n9", "n10"]
    assert expand("r[1-2]-n[01-02,07]", file="f", key="k") == [
        "r1-n01", "r1-n02", "r1-n07", "r2-n01", "r2-n02", "r2-n07"]
    assert expand("plain", file="f", key="k") == ["plain"]


def test_sixty_four_hosts_from_one_entry_with_paired_addresses(tmp_path: Path) -> None:
    path = _site(tmp_path, """\
groups:
  pod_c: ["gpu-c[001-064]"]
hosts:
  gpu-c[001-064]:
    address: 10.30.1.[11-74]
    machine_id: 0000000000000000000000000000[1001-1064]
    slurm: {node_name: "c[001-064]"}
    bmc: {url: "https://10.30.101.[11-74]", model: idrac9, password_env: IDRAC_PASSWORD}
    nvme:
      devices: ["/dev/disk/by-id/nvme-Dell_Ent_NVMe_CM6_RI_3.84TB_S61ANE0R4010[01-08]"]
""")
    site = load_site(str(path))
    names = [f"gpu-c{i:03d}" for i in range(1, 65)]
    assert list(site.hosts) == names and site.groups["pod_c"] == names
    last = site.hosts["gpu-c064"]
    assert last.address == "10.30.1.74" and last.data["slurm"]["node_name"] == "c064"
    assert last.data["machine_id"].endswith("1064")
    assert last.data["bmc"] == {"url": "https://10.30.101.74", "model": "idrac9",
                                "password_env": "IDRAC_PASSWORD"}
    devices = last.data["nvme"]["devices"]
    assert len(devices) == 8 and devices[0].endswith("S61ANE0R401001")
    assert devices[-1].endswith("S61ANE0R401008")


@pytest.mark.parametrize(("host", "extra", "key", "words"), [
    ("gpu-c[010-001]", "", "hosts.gpu-c[010-001]", "backwards"),
    ("gpu-c[01-100]", "", "hosts.gpu-c[01-100]", "pads"),
    ("gpu-c[1-x]", "", "hosts.gpu-c[1-x]", "not N or N-M"),
    ("gpu-c[1-2", "", "hosts.gpu-c[1-2", "unbalanced"),
    ("gpu-c[1-100000]", "", "hosts.gpu-c[1-100000]", str(MAX_EXPANSION)),
    ("gpu-c[1-4]", "    address: 10.0.0.[1-3]\n", "hosts.gpu-c[1-4].address", "counts"),
    ("gpu-c[1-2]", "    nvme: {devices: ['/dev/disk/by-id/nvme-x[2-1]']}\n",
     "hosts.gpu-c[1-2].nvme.devices[0]", "backwards"),
])
def test_a_bad_range_is_refused_naming_file_and_key(tmp_path: Path, host: str, extra: str,
                                                    key: str, words: str) -> None:
    error = _refused(_site(tmp_path, f"hosts:\n  {host}:\n{extra}"))
    assert error.key == key and words in error.message, str(error)


def test_any_text_expands_or_is_refused_naming_the_key() -> None:
    """Whatever a site file holds, expand() returns names or raises ConfigError: random
    texts over the range alphabet, and numbers longer than Python reads."""
    import random

    rng = random.Random(55)
    alphabet = "ab-,[]0123456789"
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 14)))
             for _ in range(3000)] + ["n[1-" + "9" * 5000 + "]", "n[]", "n[[1]]", "n]1["]
    for text in texts:
        try:
            names = expand(text, file="f", key="k")
        except ConfigError as exc:
            assert (exc.file, exc.key) == ("f", "k")
        else:
            assert names and len(names) <= MAX_EXPANSION
            assert all("[" not in n and "]" not in n for n in names), text


def test_a_bad_value_in_a_ranged_host_names_the_host(tmp_path: Path) -> None:
    error = _refused(_site(tmp_path, "hosts:\n  n[1-2]:\n    ssh_port: 0\n"))
    assert error.host in ("n1", "n2") and error.key == "hosts.n[1-2].ssh_port", str(error)


def test_brackets_outside_a_ranged_entry_are_left_alone(tmp_path: Path) -> None:
    """A single host's IPv6 BMC is an address, not a range."""
    site = load_site(str(_site(tmp_path, "hosts:\n  n1:\n    bmc: {url: 'https://[fd00::5]'}\n")))
    assert site.hosts["n1"].data["bmc"]["url"] == "https://[fd00::5]"


def test_a_host_in_two_ranges_is_refused(tmp_path: Path) -> None:
    error = _refused(_site(tmp_path, "hosts:\n  n[2-4]: {}\n  n[1-3]: {}\n"))
    assert error.host == "n2" and error.key == "hosts.n[1-3]" and "two ranges" in error.message


def test_a_hosts_own_entry_refines_its_range(tmp_path: Path) -> None:
    """The range gives the shared keys, the host's own entry its NVMe serials."""
    site = load_site(str(_site(tmp_path, """\
hosts:
  n2:
    nvme: {devices: ["/dev/disk/by-id/nvme-X_S2[01-02]"]}
    slurm: {partition: big}
  n[1-3]:
    address: 10.0.0.[1-3]
    slurm: {node_name: "c[1-3]"}
""")))
    n2 = site.hosts["n2"]
    assert n2.address == "10.0.0.2" and n2.data["slurm"] == {"node_name": "c2",
                                                             "partition": "big"}
    assert n2.data["nvme"]["devices"] == ["/dev/disk/by-id/nvme-X_S201",
                                          "/dev/disk/by-id/nvme-X_S202"]
    assert "nvme" not in site.hosts["n1"].data


@pytest.mark.parametrize(("hosts", "key", "what"), [
    ("  a: {address: 10.0.0.1}\n  b: {address: 10.0.0.1}\n", "hosts.b.address", "address"),
    ("  a: {}\n  b: {address: A}\n", "hosts.b.address", "address"),
    ("  a: {machine_id: " + "a" * 32 + "}\n  b: {machine_id: " + "a" * 32 + "}\n",
     "hosts.b.machine_id", "machine id"),
    ("  a: {slurm: {node_name: x}}\n  b: {slurm: {node_name: x}}\n",
     "hosts.b.slurm.node_name", "Slurm node name"),
])
def test_one_machine_listed_twice_is_refused_naming_both(tmp_path: Path, hosts: str,
                                                         key: str, what: str) -> None:
    error = _refused(_site(tmp_path, "hosts:\n" + hosts))
    assert error.key == key and f"hosts a and b have one {what}" in error.message


def test_one_address_on_two_ssh_ports_is_two_machines(tmp_path: Path) -> None:
    """The lab's VMs: 127.0.0.1, one forwarded port each."""
    site = load_site(str(_site(tmp_path, "hosts:\n  a: {address: 127.0.0.1, ssh_port: 2201}\n"
                                         "  b: {address: 127.0.0.1, ssh_port: 2202}\n")))
    assert set(site.hosts) == {"a", "b"}


def test_group_data_is_a_partitions_opt_in(tmp_path: Path) -> None:
    """defaults' data < the host's groups' data < the host's own data."""
    path = _site(tmp_path, """\
defaults:
  data: {remediate_enabled: false, gate_level: quick}
groups:
  part_a:
    hosts: ["n[1-2]"]
    data: {remediate_enabled: true, remediate_dry_run: true}
  part_b: [n3]
hosts:
  n[1-3]: {}
  n4: {data: {gate_level: standard}}
""")
    site = load_site(str(path))
    n1 = site.hosts["n1"].pyinfra_data("t")
    assert n1["remediate_enabled"] is True and n1["remediate_dry_run"] is True
    assert n1["gate_level"] == "quick"
    n3 = site.hosts["n3"].pyinfra_data("t")
    assert n3["remediate_enabled"] is False and "remediate_dry_run" not in n3
    assert site.groups == {"part_a": ["n1", "n2"], "part_b": ["n3"]}
    assert site.hosts["n4"].pyinfra_data("t")["gate_level"] == "standard"


def test_group_profile_overrides_sit_between_the_sites_and_the_hosts(tmp_path: Path) -> None:
    """A partition turns remediation on in its nodes' profile; a host can still refine it."""
    site = load_site(str(_site(tmp_path, """\
profile_overrides:
  remediation: {enabled: false, window_h: 100}
groups:
  part_a:
    hosts: ["n[1-2]"]
    profile_overrides: {remediation: {enabled: true}}
hosts:
  n[1-3]: {profile: xe9680-h100}
  n2: {profile_overrides: {remediation: {window_h: 24}}}
""")))
    profiles = {name: h.profile.data["remediation"] for name, h in site.hosts.items()
                if h.profile is not None}
    assert profiles["n1"]["enabled"] is True and profiles["n1"]["window_h"] == 100
    assert profiles["n2"]["enabled"] is True and profiles["n2"]["window_h"] == 24
    assert profiles["n3"]["enabled"] is False


def test_a_hosts_own_data_beats_its_groups(tmp_path: Path) -> None:
    site = load_site(str(_site(tmp_path, """\
groups:
  part_a: {hosts: [n1], data: {remediate_enabled: true}}
hosts:
  n1: {data: {remediate_enabled: false}}
""")))
    assert site.hosts["n1"].pyinfra_data("t")["remediate_enabled"] is False


def test_two_groups_disagreeing_on_a_host_are_refused_naming_both(tmp_path: Path) -> None:
    error = _refused(_site(tmp_path, """\
groups:
  part_a: {hosts: [n1], data: {remediate_enabled: true}}
  part_b: {hosts: [n1], data: {remediate_enabled: false}}
hosts:
  n1: {}
"""))
    assert error.host == "n1" and error.key == "groups.part_b.data.remediate_enabled"
    assert "part_a and part_b" in error.message and "data key" in error.message


def test_a_bad_group_mapping_names_its_key(tmp_path: Path) -> None:
    error = _refused(_site(tmp_path, "groups:\n  g: {members: [n1]}\nhosts:\n  n1: {}\n"))
    assert error.key is not None and error.key.startswith("groups.g"), str(error)


def test_inventory_py_exits_2_naming_both_hosts(tmp_path: Path) -> None:
    """What pyinfra's operator sees: one line, exit 2, no traceback."""
    path = _site(tmp_path, "hosts:\n  a: {address: 10.0.0.9}\n  b: {address: 10.0.0.9}\n")
    env = {**os.environ, "NODEGATE_SITE": str(path)}
    proc = subprocess.run([sys.executable, "-c", "import runpy; runpy.run_path('inventory.py')"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 2, proc.stderr
    assert "hosts a and b have one address" in proc.stderr and "Traceback" not in proc.stderr
    assert str(path) in proc.stderr
