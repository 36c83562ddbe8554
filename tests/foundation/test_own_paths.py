"""The suite never touches the machine's own nodegate files: one autouse
fixture (tests/conftest.py ``_own_paths``) points every local default into a folder of the
test's own, and an audit hook fails a test that opens one of the machine's files. Proved
here by running a test with the defaults while another process holds /run/nodegate.lock,
in a mount namespace whose /run is a private tmpfs (the machine's real lock untouched).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import MACHINE_FILES, MACHINE_PATHS, OWN_PATHS, ROOT, run_cli


def test_every_local_default_is_the_tests_own(_own_paths: Path) -> None:
    from nodegate.battery_lock import default_lock_path
    from nodegate.paths import config_dir
    from nodegate.profiles.installed import node_profile_file
    from nodegate.remediation.state import default_state_dir
    from nodegate.report.outputs import default_report_dir, default_textfile_dir

    for path in (default_lock_path(), default_report_dir(), default_textfile_dir(),
                 config_dir(), node_profile_file(), default_state_dir()):
        assert path.is_relative_to(_own_paths), path
        assert not str(path).startswith(MACHINE_PATHS), path


def test_the_audit_hook_sees_an_open_of_a_machine_file() -> None:
    before = len(MACHINE_FILES.opened)
    MACHINE_FILES("open", ("/etc/nodegate/profile.json", "r", 0))
    MACHINE_FILES("open", ("/etc/nodegate-other/x", "r", 0))  # not ours
    seen = MACHINE_FILES.opened[before:]
    del MACHINE_FILES.opened[before:]
    assert seen == ["/etc/nodegate/profile.json"]


def test_health_with_the_local_defaults() -> None:
    """``nodegate health`` with no lock, report or textfile option: the defaults."""
    done = run_cli("sim", "run", "h100-hgx", "--", sys.executable, "-m", "nodegate.cli",
                   "health", "--profile", "sim-h100-hgx", "--checks", "gpu", "--quiet")
    assert done.returncode == 0, done.stderr
    assert Path(os.environ["NODEGATE_REPORT_DIR"], "quick-latest.json").is_file()


HOLDER = textwrap.dedent("""
    import fcntl, os, sys, time
    fd = os.open("/run/nodegate.lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, b"4242\\n")
    print("held", flush=True)
    time.sleep(300)
""")


def test_the_suite_passes_while_another_run_holds_the_machine_lock(tmp_path: Path) -> None:
    """main: "another nodegate battery run holds /run/nodegate.lock" for every test using
    the defaults. Here /run is a private tmpfs of a mount namespace, so the lock held is the
    namespace's, never the machine's."""
    if os.geteuid() != 0:
        pytest.skip("needs root for a mount namespace with a private /run")
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs tmpfs /run"],
                           capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a mount namespace here: {probe.stderr!r}")
    holder = tmp_path / "holder.py"
    holder.write_text(HOLDER)
    test = f"{Path(__file__).relative_to(ROOT)}::test_health_with_the_local_defaults"
    script = (f"mount -t tmpfs tmpfs /run && {{ {sys.executable} {holder} > {tmp_path}/held "
              f"& echo $! > {tmp_path}/pid; }} "
              f"&& while ! grep -q held {tmp_path}/held 2>/dev/null; do sleep 0.1; done "
              f"&& {sys.executable} -m pytest -q -p no:cacheprovider {test}; "
              f"code=$?; kill $(cat {tmp_path}/pid); exit $code")
    env = {k: v for k, v in os.environ.items() if k not in OWN_PATHS}
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "1 passed" in done.stdout
