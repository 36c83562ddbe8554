"""Defects a review of the gate's hostile-input mechanisms found, each kept as the operator
met it (all fixed; docs/reliability.md, section 12). None of these inputs is in
tests/badinput/.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: A command that takes longer than this hung (a healthy simulated run takes ~2 s).
HANG_S = 30


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT / "src"), str(ROOT / "lab" / "src"), env.get("PYTHONPATH")) if p)
    env.pop("NODEGATE_DEBUG", None)
    return env


def _cap_memory() -> None:  # a read of /dev/zero ends in MemoryError, not a swapping machine
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def _run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str] | None:
    """``argv`` in a session of its own, killed whole (a hung grandchild too) after HANG_S;
    None when it hung."""
    with subprocess.Popen(argv, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, start_new_session=True, **kwargs) as proc:  # type: ignore[call-overload]
        try:
            out, err = proc.communicate(timeout=HANG_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return None
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _nodegate(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    done = _run([sys.executable, "-m", "nodegate.cli", *argv], cwd=cwd,
                preexec_fn=_cap_memory)
    if done is None:
        pytest.fail(f"nodegate {' '.join(argv)} hung (over {HANG_S} s)")
    return done


def _health(report_dir: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``nodegate health`` on a healthy simulated H100 board (gpu checks only: PASS)."""
    return _nodegate("sim", "run", "h100-hgx", "--", "nodegate", "health",
                     "--profile", "sim-h100-hgx", "--checks", "gpu",
                     "--report-dir", str(report_dir), "--no-textfile", "--node-name", "n1",
                     "--quiet", cwd=tmp_path)


# --- 1. the report folder's own files bypass nodegate.fileio (class 4 / item 4) --------------
#
# report.outputs reads the sequence counter with open() and the sibling reports with
# Path.read_bytes(): a FIFO there blocks for ever (holding the battery lock), /dev/zero reads
# until memory runs out.


def test_a_fifo_sequence_counter_does_not_hang_health(tmp_path: Path) -> None:
    reports = tmp_path / "r"
    reports.mkdir()
    os.mkfifo(reports / ".sequence")
    done = _health(reports, tmp_path)
    assert done.returncode == 2, done.stderr
    assert ".sequence" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("make", ["fifo", "dev-zero"])
def test_a_sibling_report_that_is_not_a_file_does_not_hang_health(tmp_path: Path,
                                                                  make: str) -> None:
    """No counter yet (a first run, or a lost one): the highest sequence among the reports
    is read, and one of them is a FIFO (or a link to /dev/zero) dated in the future."""
    reports = tmp_path / "r"
    reports.mkdir()
    hostile = reports / "quick-20991231T000000.000Z.json"
    if make == "fifo":
        os.mkfifo(hostile)
    else:
        hostile.symlink_to("/dev/zero")
    done = _health(reports, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr


def test_prune_skips_a_sibling_that_is_not_a_file(tmp_path: Path) -> None:
    """Pruning orders the dated reports by reading each; a FIFO among them hung it."""
    script = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "from nodegate.report.outputs import prune\n"
        "d = Path(sys.argv[1])\n"
        "os.mkfifo(d / 'quick-20991231T000000.000Z.json')\n"
        "for i in (1, 2):\n"
        "    (d / f'quick-2026010{i}T000000.000Z.json').write_text("
        "'{\"sequence\": %d, \"report_id\": \"r%d\"}' % (i, i))\n"
        "prune(d, 'quick', keep=1)\n"
        "print(sorted(p.name for p in d.iterdir()))\n"
    )
    done = _run([sys.executable, "-c", script, str(tmp_path)])
    if done is None:
        pytest.fail("prune hung on a FIFO named like a dated report")
    assert done.returncode == 0, done.stderr
    assert "quick-20260102T000000.000Z.json" in done.stdout


# --- 2. a file nodegate itself writes beside the reports counts as an unreadable report ---
#
# ``nodegate health`` (its network group) leaves ``<report dir>/rail-map.json`` for jobs
# (docs/network.md). ``nodegate report DIR`` reads every *.json below DIR, and the gate on a
# tree without top-level *-latest.json every *.json: both now count an unreadable file as ERROR
# evidence (classes 3 and 7), so the node's own rail map makes a healthy node "not proven
# passing" (exit 1) and drains it.

RAIL_MAP: dict[str, object] = {"schema": "nodegate.rail-map/1", "node": None, "ranks": []}


@pytest.fixture
def healthy_dir(tmp_path: Path) -> Path:
    """A node's report folder after a passing health run, with the rail map health writes."""
    reports = tmp_path / "fleet" / "n1"
    reports.mkdir(parents=True)
    done = _health(reports, tmp_path)
    assert done.returncode == 0, done.stderr
    (reports / "rail-map.json").write_text(json.dumps(RAIL_MAP, indent=1) + "\n")
    return reports


def test_the_fleet_view_of_a_healthy_nodes_report_dir_passes(healthy_dir: Path) -> None:
    done = _nodegate("report", str(healthy_dir), cwd=healthy_dir.parent)
    assert done.returncode == 0, done.stderr


def test_the_gate_does_not_drain_a_healthy_node_for_its_rail_map(
        healthy_dir: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from nodegate import cli
    from nodegate.cluster import slurm
    from tests.cluster.test_clock_steps import Recorder

    monkeypatch.setattr(slurm, "SlurmScheduler", Recorder)
    Recorder.STATES = {}
    Recorder.DONE = []
    code = cli.main(["gate", "--json", "--node", "n1", "--max-age", "1d",
                     "--report-dir", str(healthy_dir.parent)])
    decision = json.loads(capsys.readouterr().out)
    assert code == 0
    assert decision["action"] == "none", decision["why"]
    assert Recorder.DONE == []


# --- 3. the poller config's numbers bypass the bounded converter (item 4, and item 9's
#        "poller config" fuzz target, which tests/fuzz/ lacks) -------------------------------
#
# power.poller.load_config calls float()/int() on YAML values: text or a list there ends in
# an internal error (exit 3 with a traceback file), NaN reaches the SNMP library, a negative
# retry count and non-ASCII port digits are accepted, and the string "false" turns
# ``insecure`` on (bool("false") is True).

POLL_PDU = ('pdus:\n  - {name: p1, url: "snmp://127.0.0.1:1", model: apc-rpdu2, '
            'community: "env:C"}\n')
POLL_OUT = "output:\n  textfile: /tmp/nodegate-review.prom\n"


def _bmc_entry(extra: str) -> str:
    return ('bmcs:\n  - {name: b1, url: "https://root@127.0.0.1:1", password: "env:BMCPW"'
            f"{extra}}}\n")


@pytest.mark.parametrize(("text", "key"), [
    (POLL_OUT + "interval_s: abc\n" + POLL_PDU, "interval_s"),
    (POLL_OUT + "interval_s: [1]\n" + POLL_PDU, "interval_s"),
    (POLL_OUT + "timeout_s: .nan\n" + POLL_PDU, "timeout_s"),
    (POLL_OUT + "retries: 1e400\n" + POLL_PDU, "retries"),
    (POLL_OUT + "retries: -3\n" + POLL_PDU, "retries"),
    (POLL_OUT + _bmc_entry(", max_sessions: abc"), "max_sessions"),
    ('output:\n  listen: "127.0.0.1:\u0661\u0662\u0663\u0664"\n' + POLL_PDU, "output.listen"),
    (POLL_OUT + _bmc_entry(', insecure: "false"'), "insecure"),
], ids=["interval-text", "interval-list", "timeout-nan", "retries-huge-float",
        "retries-negative", "max-sessions-text", "listen-arabic-digits", "insecure-string"])
def test_a_bad_poller_number_is_a_config_error_naming_its_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, key: str) -> None:
    from nodegate.errors import ConfigError
    from nodegate.power.poller import load_config

    monkeypatch.setenv("C", "public")
    monkeypatch.setenv("BMCPW", "review-secret")
    config = tmp_path / "poller.yaml"
    config.write_text(text)
    config.chmod(0o644)
    with pytest.raises(ConfigError) as caught:
        load_config(config)
    assert key.rsplit(".", 1)[-1] in str(caught.value)


# --- 4. the redaction filter rewrites nodegate's own help and messages (item 5) -------------
#
# Every URL userinfo on stdout/stderr is masked, a bare user name and a placeholder too: the
# help of ``power read`` says ``--bmc https://***@HOST[:PORT]`` (and ``snmpv3://***@HOST``),
# so an operator cannot learn from it what goes before the ``@``; the error for a wrong
# scheme says ``BMC URL must be https://***@HOST[:PORT]``. Only a password (and the SNMP v2c
# community, which is one) is a secret; docs/power.md writes these forms out in full.


def test_power_read_help_names_what_goes_before_the_at(tmp_path: Path) -> None:
    done = _nodegate("power", "read", "--help", cwd=tmp_path)
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "https://USER@HOST[:PORT]" in text, text


def test_a_wrong_bmc_scheme_message_shows_the_form_expected(tmp_path: Path) -> None:
    done = _nodegate("power", "read", "--bmc", "ftp://root@127.0.0.1", cwd=tmp_path)
    assert done.returncode == 2
    assert "https://USER@HOST[:PORT]" in done.stderr, done.stderr


# --- 5. the credential key catalogue misses the project's own secret (item 5) --------------
#
# The munge key is the Slurm secret the slurm_node role handles (by reference only:
# ``slurm_node_munge_key_file``). A literal ``slurm_node_munge_key`` in a site file's host data
# is not recognised as a credential and is loaded (into git, into pyinfra's host data).


def test_a_literal_munge_key_is_a_credential(tmp_path: Path) -> None:
    from nodegate.errors import ConfigError
    from nodegate.secret_refs import is_secret_key
    from nodegate.site.loader import load_site

    assert is_secret_key("slurm_node_munge_key")
    text = (ROOT / "inventory" / "example-site.yaml").read_text()
    text = text.replace("    profile: xe9680-h100\n", "    profile: xe9680-h100\n    data:\n"
                        '      slurm_node_munge_key: "c2VjcmV0LW11bmdlLWtleS1ieXRlcw=="\n', 1)
    site = tmp_path / "site.yaml"
    site.write_text(text)
    with pytest.raises(ConfigError, match="munge_key"):
        load_site(str(site))


# --- 6. a full disk for the reports turns a judged FAIL into "bad input" (class 1) ---------
#
# The rule: "every command ends with its verdict's code whatever happens to stdout/stderr
# (EPIPE, SIGPIPE, a full disk for the summary)". On a board with an ECC DBE and a report
# folder on a full filesystem, ``nodegate health`` exits 2 (bad input, "nothing was judged");
# ``nodegate gate --healthcheck`` then refuses to gate on that (exit 3) and the sick node
# stays in service. The board was judged: FAIL is 1.


@pytest.fixture
def full_dir(tmp_path: Path):  # type: ignore[no-untyped-def]
    folder = tmp_path / "full"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)],
                             capture_output=True, check=False)
    if mounted.returncode != 0:
        pytest.skip("needs root to mount a small tmpfs")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False)


def test_a_fail_on_a_full_report_disk_still_exits_1(full_dir: Path, tmp_path: Path) -> None:
    done = _nodegate("sim", "run", "h100-hgx+ecc-dbe@gpu0", "--", "nodegate", "health",
                     "--profile", "sim-h100-hgx", "--checks", "gpu", "--report-dir",
                     str(full_dir), "--no-textfile", "--node-name", "n1", "--quiet",
                     cwd=tmp_path)
    assert "No space left" in done.stderr
    assert done.returncode == 1, done.stderr


# --- 7. the bastion's fetch still picks "newest" by the stamp in the file name (class 2) ---
#
# deploy/fetch_reports.to_fetch takes the newest ``gate_history_keep`` dated reports by the
# stamp in their names, then those the bastion lacks. After a clock step, older files carry
# names from the future: once there are ``keep`` of them (already fetched), every report the
# node writes after the clock is fixed sorts below them and is never fetched, so the fleet
# view keeps showing the old future-dated history over today's FAIL.


def test_the_fetch_takes_a_new_report_named_before_future_dated_ones(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT))
    from deploy.fetch_reports import to_fetch

    remote_dir = "/var/lib/nodegate/reports"
    future = [f"quick-2099010{i}T000000.000Z.json" for i in (1, 2, 3)]
    today = "quick-20261206T064500.000Z.json"
    local = tmp_path / "history"
    local.mkdir()
    for name in future:  # fetched while the node's clock said 2099
        (local / name).write_text("{}")
    remote = [f"{remote_dir}/{name}" for name in [*future, today]]
    plan = to_fetch(remote, local, keep=3)
    assert (f"{remote_dir}/{today}", local / today) in plan


def test_the_report_readers_know_the_rail_maps_name() -> None:
    from nodegate.probes.rail_map import MAP_FILE
    from nodegate.report.fleet_summary import is_report_name

    assert not is_report_name(MAP_FILE)


# --- 8. a directory where quick-latest.json belongs keeps a sick node in service (class 3) --
#
# ``nodegate health`` on a board with an ECC DBE writes the dated report (FAIL) and its
# summary, then fails on the directory at ``quick-latest.json`` and exits 2, although
# docs/exit-codes.md says every output folder is checked before the battery starts, "so a
# run writes its whole report set or exits 2 having written nothing". ``nodegate gate`` reads
# only the ``*-latest.json`` files when any name matches: the one there is unreadable, so it
# exits 2 and acts on nothing, while a readable FAIL (the newest report, by sequence) lies
# beside it. The rule: any readable FAIL drains.


@pytest.fixture
def latest_is_a_dir(tmp_path: Path) -> tuple[Path, subprocess.CompletedProcess[str]]:
    reports = tmp_path / "r"
    (reports / "quick-latest.json").mkdir(parents=True)
    done = _nodegate("sim", "run", "h100-hgx+ecc-dbe@gpu0", "--", "nodegate", "health",
                     "--profile", "sim-h100-hgx", "--checks", "gpu", "--report-dir",
                     str(reports), "--no-textfile", "--node-name", "n1", "--quiet",
                     cwd=tmp_path)
    return reports, done


def test_a_latest_target_that_is_a_directory_is_refused_before_any_write(
        latest_is_a_dir: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    reports, done = latest_is_a_dir
    assert done.returncode == 2, done.stderr
    assert "quick-latest.json" in done.stderr
    assert sorted(p.name for p in reports.glob("quick-2*.json")) == []


@pytest.fixture
def latest_broken_after_a_fail(tmp_path: Path) -> Path:
    """A FAIL written whole, then its latest copy replaced by a directory (a disk or an
    operator broke it): the dated FAIL and its summary are readable beside it."""
    reports = tmp_path / "r"
    done = _nodegate("sim", "run", "h100-hgx+ecc-dbe@gpu0", "--", "nodegate", "health",
                     "--profile", "sim-h100-hgx", "--checks", "gpu", "--report-dir",
                     str(reports), "--no-textfile", "--node-name", "n1", "--quiet",
                     cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    (reports / "quick-latest.json").unlink()
    (reports / "quick-latest.json").mkdir()
    return reports


def test_a_readable_fail_beside_an_unreadable_latest_drains(
        latest_broken_after_a_fail: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from nodegate import cli
    from nodegate.cluster import slurm
    from tests.cluster.test_clock_steps import Recorder

    reports = latest_broken_after_a_fail
    monkeypatch.setattr(slurm, "SlurmScheduler", Recorder)
    Recorder.STATES = {}
    Recorder.DONE = []
    code = cli.main(["gate", "--json", "--node", "n1", "--report-dir", str(reports)])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert [d[0] for d in Recorder.DONE] == ["drain"], out.err
