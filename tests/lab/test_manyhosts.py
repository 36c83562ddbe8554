"""The many-host harness (nodegate_lab.manyhosts) and its bench (bench/many_hosts.py).

The slow test runs the real bench on a lab instance of its own (``NODEGATE_MANYHOSTS_INSTANCE``,
default 4: the suite's labs are instance 3 and the harness refuses to share an instance with a
lab that is up): real sshds, real pyinfra, then a deploy that changes something must print a
failure and no figure, and nothing may be left behind.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nodegate.errors import CannotRunError
from nodegate_lab import config
from nodegate_lab.manyhosts import MAX_HOSTS, ManyHosts, member
from tests.lab.conftest import lab_skip_reason

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "many_hosts.py"


def _bench_module() -> object:
    spec = importlib.util.spec_from_file_location("many_hosts_bench", BENCH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_hosts_use_the_lab_node_addresses_below_the_bmc_range() -> None:
    assert member(1).address == f"{config.SUBNET_PREFIX}.11"
    assert member(MAX_HOSTS).address == f"{config.SUBNET_PREFIX}.99"
    assert member(1).netns == f"{config.NS_PREFIX}m1"
    with pytest.raises(CannotRunError, match="outside"):
        member(MAX_HOSTS + 1)
    with pytest.raises(CannotRunError, match="possible"):
        ManyHosts(0)


def test_the_inventory_names_every_host_with_strict_host_keys() -> None:
    text = ManyHosts(3).inventory_text()
    namespace: dict[str, object] = {}
    exec(compile(ast.parse(text), "inventory", "exec"), namespace)
    hosts = namespace["hosts"]
    assert isinstance(hosts, list) and [h[0] for h in hosts] == ["m1", "m2", "m3"]
    assert hosts[2][1]["ssh_hostname"] == f"{config.SUBNET_PREFIX}.13"
    assert hosts[0][1]["ssh_strict_host_key_checking"] == "yes"


def test_the_fit_recovers_a_line() -> None:
    fit = _bench_module().fit  # type: ignore[attr-defined]
    a, b = fit([16, 32, 64], [2.0 + 0.1 * n for n in (16, 32, 64)])
    assert a == pytest.approx(2.0) and b == pytest.approx(0.1)


@pytest.mark.slow
def test_the_bench_measures_real_hosts_and_never_times_a_failed_run(tmp_path: Path) -> None:
    reason = lab_skip_reason()
    if reason:
        pytest.skip(reason)
    env = {**os.environ,
           "NODEGATE_LAB_INSTANCE": os.environ.get("NODEGATE_MANYHOSTS_INSTANCE", "4")}
    env.pop("NODEGATE_LAB_DIR", None)
    ok = subprocess.run([sys.executable, str(BENCH), "--sizes", "2", "3"], env=env, cwd=ROOT,
                        capture_output=True, text=True, timeout=600, check=False)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "2 hosts: cold" in ok.stdout and "3 hosts: cold" in ok.stdout
    assert "extrapolated to 512 hosts" in ok.stdout

    changes = tmp_path / "changes.py"
    changes.write_text("from pyinfra.operations import files\n"
                       "files.file(name='a new file', path='/etc/nodegate-bench-new')\n")
    bad = subprocess.run([sys.executable, str(BENCH), "--sizes", "2", "--deploy", str(changes)],
                         env=env, cwd=ROOT, capture_output=True, text=True, timeout=600,
                         check=False)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "FAILED" in bad.stdout and "no figure reported" in bad.stdout
    assert "hosts: cold" not in bad.stdout
    prefix = f"ngl{env['NODEGATE_LAB_INSTANCE']}-m"
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                          check=False).stdout
    assert prefix not in left
    assert "nodegate-bench-new" not in Path("/proc/mounts").read_text()
