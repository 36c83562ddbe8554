"""The Soft-RoCE VMs' package repository (``nodegate_lab.rxevm``): what it must hold and how a
guest's root is made to use it, checked on a tree without building or booting anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodegate_lab import rxevm
from roles.network import DISTRO_PACKAGES


def test_the_repository_holds_what_the_network_role_installs_on_debian() -> None:
    assert sorted(rxevm.REPO_PACKAGES) == sorted(DISTRO_PACKAGES["debian"])


def test_the_key_changes_with_the_package_list(monkeypatch: pytest.MonkeyPatch) -> None:
    before = rxevm.repo_dir()
    monkeypatch.setattr(rxevm, "REPO_PACKAGES", (*rxevm.REPO_PACKAGES, "rdmacm-utils"))
    assert rxevm.repo_dir() != before and rxevm.repo_dir().parent == before.parent


def test_install_makes_the_repository_the_only_apt_source(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "debian").mkdir(parents=True)
    (repo / "debian" / "perftest_1_amd64.deb").write_bytes(b"!<arch>\n")
    (repo / "Packages").write_text("Package: perftest\n")
    (repo / ".complete").write_text("x\n")
    root = tmp_path / "root"
    (root / "etc/apt/sources.list.d").mkdir(parents=True)
    (root / "etc/apt/sources.list").write_text("deb http://deb.debian.org/debian bookworm main\n")
    (root / "etc/apt/sources.list.d/other.sources").write_text("Types: deb\n")
    rxevm.install_repo(repo, root)
    guest = root / rxevm.GUEST_REPO
    assert (guest / "Packages").read_text() == "Package: perftest\n"
    assert (guest / "debian" / "perftest_1_amd64.deb").stat().st_mode & 0o777 == 0o644
    assert (guest / "debian").stat().st_mode & 0o777 == 0o755
    assert not (guest / ".complete").exists()
    lines = [line for line in (root / "etc/apt/sources.list").read_text().splitlines()
             if not line.startswith("#")]
    assert lines == [f"deb [trusted=yes] file:/{rxevm.GUEST_REPO} ./"]
    assert list((root / "etc/apt/sources.list.d").iterdir()) == []
