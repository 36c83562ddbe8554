"""lab.base.bootstrap_tarball: the one image build the lab's base and the md VM share
(mmdebstrap, customise, tar, atomic replace), with the external tools stubbed."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from nodegate.errors import CannotRunError
from nodegate_lab import base


def _fake_run(calls: list[list[str]], debootstrap_rc: int = 0) -> Any:
    def run(cmd: list[str], check: bool = True, timeout: float | None = None,
            **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        if cmd[0] == "mmdebstrap":
            Path(cmd[-2]).mkdir(parents=True)  # the root mmdebstrap fills
            aptopt = Path(cmd[-2]) / base.APTOPT_FILE  # and the options it leaves behind
            aptopt.parent.mkdir(parents=True)
            aptopt.write_text('APT::Install-Recommends "false";\n')
            return subprocess.CompletedProcess(cmd, debootstrap_rc, "I: Base system installed\n",
                                               "" if debootstrap_rc == 0 else "E: no mirror\n")
        if cmd[0] == "tar":
            Path(cmd[cmd.index("-cf") + 1]).write_bytes(b"tar")
        return subprocess.CompletedProcess(cmd, 0, "", "")
    return run


def test_builds_once_then_reuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []
    monkeypatch.setattr(base, "run", _fake_run(calls))
    monkeypatch.setattr(base, "need", lambda *tools: None)
    monkeypatch.setattr(base, "debian_mirror", lambda: "http://mirror.invalid/debian")
    customised: list[Path] = []
    seen_aptopt: list[bool] = []

    def customise(root: Path) -> None:
        customised.append(root)
        seen_aptopt.append((root / base.APTOPT_FILE).exists())

    target = tmp_path / "cache" / "img-abc.tar"
    log = tmp_path / "debootstrap.log"
    got = base.bootstrap_tarball(target, ["openssh-server", "mdadm"], customise, log=log)
    assert got == target and target.read_bytes() == b"tar"
    assert calls[0][:5] == ["mmdebstrap", "--mode=root", "--variant=minbase",
                            '--aptopt=APT::Install-Recommends "false"',
                            "--include=openssh-server,mdadm"]
    assert calls[0][-1] == "http://mirror.invalid/debian"
    assert len(customised) == 1 and customised[0].name == "root"
    assert seen_aptopt == [False]  # the hosts' apt is Debian's own, Recommends included
    assert "Base system installed" in log.read_text()
    assert not target.with_suffix(".partial").exists()
    calls.clear()
    assert base.bootstrap_tarball(target, ["x"], customised.append) == target
    assert calls == []  # cached: nothing runs


def test_a_failed_debootstrap_names_its_last_lines(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []
    monkeypatch.setattr(base, "run", _fake_run(calls, debootstrap_rc=1))
    monkeypatch.setattr(base, "need", lambda *tools: None)
    monkeypatch.setattr(base, "debian_mirror", lambda: "http://mirror.invalid/debian")
    target = tmp_path / "img.tar"
    with pytest.raises(CannotRunError, match=r"mmdebstrap failed \(1\): .*E: no mirror"):
        base.bootstrap_tarball(target, ["x"], lambda root: None)
    assert not target.exists() and [c[0] for c in calls] == ["mmdebstrap"]
