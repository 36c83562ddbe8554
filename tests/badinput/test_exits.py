"""Exit codes that cannot lie, and pyinfra inventory errors that end in exit 2.

Streams: every command of ``nodegate.cli.COMMAND_MODULES`` and ``nodegate-lab`` runs as a real
process with its stdout a pipe nobody reads (the reader closed: EPIPE) and with stdout on
``/dev/full`` (a full disk), stderr on the other failure each time; the exit code must be the
one the same command gives with working streams (docs/exit-codes.md: the verdict's), never 0
for a FAIL, never 120 (a failed flush at exit), never 141 (SIGPIPE), never a traceback.
The sick board is a simulated H100 HGX with a double-bit ECC error on gpu0 (``ecc-dbe``).

Inventory: hostile site files and Ansible inventories through ``pyinfra inventory.py
debug-inventory`` (the corpus's runner), each one line naming the file, host and key, exit 2.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.badinput.test_corpus import Case, _prepare, _run
from tests.conftest import ROOT

PY = sys.executable
NODEGATE = (PY, "-m", "nodegate.cli")
SICK = "h100-hgx+ecc-dbe@gpu0"
SIM_SICK = (*NODEGATE, "sim", "run", SICK, "--", *NODEGATE)
PROFILE = "sim-h100-hgx"
BAD_PROFILE = "schema: nodegate.profile/1\nlayer: profile\nextends: [no-such-layer]\n"
SCONTROL = "#!/bin/sh\necho 'NodeName=vm Arch=x86_64 State=IDLE Partitions=gpu'\n"
SINFO = "#!/bin/sh\necho 'vm|idle|Unknown|none'\n"
SQUEUE = "#!/bin/sh\necho '7|training|RUNNING'\n"


@dataclass(frozen=True)
class Command:
    """One command as a process: argv (``{d}`` is the test's folder, ``{r}`` the sick
    board's report folder) and the code it gives with working streams."""

    id: str
    argv: tuple[str, ...]
    code: int
    files: dict[str, str] = field(default_factory=dict)


COMMANDS = [
    Command("version", (*NODEGATE, "version"), 0),
    Command("profiles", (*NODEGATE, "profiles", "check", "{d}/p.yaml"), 2,
            {"p.yaml": BAD_PROFILE}),
    Command("health", (*SIM_SICK, "health", "--profile", PROFILE, "--checks", "gpu", "--json",
                       "--report-dir", "{d}/r", "--no-textfile"), 1),
    Command("validate", (*SIM_SICK, "validate", "--level", "quick", "--profile", PROFILE,
                         "--checks", "gpu", "--json", "--report-dir", "{d}/r",
                         "--no-textfile"), 1),
    # the real all-reduce needs a peer and takes minutes: its bad input, found in the handler
    Command("multinode", (*NODEGATE, "multinode", "--role", "join", "--endpoint", "127.0.0.1:9",
                          "--peer-name", "x", "--profile", "no-such-profile", "--json",
                          "--report-dir", "{d}/r"), 2),
    Command("netload", (*NODEGATE, "netload", "--profile", "no-such-profile", "--json",
                        "--report-dir", "{d}/r"), 2),
    Command("sim", (*NODEGATE, "sim", "scenarios"), 0),  # more than a pipe holds
    Command("power", (*NODEGATE, "power", "read", "--pdu",
                      "snmp://127.0.0.1?community=public", "--model", "apc-rpdu2", "--json"),
            2),
    Command("gate", (*NODEGATE, "gate", "--report-dir", "{r}", "--node", "vm", "--dry-run",
                     "--json"), 0, {"bin/scontrol": SCONTROL}),
    Command("hold", (*NODEGATE, "hold", "--node", "vm", "--json"), 0,
            {"bin/scontrol": SCONTROL}),
    Command("sweep", (*NODEGATE, "sweep", "--partition", "gpu", "--ledger", "{d}/ledger.json",
                      "--dry-run", "--json"), 0, {"bin/sinfo": SINFO, "bin/squeue": SQUEUE}),
    # one idle node to pair: bad input before any srun (a pair needs two real nodes)
    Command("cluster-check", (*NODEGATE, "cluster-check", "--partition", "gpu", "--out",
                              "{d}/o", "--json"), 2,
            {"bin/sinfo": SINFO, "bin/scontrol": SCONTROL}),
    Command("report", (*NODEGATE, "report", "{r}", "--json", "--no-cache"), 1),
    Command("ledger", (*NODEGATE, "ledger", "ingest", "{r}", "--db", "{d}/ledger.sqlite",
                       "--json"), 0),
    Command("remediate", (*NODEGATE, "remediate", "--report-dir", "{r}", "--state-dir",
                          "{d}/s", "--profile", PROFILE, "--node", "vm"), 0),  # off
    Command("lab", (PY, "-m", "nodegate_lab.cli", "status"), 0),
]


def test_every_command_module_has_a_case() -> None:
    from nodegate import cli

    assert len(cli.COMMAND_MODULES) == len(COMMANDS) - 1  # + nodegate-lab's own run


@pytest.fixture(scope="module")
def sick_reports(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sick board judged once with working streams: the FAIL the others must keep."""
    folder = tmp_path_factory.mktemp("sick")
    done = subprocess.run([*SIM_SICK, "health", "--profile", PROFILE, "--checks", "gpu",
                           "--json", "--report-dir", str(folder), "--no-textfile"],
                          capture_output=True, text=True, env=_env(folder), cwd=ROOT,
                          timeout=120, check=False)
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["verdict"] == "FAIL"
    return folder


def _env(d: Path) -> dict[str, str]:
    bin_dir = f"{d / 'bin'}{os.pathsep}{Path(PY).parent}"
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "NODEGATE_LOCK_FILE": str(d / ".lock"), "NODEGATE_REPORT_DIR": str(d / "r")}


@pytest.fixture
def closed_pipe() -> Iterator[int]:
    """The write end of a pipe whose reader is gone (``| head`` after it stopped)."""
    read, write = os.pipe()
    os.close(read)
    yield write
    os.close(write)


def _spawn(argv: list[str], d: Path, *, stdout: int, stderr: int,
           preexec: object = None) -> int:
    return subprocess.run(argv, stdout=stdout, stderr=stderr, env=_env(d), cwd=ROOT,
                          timeout=180, check=False,
                          preexec_fn=preexec).returncode  # type: ignore[arg-type]


def _setup(command: Command, d: Path, sick_reports: Path) -> list[str]:
    for name, text in command.files.items():
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_text(text)
        (d / name).chmod(0o755)
    return [a.replace("{d}", str(d)).replace("{r}", str(sick_reports)) for a in command.argv]


@pytest.mark.parametrize("command", COMMANDS, ids=[c.id for c in COMMANDS])
def test_stdout_into_a_closed_pipe_keeps_the_code(command: Command, tmp_path: Path,
                                                  sick_reports: Path, closed_pipe: int) -> None:
    argv = _setup(command, tmp_path, sick_reports)
    with (tmp_path / "err").open("w") as err:
        code = _spawn(argv, tmp_path, stdout=closed_pipe, stderr=err.fileno())
    text = (tmp_path / "err").read_text()
    assert code == command.code, text
    assert "Traceback" not in text and "Exception ignored" not in text, text


@pytest.mark.parametrize("command", COMMANDS, ids=[c.id for c in COMMANDS])
def test_stdout_on_a_full_disk_keeps_the_code(command: Command, tmp_path: Path,
                                              sick_reports: Path, closed_pipe: int) -> None:
    argv = _setup(command, tmp_path, sick_reports)
    with open("/dev/full", "w") as full:  # stderr: the closed pipe
        code = _spawn(argv, tmp_path, stdout=full.fileno(), stderr=closed_pipe)
    assert code == command.code


def test_a_fail_stays_1_with_stdout_and_stderr_closed_before_the_start(tmp_path: Path) -> None:
    def close_both() -> None:
        os.close(1)
        os.close(2)

    argv = [*SIM_SICK, "health", "--profile", PROFILE, "--checks", "gpu", "--json",
            "--report-dir", str(tmp_path / "r"), "--no-textfile"]
    code = _spawn(argv, tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                  preexec=close_both)
    assert code == 1
    # what would have gone to descriptor 1 reached no file the run opened: the report is JSON
    report = json.loads((tmp_path / "r" / "quick-latest.json").read_text())
    assert report["verdict"] == "FAIL"


def test_a_fail_stays_1_when_sigpipe_kills_by_default(tmp_path: Path,
                                                      closed_pipe: int) -> None:
    """A process whose SIGPIPE is back at its default (a library, an embedding) would die
    with 141 at the first write into the closed pipe; the run ignores it and ends with 1."""
    script = ("import signal, sys; signal.signal(signal.SIGPIPE, signal.SIG_DFL); "
              "from nodegate.cli import main; sys.exit(main(sys.argv[1:]))")
    argv = [*NODEGATE, "sim", "run", SICK, "--", PY, "-c", script, "health", "--profile",
            PROFILE, "--checks", "gpu", "--json", "--report-dir", str(tmp_path / "r"),
            "--no-textfile"]
    code = _spawn(argv, tmp_path, stdout=closed_pipe, stderr=subprocess.DEVNULL)
    assert code not in (-signal.SIGPIPE, 128 + signal.SIGPIPE)
    assert code == 1


def test_a_full_disk_says_so_on_stderr_and_keeps_the_fail(tmp_path: Path) -> None:
    argv = [*SIM_SICK, "health", "--profile", PROFILE, "--checks", "gpu", "--json",
            "--report-dir", str(tmp_path / "r"), "--no-textfile"]
    with open("/dev/full", "w") as full:
        done = subprocess.run(argv, stdout=full, stderr=subprocess.PIPE, text=True,
                              env=_env(tmp_path), cwd=ROOT, timeout=120, check=False)
    assert done.returncode == 1
    assert "nodegate health: FAIL" in done.stderr
    assert "stdout: No space left on device; output lost" in done.stderr


# --- options argparse (before Python 3.12) parses into an empty list ------------------------

OPTION_CASES = [
    Case("health-nvml-timeout-double-dash", ("health", "--nvml-timeout=--"), 2,
         ("--nvml-timeout", "expected one value")),
    Case("gate-max-age-double-dash", ("gate", "--max-age=--"), 2,
         ("--max-age", "expected one value")),
    Case("sim-run-state-dir-double-dash", ("sim", "run", "--state-dir=--", "h100-hgx", "--",
                                           "true"), 2, ("--state-dir", "expected one value")),
]


@pytest.mark.parametrize("case", OPTION_CASES, ids=[c.id for c in OPTION_CASES])
def test_an_option_given_no_value_is_exit_2_naming_it(case: Case, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    argv, before = _prepare(case, tmp_path)
    code, text = _run(argv, case, capsys, tmp_path)
    assert code == case.code, text
    assert "Traceback" not in text and "internal error" not in text, text
    for word in case.names:
        assert word in text, (word, text)
    assert {p for p in tmp_path.rglob("*")} == before


# --- pyinfra inventory -------------------------------------------------------------------------

SITE_HEAD = ("schema: nodegate.site/1\nname: t\nhosts:\n  n1:\n    address: 10.0.0.1\n"
             "    profile: none\n")
SITE = {"NODEGATE_SITE": "{d}/s.yaml"}
ANSIBLE = {"NODEGATE_ANSIBLE_INVENTORY": "{d}/fleet.ini", "ANSIBLE_VAULT_PASSWORD_FILE": ""}


def _groups(name: str) -> dict[str, bytes | str]:
    return {"s.yaml": SITE_HEAD + f"groups:\n  {name}: [n1]\n"}


INVENTORY_CASES = [
    Case("site-group-named-_group", (), 2, ("s.yaml", "groups._group", "reserved"),
         _groups("_group"), inventory=SITE),
    Case("site-group-named-_site", (), 2, ("s.yaml", "groups._site", "reserved"),
         _groups("_site"), inventory=SITE),
    Case("site-group-named-others", (), 2, ("s.yaml", "groups.others", "reserved"),
         _groups("others"), inventory=SITE),
    Case("site-group-named-all", (), 2, ("s.yaml", "groups.all", "pyinfra"),
         _groups("all"), inventory=SITE),
    Case("site-group-named-inventory", (), 2, ("s.yaml", "groups.inventory", "pyinfra"),
         _groups("inventory"), inventory=SITE),
    Case("site-group-named-override_data", (), 2, ("s.yaml", "groups.override_data"),
         _groups("override_data"), inventory=SITE),
    Case("site-group-named-like-a-module-name", (), 2, ("s.yaml", "groups.os", "reserved"),
         _groups("os"), inventory=SITE),
    Case("site-gpu-nodes-not-the-profiled-hosts", (), 2, ("s.yaml", "groups.gpu_nodes"),
         _groups("gpu_nodes"), inventory=SITE),
    Case("site-self-referencing-yaml", (), 2, ("s.yaml",),
         {"s.yaml": SITE_HEAD + "groups: &g\n  loop: *g\n"}, inventory=SITE),
    Case("site-deep-list", (), 2, ("s.yaml",),
         {"s.yaml": SITE_HEAD + "description: " + "[" * 5000 + "]" * 5000 + "\n"},
         inventory=SITE),
    Case("site-huge-integer", (), 2, ("s.yaml", "5000 characters", "line 7"),
         {"s.yaml": SITE_HEAD + "    ssh_port: " + "9" * 5000 + "\n"}, inventory=SITE),
    Case("site-not-a-mapping-of-hosts", (), 2, ("s.yaml", "hosts.n1"),
         {"s.yaml": "schema: nodegate.site/1\nname: t\nhosts:\n  n1: [a, b]\n"},
         inventory=SITE),
    Case("ansible-group-named-_site", (), 2, ("fleet.ini", "gpu01", "groups._site"),
         {"fleet.ini": "[_site]\ngpu01\n"}, inventory=ANSIBLE),
    Case("ansible-group-named-others", (), 2, ("fleet.ini", "gpu01", "groups.others"),
         {"fleet.ini": "[others]\ngpu01\n"}, inventory=ANSIBLE),
    Case("ansible-huge-integer", (), 2, ("fleet.ini", "gpu01", "ansible_port"),
         {"fleet.ini": "[gpu]\ngpu01 ansible_port=" + "9" * 5000 + "\n"}, inventory=ANSIBLE),
]


@pytest.fixture(autouse=False)
def _inventory_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODEGATE_DEBUG", raising=False)
    monkeypatch.delenv("NODEGATE_SITE", raising=False)
    monkeypatch.delenv("NODEGATE_ANSIBLE_INVENTORY", raising=False)


@pytest.mark.usefixtures("_inventory_env")
@pytest.mark.parametrize("case", INVENTORY_CASES, ids=[c.id for c in INVENTORY_CASES])
def test_inventory_input_ends_in_exit_2_naming_it(case: Case, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    argv, before = _prepare(case, tmp_path)
    code, text = _run(argv, case, capsys, tmp_path)
    assert code == case.code, text
    assert "Traceback" not in text, text
    for word in case.names:
        assert word in text, (word, text)
    errors = [line for line in text.splitlines() if line.startswith("nodegate: error:")]
    assert len(errors) == 1, text
    assert {p for p in tmp_path.rglob("*")} == before
