"""Hostile values through the loaders not covered elsewhere: the power poller's config, the
simulator's scenario files and Ansible inventories (read through ansible-core in a child).

Each must give its value or a ConfigError naming the file: never another exception (exit 3 in
the CLI), never "could not run" for what is only bad input.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from nodegate.errors import ConfigError
from nodegate.power.poller import load_config
from nodegate.sim import scenario
from nodegate.site.ansible import load_ansible_inventory

pytestmark = pytest.mark.fuzz

#: Values an operator or an attacker could put where a number, a name or a URL belongs.
HOSTILE = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(["١٢", "9" * 5000, "nan", "inf", "-1", "0x10", "1e309", "", " ",
                     "snmp://", "https://u:p@h", "http://[::1", "env:", "file:/dev/zero",
                     "file:/etc/shadow", "../../etc/passwd"]),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)


@pytest.fixture(scope="module")
def folder() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="nodegate-fuzz-configs-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _write(path: Path, data: Any) -> Path:
    path.write_text(yaml.safe_dump(data))
    path.chmod(0o600)
    return path


POLLER_KEYS = ("interval_s", "timeout_s", "retries", "output", "pdus", "bmcs")
PDU_KEYS = ("name", "url", "community", "model", "timeout_s")
BMC_KEYS = ("name", "url", "password", "insecure", "ca_bundle", "max_sessions")


@given(top=st.dictionaries(st.sampled_from(POLLER_KEYS), HOSTILE, max_size=3)
       | st.sampled_from([{"pdus": 5}, {"bmcs": {"a": 1}}, {"output": []},
                          {"output": {"listen": "h:\u0663\u0663"}}, {"pdus": [5]},
                          {"interval_s": True}, {"bmcs": "b"}]),
       pdu=st.dictionaries(st.sampled_from(PDU_KEYS), HOSTILE, max_size=3),
       bmc=st.dictionaries(st.sampled_from(BMC_KEYS), HOSTILE, max_size=3))
def test_a_hostile_poller_config_loads_or_is_a_config_error(
        folder: Path, top: dict[str, Any], pdu: dict[str, Any], bmc: dict[str, Any]) -> None:
    base: dict[str, Any] = {
        "output": {"textfile": str(folder / "power.prom")},
        "pdus": [{"name": "p", "url": "snmp://127.0.0.1", "community": "env:NG_FUZZ_C",
                  "model": "apc-rpdu2", **pdu}],
        "bmcs": [{"name": "b", "url": "https://root@127.0.0.1:1", "password": "env:NG_FUZZ_P",
                  **bmc}],
    }
    path = _write(folder / "poller.yaml", {**base, **top})
    try:
        load_config(path)
    except ConfigError as exc:
        assert exc.file == str(path), exc


SCENARIO_EDITS = ("gpus.0.temperature_c", "gpus.0.power_w", "gpus.0.nvlink.links",
                  "gpus.0.pci.bus_id", "gpus.0.memory_mib", "gpus.0.nvml_errors", "gpus",
                  "model", "extends", "faults")


def _set(data: Any, dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    for part in parts[:-1]:
        if isinstance(data, list) and part.isdigit() and int(part) < len(data):
            data = data[int(part)]
        elif isinstance(data, dict):
            data = data.setdefault(part, {})
        else:
            return
    if isinstance(data, dict):
        data[parts[-1]] = value


@given(name=st.sampled_from(sorted(scenario.shipped())),
       edits=st.lists(st.tuples(st.sampled_from(SCENARIO_EDITS), HOSTILE), max_size=3))
def test_a_hostile_scenario_file_loads_or_is_a_config_error(
        folder: Path, name: str, edits: list[tuple[str, Any]]) -> None:
    data = yaml.safe_load(scenario.shipped()[name].read_text())
    for where, value in edits:
        _set(data, where, value)
    path = _write(folder / "scenario.yaml", data)
    try:
        scenario.load_file(path)
    except ConfigError as exc:
        assert str(path) in str(exc), exc


ANSIBLE_VARS = ("ansible_port", "ansible_host", "ansible_user", "nodegate_profile",
                "nodegate_bmc", "nodegate_pdus", "nodegate_slurm", "nodegate_nvme",
                "nodegate_profile_overrides")
#: ansible-core runs in a child (about a second an example): a quarter of the budget
_CHILD_BUDGET = settings(max_examples=max(8, settings.default.max_examples // 4))


@_CHILD_BUDGET
@given(var=st.sampled_from(ANSIBLE_VARS), value=HOSTILE)
def test_a_hostile_ansible_host_var_loads_or_is_a_config_error(
        folder: Path, var: str, value: Any) -> None:
    inventory = folder / "ansible"
    shutil.rmtree(inventory, ignore_errors=True)
    (inventory / "host_vars").mkdir(parents=True)
    (inventory / "hosts.ini").write_text("[gpu]\ngpu-a01 ansible_host=10.30.1.11\n")
    # host_vars as JSON (valid YAML): the value reaches ansible-core exactly as generated
    text = json.dumps({var: value}, allow_nan=True)
    (inventory / "host_vars" / "gpu-a01.yml").write_text(text)
    try:
        load_ansible_inventory(str(inventory / "hosts.ini"))
    except ConfigError as exc:
        assert "hosts.ini" in str(exc) or "gpu-a01" in str(exc), exc
