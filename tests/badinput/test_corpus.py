"""The bad-input corpus: every case ends in its documented exit code, names what is wrong,
writes nothing and prints no traceback (docs/exit-codes.md).

Most cases call ``nodegate.cli.main`` in this process (fast: argparse, loaders and writers
are the code under test); the ones that need a simulated board or the real process boundary
run the CLI in a subprocess under ``nodegate sim run``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from nodegate import cli
from tests.conftest import run_cli

HEADER = "schema: nodegate.profile/1\nlayer: profile\nextends: [gpu/h100-sxm5-80gb]\n"
SIM = ("sim", "run", "h100-hgx", "--", "nodegate")
PDU = "snmp://127.0.0.1?community=env:NODEGATE_TEST_COMMUNITY"
CORPUS = Path(__file__).resolve().parents[1] / "sim" / "data" / "corpus"


def _bomb(levels: int = 9) -> str:
    """Nested aliases: 9 levels of 9 make 9**9 leaves from ~90 lines' worth of aliases."""
    lines = ['l0: &l0 ["x","x","x","x","x","x","x","x","x"]']
    for i in range(1, levels + 1):
        lines.append(f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 20) + "]")
    return "\n".join(lines) + "\n"


@dataclass
class Case:
    """One bad input: argv (``{d}`` is the case's folder), files to create there, the exit
    code, and words the message must contain (the file, key or option it names)."""

    id: str
    argv: tuple[str, ...]
    code: int
    names: tuple[str, ...]
    files: dict[str, bytes | str] = field(default_factory=dict)
    subprocess: bool = False
    setup: Callable[[Path], None] | None = None
    inventory: dict[str, str] | None = None  # env for `pyinfra inventory.py debug-inventory`


def _profile(body: str) -> dict[str, bytes | str]:
    return {"p.yaml": HEADER + body}


def _loop(d: Path) -> None:
    (d / "r").mkdir()
    os.symlink("b", d / "r" / "a.json")
    os.symlink("a.json", d / "r" / "b")


def _fifo(d: Path) -> None:
    (d / "r").mkdir()
    os.mkfifo(d / "r" / "pipe.json")


def _link_to_fifo(link: Path) -> None:
    os.mkfifo(link.with_name("fifo"))
    os.symlink("fifo", link)


def _huge(d: Path) -> None:
    (d / "r").mkdir()
    with (d / "r" / "huge.json").open("wb") as handle:
        handle.truncate(300 * 1024 * 1024)  # sparse: no disk used


PROFILE_CASES = [
    Case("profile-not-utf8", ("profiles", "check", "{d}/p.yaml"), 2, ("p.yaml", "offset"),
         {"p.yaml": b"schema: nodegate.profile/1\nlayer: \xff\xfe\n"}),
    Case("profile-alias-bomb", ("profiles", "check", "{d}/p.yaml"), 2, ("p.yaml", "aliases"),
         {"p.yaml": _bomb()}),
    Case("profile-is-directory", ("profiles", "check", "{d}/sub"), 2, ("sub", "directory"),
         setup=lambda d: (d / "sub").mkdir()),
    Case("profile-missing", ("profiles", "check", "{d}/none.yaml"), 2, ("none.yaml", "not found")),
    Case("profile-oversize", ("profiles", "check", "{d}/p.yaml"), 2, ("p.yaml", "MiB"),
         {"p.yaml": "# " + "x" * (5 * 1024 * 1024) + "\n"}),
    Case("profile-duplicate-key", ("profiles", "check", "{d}/p.yaml"), 2,
         ("p.yaml", "duplicate key", "count"), _profile("gpu:\n  count: 8\n  count: 4\n")),
    Case("profile-invalid-yaml", ("profiles", "check", "{d}/p.yaml"), 2, ("p.yaml", "line"),
         _profile("gpu: [unclosed\n")),
    Case("profile-nan-threshold", ("profiles", "check", "{d}/p.yaml"), 2,
         ("p.yaml", "thresholds.gpu_temp_idle_max_c.max", "finite"),
         _profile("thresholds:\n  gpu_temp_idle_max_c: {max: .nan, unit: C, "
                  "source: 'policy: x'}\n")),
    Case("profile-inf-threshold", ("profiles", "check", "{d}/p.yaml"), 2,
         ("thresholds.gpu_temp_idle_max_c.max", "finite"),
         _profile("thresholds:\n  gpu_temp_idle_max_c: {max: .inf, unit: C, "
                  "source: 'policy: x'}\n")),
    Case("profile-negative-threshold", ("profiles", "check", "{d}/p.yaml"), 2,
         ("thresholds.gpu_temp_idle_max_c.max", "minimum"),
         _profile("thresholds:\n  gpu_temp_idle_max_c: {max: -5, unit: C, "
                  "source: 'policy: x'}\n")),
    Case("profile-negative-bmc-power-spread", ("profiles", "check", "{d}/p.yaml"), 2,
         ("thresholds.bmc_power_source_spread_max.max", "minimum"),
         _profile("thresholds:\n  bmc_power_source_spread_max: {max: -0.05, unit: ratio, "
                  "source: 'policy: x'}\n")),
    Case("profile-unknown-key", ("profiles", "check", "{d}/p.yaml"), 2,
         ("gpu.colour", "unknown key"), _profile("gpu:\n  colour: green\n")),
    Case("profile-unsourced-threshold", ("profiles", "check", "{d}/p.yaml"), 2,
         ("thresholds.gpu_temp_idle_max_c.source",),
         _profile("thresholds:\n  gpu_temp_idle_max_c: {max: 50, unit: C, "
                  "source: 'somebody said'}\n")),
    Case("profile-top-level-list", ("profiles", "check", "{d}/p.yaml"), 2, ("p.yaml",),
         {"p.yaml": "- a\n- b\n"}),
    Case("profile-firmware-pin-without-source", ("profiles", "check", "{d}/p.yaml"), 2,
         ("gpu.vbios",), _profile("gpu:\n  vbios: {versions: [96.00.A5.00.01]}\n")),
    Case("profile-unknown-name", ("profiles", "show", "no-such-profile"), 2,
         ("no-such-profile", "profile")),
    # a memory fraction outside (0, 0.98] stops before any load starts
    Case("profile-hbm-fraction-too-large", ("profiles", "check", "{d}/p.yaml"), 2,
         ("p.yaml", "load.hbm_test_fraction", "0.98"),
         _profile("load:\n  hbm_test_fraction: 1.0\n")),
    Case("profile-hbm-fraction-zero", ("profiles", "check", "{d}/p.yaml"), 2,
         ("p.yaml", "load.hbm_test_fraction"), _profile("load:\n  hbm_test_fraction: 0\n")),
]

OPTION_CASES = [
    Case("validate-duration-scale-nan", ("validate", "--duration-scale", "nan"), 2,
         ("--duration-scale", "finite")),
    Case("validate-duration-scale-zero", ("validate", "--duration-scale", "0"), 2,
         ("--duration-scale", "(0, 100]")),
    Case("validate-duration-scale-huge", ("validate", "--duration-scale", "1e9"), 2,
         ("--duration-scale",)),
    Case("validate-workers-zero", ("validate", "--workers", "0"), 2, ("--workers",)),
    Case("validate-workers-text", ("validate", "--workers", "eight"), 2, ("--workers",)),
    Case("validate-level-unknown", ("validate", "--level", "thorough"), 2, ("--level",)),
    Case("health-checks-empty", ("health", "--checks", "", "--profile", "sim-h100-hgx"), 2,
         ("--checks", "no check group")),
    Case("health-checks-unknown", ("health", "--checks", "gpu,bogus",
                                   "--profile", "sim-h100-hgx"), 2, ("--checks", "bogus")),
    Case("health-xid-window-nan", ("health", "--xid-window", "nan",
                                   "--profile", "sim-h100-hgx"), 2, ("--xid-window",)),
    Case("health-xid-window-inf", ("health", "--xid-window", "inf",
                                   "--profile", "sim-h100-hgx"), 2, ("--xid-window",)),
    Case("health-xid-window-negative", ("health", "--xid-window=-5m",
                                        "--profile", "sim-h100-hgx"), 2, ("--xid-window",)),
    Case("health-xid-window-zero", ("health", "--xid-window", "0s",
                                    "--profile", "sim-h100-hgx"), 2, ("--xid-window",)),
    Case("health-xid-window-text", ("health", "--xid-window", "a week",
                                    "--profile", "sim-h100-hgx"), 2, ("--xid-window",)),
    Case("health-xid-window-400d", ("health", "--xid-window", "400d",
                                    "--profile", "sim-h100-hgx"), 2, ("--xid-window", "366")),
    Case("health-profile-file-missing", ("health", "--profile", "{d}/nope.json"), 2,
         ("nope.json",)),
    Case("validate-nothing-selected", ("validate", "--level", "quick", "--checks", "load",
                                       "--profile", "sim-h100-hgx", "--report-dir", "{d}/out"),
         2, ("--checks", "no check ran")),
    Case("gate-retries-zero", ("gate", "--retries", "0"), 2, ("--retries",)),
    Case("gate-report-dir-missing", ("gate", "--dry-run", "--node", "n1",
                                     "--report-dir", "{d}/none"), 2, ("none", "not found")),
    Case("multinode-join-timeout-nan", ("multinode", "--join-timeout", "nan"), 2,
         ("--join-timeout",)),
    Case("health-profile-json-garbage", ("health", "--profile", "{d}/p.json"), 2,
         ("p.json",), {"p.json": "{not json"}),
    Case("gate-max-age-text", ("gate", "--dry-run", "--node", "n1", "--report-dir", "{d}",
                               "--max-age", "soon"), 2, ("--max-age",)),
    Case("gate-drain-budget-over-one", ("gate", "--drain-budget", "1.5"), 2,
         ("--drain-budget",)),
    Case("gate-drain-budget-nan", ("gate", "--drain-budget", "nan"), 2, ("--drain-budget",)),
    # the textfile folder is checked before Slurm is asked anything (no scheduler here: a
    # later check would exit 3 for want of slurmctld)
    Case("gate-textfile-dir-is-file", ("gate", "--node", "n1", "--report-dir", "{d}/r",
                                       "--drain-budget", "0.5", "--textfile-dir", "{d}/f"), 2,
         ("--textfile-dir", "f"), {"f": "x", "r/x.json": "{}"}),
    Case("gate-textfile-dir-unwritable", ("gate", "--node", "n1", "--report-dir", "{d}/r",
                                          "--drain-budget", "0.5", "--textfile-dir",
                                          "/proc/nodegate"), 2,
         ("--textfile-dir", "/proc/nodegate"), {"r/x.json": "{}"}),
    Case("gate-report-nested-too-deeply", ("gate", "--dry-run", "--node", "n1", "--report-dir",
                                           "{d}"), 2, ("quick-latest.json", "nested too deeply"),
         {"quick-latest.json": "[" * 200_000}),
    Case("gate-report-number-beyond-float", ("gate", "--dry-run", "--node", "n1",
                                             "--report-dir", "{d}"), 2,
         ("quick-latest.json", "$.duration_s", "out of range"),
         {"quick-latest.json": '{"schema": "nodegate.report/1", "report_id": "r", "node": "n1",'
          ' "profile": "p", "level": "quick", "started_at": "2024-01-01T00:00:00Z",'
          ' "finished_at": "2024-01-01T00:01:00Z", "duration_s": 1' + "0" * 400 + ','
          ' "nodegate_version": "1", "boot_id": null, "backend": "nvml", "verdict": "PASS",'
          ' "counts": {"PASS": 0, "WARN": 0, "SKIP": 0, "FAIL": 0, "ERROR": 0},'
          ' "results": [], "series": {}, "matrices": {}}'}),
]

REPORT_CASES = [
    Case("report-dir-missing", ("report", "{d}/none"), 2, ("none", "not found")),
    Case("report-drift-zero", ("report", "{d}", "--drift", "0"), 2, ("--drift",)),
    Case("report-drift-text", ("report", "{d}", "--drift", "5%"), 2, ("--drift",)),
    Case("report-dir-is-file", ("report", "{d}/f"), 2, ("f",), {"f": "x"}),
    Case("report-jobs-zero", ("report", "{d}", "--jobs", "0"), 2, ("--jobs",)),
    Case("report-margin-nan", ("report", "{d}", "--margin", "nan"), 2, ("--margin",)),
    Case("report-plots-negative", ("report", "{d}", "--plots", "-1"), 2, ("--plots",)),
    Case("report-html-is-directory", ("report", "{d}/r", "--html", "{d}/sub"), 2,
         ("sub", "cannot write"), {"r/x.json": "{}"}, setup=lambda d: (d / "sub").mkdir()),
    Case("report-html-unwritable", ("report", "{d}/r", "--html", "/proc/nodegate.html"), 2,
         ("/proc/nodegate.html", "cannot write"), {"r/x.json": "{}"}),
    # an output file is replaced only when it is a regular file (or a link to one), never
    # a device, FIFO or a node's report; no folder is created for it
    Case("report-html-is-fifo", ("report", "{d}/r", "--html", "{d}/fifo"), 2,
         ("fifo", "not a regular file"), {"r/x.json": "{}"},
         setup=lambda d: os.mkfifo(d / "fifo")),
    Case("report-html-link-to-fifo", ("report", "{d}/r", "--html", "{d}/page.html"), 2,
         ("page.html", "symbolic link"), {"r/x.json": "{}"},
         setup=lambda d: _link_to_fifo(d / "page.html")),
    Case("report-html-folder-missing", ("report", "{d}/r", "--html", "{d}/no/page.html"), 2,
         ("no/page.html", "does not exist"), {"r/x.json": "{}"}),
    Case("report-html-over-a-report", ("report", "{d}/r", "--html", "{d}/r/n1/quick-latest.json"),
         2, ("quick-latest.json", "--html", "*.json"), {"r/n1/quick-latest.json": "{}"}),
    Case("report-html-over-a-node-file", ("report", "{d}/r", "--html", "{d}/r/n1/q.xml"), 2,
         ("q.xml", "--html", "not .html"), {"r/n1/q.xml": "<x/>", "r/n1/q.json": "{}"}),
]

POWER_CASES = [
    Case("power-nothing-to-read", ("power", "read"), 2, ("nothing to read",)),
    Case("power-pdu-ipv6-broken", ("power", "read", "--pdu", "snmp://[::1",
                                   "--model", "apc-rpdu2"), 2, ("--pdu", "malformed")),
    Case("power-bmc-ipv6-broken", ("power", "read", "--bmc", "https://root@[::1"), 2,
         ("--bmc", "malformed")),
    Case("power-bmc-port-range", ("power", "read", "--bmc", "https://root@bmc:99999"), 2,
         ("--bmc", "Port")),
    Case("power-pdu-port-text", ("power", "read", "--pdu", "snmp://pdu:abc?community=env:X",
                                 "--model", "apc-rpdu2"), 2, ("--pdu",)),
    Case("power-pdu-timeout-text", ("power", "read", "--pdu", PDU + "&timeout=abc",
                                    "--model", "apc-rpdu2"), 2, ("--pdu timeout", "(0, 30]")),
    Case("power-pdu-timeout-nan", ("power", "read", "--pdu", PDU + "&timeout=nan",
                                   "--model", "apc-rpdu2"), 2, ("--pdu timeout", "finite")),
    Case("power-pdu-retries-fraction", ("power", "read", "--pdu", PDU + "&retries=1.5",
                                        "--model", "apc-rpdu2"), 2, ("--pdu retries",)),
    Case("power-pdu-retries-huge", ("power", "read", "--pdu", PDU + "&retries=100000",
                                    "--model", "apc-rpdu2"), 2, ("--pdu retries", "[0, 5]")),
    Case("power-timeout-nan", ("power", "read", "--pdu", PDU, "--model", "apc-rpdu2",
                               "--timeout", "nan"), 2, ("--timeout", "finite")),
    Case("power-timeout-huge", ("power", "read", "--pdu", PDU, "--model", "apc-rpdu2",
                                "--timeout", "1e9"), 2, ("--timeout",)),
    Case("power-retries-negative", ("power", "read", "--pdu", PDU, "--model", "apc-rpdu2",
                                    "--retries", "-1"), 2, ("--retries",)),
    Case("power-retries-huge", ("power", "read", "--pdu", PDU, "--model", "apc-rpdu2",
                                "--retries", "100000"), 2, ("--retries",)),
    Case("power-literal-community-query", ("power", "read", "--pdu",
                                           "snmp://pdu?community=public", "--model",
                                           "apc-rpdu2"), 2, ("--pdu", "reference")),
    Case("power-bmc-password-in-url", ("power", "read", "--bmc", "https://root:pw@bmc"), 2,
         ("--bmc", "password")),
    Case("power-pdu-unknown-parameter", ("power", "read", "--pdu", PDU + "&colour=red",
                                         "--model", "apc-rpdu2"), 2, ("--pdu", "colour")),
    Case("power-pdu-bad-scheme", ("power", "read", "--pdu", "http://pdu", "--model",
                                  "apc-rpdu2"), 2, ("--pdu", "snmp://")),
    Case("power-unknown-model", ("power", "read", "--pdu", PDU, "--model", "acme-9000"), 2,
         ("--model", "acme-9000")),
    Case("power-community-env-unset", ("power", "read", "--pdu",
                                       "snmp://pdu?community=env:NODEGATE_UNSET_VARIABLE",
                                       "--model", "apc-rpdu2"), 2,
         ("--pdu", "NODEGATE_UNSET_VARIABLE")),
    Case("power-models-mismatch", ("power", "read", "--pdu", PDU, "--pdu", PDU, "--pdu", PDU,
                                   "--model", "apc-rpdu2", "--model", "apc-rpdu2"), 2,
         ("--model",)),
    Case("power-poll-config-missing", ("power", "poll", "--config", "{d}/none.yaml"), 2,
         ("none.yaml",)),
    Case("power-poll-config-not-utf8", ("power", "poll", "--config", "{d}/p.yaml"), 2,
         ("p.yaml", "UTF-8"), {"p.yaml": b"interval_s: 30\nname: \xc3\x28\n"}),
]

SIM_CASES = [
    Case("sim-unknown-scenario", ("sim", "run", "no-such-board", "--", "true"), 2,
         ("no-such-board",)),
    Case("sim-unknown-fault", ("sim", "run", "h100-hgx+melted@gpu1", "--", "true"), 2,
         ("melted",)),
    Case("sim-fault-target-out-of-range", ("sim", "run", "h100-hgx+ecc-dbe@gpu99", "--", "true"),
         2, ("gpu99",)),
    Case("sim-scenario-not-utf8", ("sim", "run", "{d}/s.yaml", "--", "true"), 2,
         ("s.yaml", "UTF-8"), {"s.yaml": b"name: \xff\n"}),
    Case("sim-scenario-alias-bomb", ("sim", "run", "{d}/s.yaml", "--", "true"), 2,
         ("s.yaml", "aliases"), {"s.yaml": _bomb()}),
    Case("sim-scenario-unknown-key", ("sim", "run", "{d}/s.yaml", "--", "true"), 2,
         ("s.yaml",), {"s.yaml": "name: x\ncolour: green\n"}),
    Case("sim-import-missing", ("sim", "import", "{d}/none.xml", "-o", "{d}/out.yaml"), 2,
         ("none.xml",)),
    Case("sim-import-not-xml", ("sim", "import", "{d}/c.xml", "-o", "{d}/out.yaml"), 2,
         ("c.xml",), {"c.xml": "this is not XML"}),
    Case("sim-import-redacted-pci-id", ("sim", "import", str(CORPUS / "telegraf-rtx-3090-v12.xml"),
                                        "-o", "{d}/out.yaml"), 2,
         ("telegraf-rtx-3090-v12.xml", "gpu[0]/pci/pci_device_id")),
    # a corrupt page count once made the import build a list of that many pages (MemoryError)
    Case("sim-import-huge-retired-count",
         ("sim", "import", "{d}/c.xml", "-o", "{d}/out.yaml"), 2, ("c.xml", "retired_count"),
         {"c.xml": (CORPUS / "telegraf-tesla-t4.xml").read_text().replace(
             "<retired_count>0</retired_count>", "<retired_count>999999999999</retired_count>",
             1)}),
    Case("sim-command-missing", ("sim", "run", "h100-hgx", "--", "no-such-command-here"), 2,
         ("no-such-command-here",)),
]

# through the real process boundary, on a simulated board: write targets and the lock
PROCESS_CASES = [
    Case("health-report-dir-is-file", (*SIM, "health", "--checks", "log", "--profile",
                                       "sim-h100-hgx", "--report-dir", "{d}/f"), 2,
         ("--report-dir",), {"f": "x"}, subprocess=True),
    Case("health-textfile-dir-unwritable", (*SIM, "health", "--checks", "log", "--profile",
                                            "sim-h100-hgx", "--report-dir", "{d}/out",
                                            "--textfile-dir", "/proc/nodegate"), 2,
         ("--textfile-dir",), subprocess=True),
    Case("health-report-dir-unwritable", (*SIM, "health", "--checks", "log", "--profile",
                                          "sim-h100-hgx", "--report-dir", "/proc/nodegate"), 2,
         ("--report-dir",), subprocess=True),
]

SITE_HEAD = "schema: nodegate.site/1\nname: t\nhosts:\n  n1:\n    address: 10.0.0.1\n"
POLL_HEAD = "output:\n  textfile: /tmp/nodegate-corpus.prom\n"


def _site(body: str) -> dict[str, bytes | str]:
    return {"s.yaml": SITE_HEAD + body}


def _open_secret(d: Path) -> None:
    (d / "pw").write_text("x\n")
    (d / "pw").chmod(0o644)


def _vault_host_vars(d: Path) -> None:
    from ansible.parsing.vault import VaultLib, VaultSecret

    body = VaultLib([("default", VaultSecret(b"pw"))]).encrypt("10.0.0.9").decode()
    (d / "host_vars").mkdir()
    (d / "host_vars" / "gpu01.yml").write_text(
        "ansible_host: !vault |\n" + "".join(f"  {line}\n" for line in body.splitlines()))


SITE = {"NODEGATE_SITE": "{d}/s.yaml"}
ANSIBLE = {"NODEGATE_ANSIBLE_INVENTORY": "{d}/fleet.ini", "ANSIBLE_VAULT_PASSWORD_FILE": ""}

# through `pyinfra inventory.py debug-inventory`: site files and Ansible inventories
INVENTORY_CASES = [
    Case("site-url-query-community", (), 2, ("s.yaml", "host n1", "hosts.n1.pdu.url"),
         _site("    pdu: {url: 'snmp://pdu?community=public', model: apc-rpdu2}\n"),
         inventory=SITE),
    Case("site-url-query-password", (), 2, ("s.yaml", "hosts.n1.bmc.url", "password"),
         _site("    bmc: {url: 'https://bmc/?password=x', model: idrac9}\n"), inventory=SITE),
    Case("site-key-pass", (), 2, ("hosts.n1.data.ipmi_pass", "reference"),
         _site("    data: {ipmi_pass: hunter2}\n"), inventory=SITE),
    Case("site-key-pwd", (), 2, ("hosts.n1.data.switch_pwd",),
         _site("    data: {switch_pwd: hunter2}\n"), inventory=SITE),
    Case("site-key-token", (), 2, ("hosts.n1.data.api_token",),
         _site("    data: {api_token: abc123}\n"), inventory=SITE),
    Case("site-key-secret", (), 2, ("hosts.n1.data.client_secret",),
         _site("    data: {client_secret: abc123}\n"), inventory=SITE),
    Case("site-key-snmpv3-auth-key", (), 2, ("hosts.n1.data.auth_key",),
         _site("    data: {auth_key: abc123}\n"), inventory=SITE),
    Case("site-community-literal-value", (), 2, ("hosts.n1.pdu.community",),
         _site("    pdu: {url: 'snmp://pdu', model: apc-rpdu2, community: public}\n"),
         inventory=SITE),
    Case("site-password-file-mode-0644", (), 2, ("hosts.n1.bmc.password_file", "0644"),
         _site("    bmc: {url: 'https://bmc', model: idrac9, password_file: '{d}/pw'}\n"),
         setup=_open_secret, inventory=SITE),
    Case("site-drain-budget-percent", (), 2, ("s.yaml", "slurm.drain_budget"),
         {"s.yaml": SITE_HEAD + "slurm: {drain_budget: 50}\n"}, inventory=SITE),
    Case("site-drain-budget-text", (), 2, ("s.yaml", "slurm.drain_budget"),
         {"s.yaml": SITE_HEAD + "slurm: {drain_budget: half}\n"}, inventory=SITE),
    Case("site-group-name-with-space", (), 2, ("s.yaml", "groups"),
         {"s.yaml": SITE_HEAD + "groups:\n  'bad group': [n1]\n"}, inventory=SITE),
    Case("ansible-vault-no-password", (), 2, ("fleet.ini", "host gpu01", "ansible_host",
                                              "ANSIBLE_VAULT_PASSWORD_FILE"),
         {"fleet.ini": "[slurm-node]\ngpu01\n"}, setup=_vault_host_vars, inventory=ANSIBLE),
    Case("ansible-inline-vault-ini", (), 2, ("fleet.ini", "host gpu01", "ansible_host"),
         {"fleet.ini": "[gpu]\ngpu01 ansible_host=$ANSIBLE_VAULT;1.1;AES256\n"},
         inventory=ANSIBLE),
    Case("ansible-literal-community", (), 2, ("fleet.ini", "host gpu01", "pdu.url"),
         {"fleet.ini": "[gpu]\ngpu01\n", "host_vars/gpu01.yml":
          "nodegate_pdu: {url: 'snmp://pdu?community=public', model: apc-rpdu2}\n"},
         inventory=ANSIBLE),
    Case("ansible-key-pwd", (), 2, ("fleet.ini", "host gpu01", "data.nodegate_ipmi_pwd"),
         {"fleet.ini": "[gpu]\ngpu01 nodegate_ipmi_pwd=hunter2\n"}, inventory=ANSIBLE),
    Case("ansible-inventory-missing", (), 2, ("none.ini", "NODEGATE_ANSIBLE_INVENTORY"),
         inventory={"NODEGATE_ANSIBLE_INVENTORY": "{d}/none.ini"}),
]

POWER_CASES += [
    Case("poll-literal-community-query", ("power", "poll", "--config", "{d}/p.yaml"), 2,
         ("p.yaml", "pdus[0].url", "community"),
         {"p.yaml": POLL_HEAD + "pdus:\n  - {name: a, url: 'snmp://pdu?community=public', "
          "model: apc-rpdu2}\n"}),
    Case("poll-literal-community-key", ("power", "poll", "--config", "{d}/p.yaml"), 2,
         ("p.yaml", "pdus[0].community"),
         {"p.yaml": POLL_HEAD + "pdus:\n  - {name: a, url: 'snmp://pdu', community: public, "
          "model: apc-rpdu2}\n"}),
    Case("poll-bmc-password-file-open", ("power", "poll", "--config", "{d}/p.yaml"), 2,
         ("bmcs[0].password", "0644"),
         {"p.yaml": POLL_HEAD + "bmcs:\n  - {name: b, url: 'https://root@bmc', "
          "password: 'file:{d}/pw'}\n"}, setup=_open_secret),
    Case("poll-snmpv3-literal-priv-key", ("power", "poll", "--config", "{d}/p.yaml"), 2,
         ("pdus[0].url", "priv_key"),
         {"p.yaml": POLL_HEAD + "pdus:\n  - {name: a, url: 'snmpv3://u@pdu?auth_key=env:A"
          "&priv_key=s3cret', model: raritan-pdu2}\n"}),
]

CASES = (PROFILE_CASES + OPTION_CASES + REPORT_CASES + POWER_CASES + SIM_CASES + PROCESS_CASES
         + INVENTORY_CASES)

# named, never opened or crashed on: each file the only one in its folder, so nothing could
# be read and nothing was judged (exit 2, as an empty folder; beside readable reports they
# are listed and make the exit 1, tests/fleet/test_fleet.py)
LISTED = [
    Case("report-symlink-loop", ("report", "{d}/r", "--no-cache"), 2, ("a.json", "link"),
         setup=_loop),
    Case("report-fifo", ("report", "{d}/r", "--no-cache"), 2, ("pipe.json", "regular"),
         setup=_fifo),
    Case("report-huge-file", ("report", "{d}/r", "--no-cache"), 2, ("huge.json", "MiB"),
         setup=_huge),
    Case("report-none-readable", ("report", "{d}/r", "--json"), 2,
         ("none of the 3", "a.json", "b.json", "pipe.json"),
         {"r/a.json": "{}", "r/b.json": "x"}, setup=lambda d: os.mkfifo(d / "r" / "pipe.json")),
]


def _prepare(case: Case, tmp_path: Path) -> tuple[list[str], set[Path]]:
    for name, raw in case.files.items():
        target = tmp_path / name
        content = raw.replace("{d}", str(tmp_path)) if isinstance(raw, str) else raw
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)
    if case.setup is not None:
        case.setup(tmp_path)
    argv = [a.replace("{d}", str(tmp_path)) for a in case.argv]
    return argv, set(tmp_path.rglob("*"))


def _run(argv: list[str], case: Case, capsys: pytest.CaptureFixture[str],
         tmp_path: Path) -> tuple[int, str]:
    if case.inventory is not None:
        import subprocess

        from tests.conftest import ROOT

        env = {k: v.replace("{d}", str(tmp_path)) for k, v in case.inventory.items()}
        done = subprocess.run([str(Path(sys.executable).parent / "pyinfra"), "inventory.py",
                               "debug-inventory"], cwd=ROOT, capture_output=True, text=True,
                              env={**os.environ, **env}, timeout=120, check=False)
        return done.returncode, done.stdout + done.stderr
    if case.subprocess:
        done = run_cli(*argv, env={"NODEGATE_LOCK_FILE": str(tmp_path / ".lock"),
                                   "NODEGATE_TEST_COMMUNITY": "public"}, timeout=120)
        return done.returncode, done.stdout + done.stderr
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse's own exit 2 names the option
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out + out.err


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory,
                 ) -> None:
    monkeypatch.setenv("NODEGATE_LOCK_FILE", str(tmp_path_factory.mktemp("lock") / "lock"))
    monkeypatch.setenv("NODEGATE_TEST_COMMUNITY", "public")
    monkeypatch.delenv("NODEGATE_DEBUG", raising=False)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")


def test_the_corpus_is_large_and_unique() -> None:
    ids = [c.id for c in CASES + LISTED]
    assert len(ids) == len(set(ids))
    assert len(ids) >= 80


def check_case(case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str], *,
               never: tuple[str, ...] = (), ignored: tuple[str, ...] = (".lock",)) -> str:
    """Run one case and assert the corpus's promise: its exit code, no traceback, the words
    it must name, none of ``never`` (a secret's pieces), and no file written but ``ignored``
    names (the battery lock). Every bad-input file runs its cases through this."""
    argv, before = _prepare(case, tmp_path)
    code, text = _run(argv, case, capsys, tmp_path)
    assert code == case.code, text
    assert "Traceback" not in text
    for word in case.names:
        assert word in text, (word, text)
    for piece in never:
        assert piece not in text, f"the secret leaked: {text}"
    after = {p for p in tmp_path.rglob("*") if p.name not in ignored}
    before = {p for p in before if p.name not in ignored}
    assert after == before, sorted(map(str, after - before))
    return text


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_exits_naming_it(case: Case, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    check_case(case, tmp_path, capsys)


@pytest.mark.parametrize("case", LISTED, ids=[c.id for c in LISTED])
def test_unreadable_report_files_are_listed_never_crashed_on(case: Case, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    argv, _ = _prepare(case, tmp_path)
    code, text = _run(argv, case, capsys, tmp_path)
    assert code == case.code, text
    assert "Traceback" not in text
    for word in case.names:
        assert word in text, (word, text)


def _crash(_args: object) -> int:
    raise RuntimeError("a defect of ours")


def _needs(name: str) -> Callable[[object], int]:
    def handler(_args: object) -> int:
        raise ModuleNotFoundError(f"No module named '{name}'", name=name)

    return handler


def _patch_version(monkeypatch: pytest.MonkeyPatch, handler: Callable[[object], int]) -> None:
    """Make ``nodegate version`` fail the way a defect or a missing extra would."""
    from nodegate.commands import version

    monkeypatch.setattr(version, "run", handler)


def test_an_unexpected_error_is_one_line_and_exit_3(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    _patch_version(monkeypatch, _crash)
    assert cli.main(["version"]) == 3
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.count("\n") == 1 and "internal error: RuntimeError: a defect of ours" in err
    assert "report it, with that traceback, to whoever maintains your nodegate install" in err
    log = Path(err.split("traceback in ")[1].split(" ")[0].rstrip(");"))
    assert "Traceback" in log.read_text() and "a defect of ours" in log.read_text()
    log.unlink()


def test_debug_prints_the_traceback(monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    _patch_version(monkeypatch, _crash)
    assert cli.main(["--debug", "version"]) == 3
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError: a defect of ours" in err


@pytest.mark.parametrize(("module", "extra"), [("torch", "torch"), ("pysnmp.hlapi", "power"),
                                               ("redfish", "power")])
def test_a_missing_optional_package_names_its_extra(module: str, extra: str,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    _patch_version(monkeypatch, _needs(module))
    assert cli.main(["version"]) == 3
    err = capsys.readouterr().err
    assert f"pip install 'nodegate[{extra}]'" in err and "Traceback" not in err


def test_a_missing_required_module_is_an_internal_error(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    _patch_version(monkeypatch, _needs("nodegate.nothing_here"))
    assert cli.main(["version"]) == 3
    assert "internal error: ModuleNotFoundError" in capsys.readouterr().err


def test_a_lock_path_that_cannot_be_created_is_exit_3_naming_it(tmp_path: Path) -> None:
    done = run_cli(*SIM, "health", "--checks", "log", "--profile", "sim-h100-hgx",
                   "--report-dir", str(tmp_path / "out"),
                   env={"NODEGATE_LOCK_FILE": "/proc/nodegate/lock"}, timeout=120)
    assert done.returncode == 3, done.stderr
    assert "/proc/nodegate/lock" in done.stderr and "NODEGATE_LOCK_FILE" in done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert not (tmp_path / "out").exists()
