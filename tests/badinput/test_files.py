"""Files that are not files, files too large, YAML that expands, numbers Python cannot take.

Each kind of file a command reads (profile, site, Ansible vars, report, summary, capture,
credential, poller config, kernel log) meets a FIFO, a device, ``/dev/zero`` and an oversize
file; each must be refused at once naming the file (``nodegate.fileio``), never waited on or
read until memory runs out. A FIFO case that hung would hit the runner's timeout (an alarm
in this process, the subprocess timeout for pyinfra and the battery) and fail, not hang.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.badinput.test_corpus import (
    ANSIBLE,
    CORPUS,
    HEADER,
    POLL_HEAD,
    SITE,
    SITE_HEAD,
    Case,
    _environment,  # noqa: F401  (the corpus's autouse fixture: lock file, PATH, no debug)
    _prepare,
    _run,
)
from tests.conftest import run_cli

#: Seconds an in-process case may take before the alarm calls it hung.
HANG_S = 30
BMC = ("power", "read", "--bmc", "https://admin@127.0.0.1:1", "--bmc-password", "file:{d}/pw")
POLL = ("power", "poll", "--config", "{d}/p.yaml", "--once")
GATE = ("gate", "--report-dir", "{d}/r", "--node", "n1", "--dry-run")
IMPORT = ("sim", "import", "{d}/c.xml", "-o", "{d}/out.yaml")


def _nested_bomb() -> str:
    """Nine levels of nine aliases: 81 aliases, under any alias cap, 9**9 leaves expanded."""
    lines = ['l0: &l0 ["x","x","x","x","x","x","x","x","x"]']
    for i in range(1, 10):
        lines.append(f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def _merge_bomb() -> str:
    """Merge keys that each merge the previous mapping nine times."""
    lines = ["a0: &a0 {k0: 1, k1: 2}"]
    for i in range(1, 14):
        lines.append(f"a{i}: &a{i} {{<<: [" + ",".join([f"*a{i - 1}"] * 9) + f"], z{i}: 1}}")
    return "\n".join(lines) + "\n"


def _fifo(name: str, mode: int = 0o644) -> Callable[[Path], None]:
    def make(d: Path) -> None:
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(d / name)
        os.chmod(d / name, mode)
    return make


def _link(name: str, target: str) -> Callable[[Path], None]:
    def make(d: Path) -> None:
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, d / name)
    return make


def _sparse(name: str, size: int, mode: int = 0o644) -> Callable[[Path], None]:
    def make(d: Path) -> None:
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        with (d / name).open("wb") as handle:
            handle.truncate(size)  # sparse: no disk used
        os.chmod(d / name, mode)
    return make


def _char_device(name: str, mode: int = 0o600) -> Callable[[Path], None]:
    """A character device like /dev/zero (1, 5) whose mode passes the owner checks of
    credential and config files, so only the reader can refuse it; only root may make one."""
    def make(d: Path) -> None:
        if os.geteuid() != 0:
            pytest.skip("making a device node needs root")
        os.mknod(d / name, mode | stat.S_IFCHR, os.makedev(1, 5))
    return make


def _summary_fifo(d: Path) -> None:
    from nodegate.report.fleet_summary import path_for, write_report
    from nodegate_lab.synthetic_fleet import synthetic_report

    report = d / "r" / "n1" / "quick-latest.json"
    write_report(synthetic_report("n1", level="quick", seed=1), report)
    path_for(report).unlink()
    os.mkfifo(path_for(report))


def _summary_zero(d: Path) -> None:
    _summary_fifo(d)
    from nodegate.report.fleet_summary import path_for

    summary = path_for(d / "r" / "n1" / "quick-latest.json")
    summary.unlink()
    os.symlink("/dev/zero", summary)


def _capture(old: str, new: str) -> dict[str, bytes | str]:
    text = (CORPUS / "telegraf-tesla-t4.xml").read_text()
    assert old in text
    return {"c.xml": text.replace(old, new, 1)}


ARABIC_12 = "\u0661\u0662"  # '١٢': int() reads it as 12
DIGITS_5000 = "1" * 5000

CASES = [
    # profiles
    Case("file-profile-fifo", ("profiles", "check", "{d}/p.yaml"), 2, ("p.yaml", "FIFO"),
         setup=_fifo("p.yaml")),
    Case("file-profile-dev-null", ("profiles", "check", "/dev/null"), 2,
         ("/dev/null", "character device")),
    Case("file-profile-dev-zero", ("profiles", "check", "/dev/zero"), 2,
         ("/dev/zero", "character device")),
    Case("file-profile-over-1mib", ("profiles", "check", "{d}/p.yaml"), 2, ("p.yaml", "1 MiB"),
         {"p.yaml": HEADER + "# " + "x" * (2 * 1024 * 1024) + "\n"}),
    Case("file-profile-nested-alias-bomb", ("profiles", "check", "{d}/p.yaml"), 2,
         ("p.yaml", "expands to more than"), {"p.yaml": HEADER + _nested_bomb()}),
    Case("file-profile-merge-key-bomb", ("profiles", "check", "{d}/p.yaml"), 2,
         ("p.yaml", "expands to more than"), {"p.yaml": HEADER + _merge_bomb()}),
    Case("file-profile-self-alias", ("profiles", "check", "{d}/p.yaml"), 2,
         ("p.yaml", "self-referencing"), {"p.yaml": HEADER + "x: &a [1, *a]\n"}),
    Case("file-profile-deep-nesting", ("profiles", "check", "{d}/p.yaml"), 2,
         ("p.yaml", "deeper than"), {"p.yaml": HEADER + "x: " + "[" * 5000 + "]" * 5000 + "\n"}),
    Case("file-profile-5000-digit-integer", ("profiles", "check", "{d}/p.yaml"), 2,
         ("p.yaml", "5000 characters", "line 4"), {"p.yaml": HEADER + f"x: {DIGITS_5000}\n"}),
    Case("file-profile-5000-digit-threshold", ("profiles", "check", "{d}/p.yaml"), 2,
         ("p.yaml", "5002 characters"),
         {"p.yaml": HEADER + "thresholds:\n  gpu_temp_idle_max_c: {max: " + DIGITS_5000
          + ".0, unit: C, source: 'policy: x'}\n"}),
    Case("file-profile-non-ascii-digits", ("profiles", "check", "{d}/p.yaml"), 2,
         ("p.yaml", "gpu_temp_idle_max_c"),
         {"p.yaml": HEADER + "thresholds:\n  gpu_temp_idle_max_c: {max: " + ARABIC_12
          + ", unit: C, source: 'policy: x'}\n"}),
    Case("file-profile-control-character", ("profiles", "check", "{d}/p.yaml"), 2,
         ("p.yaml", "invalid YAML", "#x001f"), {"p.yaml": HEADER + "x: [9, \x1f]\n"}),
    # report files the gate reads
    Case("file-gate-report-fifo", GATE, 2, ("health-latest.json", "FIFO"),
         setup=_fifo("r/health-latest.json")),
    Case("file-gate-report-dev-zero", GATE, 2, ("health-latest.json", "character device"),
         setup=_link("r/health-latest.json", "/dev/zero")),
    Case("file-gate-report-dev-null", GATE, 2, ("health-latest.json", "character device"),
         setup=_link("r/health-latest.json", "/dev/null")),
    Case("file-gate-report-oversize", GATE, 2, ("health-latest.json", "256 MiB"),
         setup=_sparse("r/health-latest.json", 300 * 1024 * 1024)),
    # a summary beside a report: not trusted, the report itself is read
    Case("file-report-summary-fifo", ("report", "{d}/r", "--no-cache"), 0, ("n1",),
         setup=_summary_fifo),
    Case("file-report-summary-dev-zero", ("report", "{d}/r", "--no-cache"), 0, ("n1",),
         setup=_summary_zero),
    # nvidia-smi captures
    Case("file-capture-fifo", IMPORT, 2, ("c.xml", "FIFO"), setup=_fifo("c.xml")),
    Case("file-capture-dev-zero", ("sim", "import", "/dev/zero", "-o", "{d}/out.yaml"), 2,
         ("/dev/zero", "character device")),
    Case("file-capture-oversize", IMPORT, 2, ("c.xml", "32 MiB"),
         setup=_sparse("c.xml", 40 * 1024 * 1024)),
    Case("file-capture-non-ascii-digits", IMPORT, 2, ("fb_memory_usage/total", "ASCII"),
         _capture("<total>15360 MiB</total>", f"<total>{ARABIC_12} MiB</total>")),
    Case("file-capture-5000-digits", IMPORT, 2, ("fb_memory_usage/total", "5000 characters"),
         _capture("<total>15360 MiB</total>", f"<total>{DIGITS_5000} MiB</total>")),
    # credential files (0600, so only the reader can refuse them)
    Case("file-credential-fifo", BMC, 2, ("pw", "FIFO"), setup=_fifo("pw", 0o600)),
    Case("file-credential-device", BMC, 2, ("pw", "character device"),
         setup=_char_device("pw")),
    Case("file-credential-oversize", BMC, 2, ("pw", "65536 bytes"),
         setup=_sparse("pw", 1024 * 1024, 0o600)),
    # the power poller's config
    Case("file-poller-fifo", POLL, 2, ("p.yaml", "FIFO"), setup=_fifo("p.yaml")),
    Case("file-poller-device", POLL, 2, ("p.yaml", "character device"),
         setup=_char_device("p.yaml", 0o644)),
    Case("file-poller-oversize", POLL, 2, ("p.yaml", "1 MiB"),
         {"p.yaml": POLL_HEAD + "# " + "x" * (2 * 1024 * 1024) + "\n"}),
    Case("file-poller-alias-bomb", POLL, 2, ("p.yaml", "expands to more than"),
         {"p.yaml": POLL_HEAD + _nested_bomb()}),
    # options
    Case("file-option-non-ascii-integer", ("report", "{d}", "--jobs", ARABIC_12), 2,
         ("--jobs", "ASCII")),
    Case("file-option-non-ascii-float", (*BMC[:4], "--timeout", "\u0662"), 2,
         ("--timeout", "ASCII")),
    Case("file-option-5000-digits", ("gate", "--retries", DIGITS_5000), 2,
         ("--retries", "5000 characters")),
]

# through `pyinfra inventory.py debug-inventory` (its own timeout)
INVENTORY_CASES = [
    Case("file-site-fifo", (), 2, ("s.yaml", "FIFO"), setup=_fifo("s.yaml"), inventory=SITE),
    Case("file-site-dev-zero", (), 2, ("/dev/zero", "character device"),
         inventory={"NODEGATE_SITE": "/dev/zero"}),
    Case("file-site-oversize", (), 2, ("s.yaml", "4 MiB"),
         setup=_sparse("s.yaml", 5 * 1024 * 1024), inventory=SITE),
    Case("file-site-alias-bomb", (), 2, ("s.yaml", "expands to more than"),
         {"s.yaml": SITE_HEAD + _nested_bomb()}, inventory=SITE),
    Case("file-site-5000-digit-port", (), 2, ("s.yaml", "5000 characters"),
         {"s.yaml": SITE_HEAD + f"    ssh_port: {DIGITS_5000}\n"}, inventory=SITE),
    Case("file-site-non-ascii-port", (), 2, ("s.yaml", "ssh_port"),
         {"s.yaml": SITE_HEAD + f"    ssh_port: {ARABIC_12}\n"}, inventory=SITE),
    Case("file-ansible-non-ascii-port", (), 2, ("fleet.ini", "ansible_port"),
         {"fleet.ini": f"[gpu]\ngpu01 ansible_host=10.0.0.1 ansible_port={ARABIC_12}\n"},
         inventory=ANSIBLE),
    Case("file-ansible-group-vars-fifo", (), 2, ("all.yml", "FIFO"),
         {"fleet.ini": "[gpu]\ngpu01 ansible_host=10.0.0.1\n"},
         setup=_fifo("group_vars/all.yml"), inventory=ANSIBLE),
    Case("file-ansible-host-vars-dev-zero", (), 2, ("gpu01.yml", "character device"),
         {"fleet.ini": "[gpu]\ngpu01 ansible_host=10.0.0.1\n"},
         setup=_link("host_vars/gpu01.yml", "/dev/zero"), inventory=ANSIBLE),
]


@pytest.fixture
def alarm() -> Iterator[None]:
    """Fail, never hang: a case still running after HANG_S seconds raises in this process
    (a blocked open() of a FIFO is interrupted by the signal)."""
    def hung(_signum: int, _frame: Any) -> None:
        raise TimeoutError(f"still running after {HANG_S} s: it hangs")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(HANG_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _check(case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv, before = _prepare(case, tmp_path)
    code, text = _run(argv, case, capsys, tmp_path)
    assert code == case.code, text
    assert "Traceback" not in text
    assert "hangs" not in text
    for word in case.names:
        assert word in text, (word, text)
    after = {p for p in tmp_path.rglob("*") if p.name != ".lock"}
    assert after == before, sorted(map(str, after - before))


def test_the_cases_are_many_and_unique() -> None:
    ids = [c.id for c in CASES + INVENTORY_CASES]
    assert len(ids) == len(set(ids))
    assert len(ids) >= 16


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_file_that_is_not_one_is_refused_at_once(case: Case, tmp_path: Path, alarm: None,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    _check(case, tmp_path, capsys)


@pytest.mark.parametrize("case", INVENTORY_CASES, ids=[c.id for c in INVENTORY_CASES])
def test_an_inventory_file_that_is_not_one_is_refused_at_once(
        case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _check(case, tmp_path, capsys)


def _board_env(tmp_path: Path) -> dict[str, str]:
    done = run_cli("sim", "env", "h100-hgx", str(tmp_path / "board"), timeout=120)
    assert done.returncode == 0, done.stderr
    env = {}
    for line in done.stdout.splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        env[name] = value
    return env


@pytest.mark.parametrize("make", [
    _fifo("kernel.fifo"), _link("kernel.fifo", "/dev/zero"), _link("kernel.fifo", "/dev/null"),
    _sparse("kernel.fifo", 80 * 1024 * 1024),
], ids=["fifo", "dev-zero", "dev-null", "oversize"])
def test_a_kernel_log_file_that_is_not_one_is_error_at_once(
        make: Callable[[Path], None], tmp_path: Path) -> None:
    """The Xid check's kernel log (NODEGATE_KERNEL_LOG) read under the battery lock: a FIFO
    once held the lock for ever and /dev/null read as an empty log (no Xid: PASS); each is
    now unreadable, so ERROR (exit 1), at once."""
    env = _board_env(tmp_path)
    make(tmp_path)
    env.update(NODEGATE_KERNEL_LOG=str(tmp_path / "kernel.fifo"),
               NODEGATE_REPORT_DIR=str(tmp_path / "reports"),
               NODEGATE_LOCK_FILE=str(tmp_path / "lock"))
    try:
        done = run_cli("health", "--profile", "sim-h100-hgx", env=env, timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail("nodegate health hung on the kernel log")
    text = done.stdout + done.stderr
    assert done.returncode == 1, text
    assert "Traceback" not in text
    assert "kernel log unreadable" in text
    assert "xid_events" in text
