"""The ledger's engines for its tests: a SQLite file per test, and a real PostgreSQL server
started once per session (Debian's ``postgresql``: ``initdb`` and ``pg_ctl`` in a temporary
folder, listening on a Unix socket only), with a fresh database per test. Nothing mocks the
database.

PostgreSQL refuses to run as root: as root (CI) the cluster is made and run by the
``postgres`` user (Debian's package creates it) in a folder it owns; otherwise by the user
running the tests. ``scripts/setup-host.sh`` installs the package (src/nodegate/ledger/
host-packages.txt); without it these tests fail, naming it, rather than skip.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodegate.report import fleet_summary
from nodegate.report.model import NodeReport
from nodegate_lab.synthetic_fleet import synthetic_report

ENGINES = ("sqlite", "postgresql")
START = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)


def _pg_bin() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                   key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit()
                   else 0)
    if not found:
        pytest.fail("PostgreSQL is not installed (Debian package postgresql, in "
                    "src/nodegate/ledger/host-packages.txt: run `make host-setup` as root)")
    return found[-1].parent


class PostgresServer:
    """One cluster; ``url(name)`` makes a new database and gives its URL."""

    def __init__(self, folder: Path, user: str | None) -> None:
        self.folder = folder
        self.user = user
        self._names = itertools.count()
        self.bin = _pg_bin()

    def _run(self, *argv: str) -> None:
        prefix = ["runuser", "-u", self.user, "--"] if self.user else []
        subprocess.run([*prefix, *argv], check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        data = self.folder / "data"
        self._run(str(self.bin / "initdb"), "-D", str(data), "-A", "trust", "-U", "ledger",
                  "-E", "UTF8", "--no-sync")
        self._run(str(self.bin / "pg_ctl"), "-D", str(data), "-l", str(self.folder / "log"),
                  "-w", "-t", "60", "-o",
                  f"-k {self.folder} -c listen_addresses='' -F -c max_connections=50", "start")

    def stop(self) -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.folder / "data"), "-m",
                  "immediate", "-w", "stop")

    def url(self) -> str:
        import sqlalchemy as sa

        name = f"ledger_{os.getpid()}_{next(self._names)}"
        admin = sa.create_engine(self.base("postgres"), isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE {name}")
        admin.dispose()
        return self.base(name)

    def base(self, name: str) -> str:
        return f"postgresql://ledger@/{name}?host={self.folder}"


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    user = None
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
            user = "postgres"
        except KeyError:
            user = "nobody"
    folder = Path(tempfile.mkdtemp(prefix="nodegate-ledger-pg-"))
    if user:
        entry = pwd.getpwnam(user)
        os.chown(folder, entry.pw_uid, entry.pw_gid)
    server = PostgresServer(folder, user)
    try:
        server.start()
        yield server
    finally:
        with contextlib.suppress(subprocess.CalledProcessError, FileNotFoundError):
            server.stop()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(params=ENGINES)
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A ledger target on each engine: a SQLite file path, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "ledger.sqlite")
    server: PostgresServer = request.getfixturevalue("postgres")
    return server.url()


def write(report: NodeReport, path: Path) -> Path:
    """A report as a node writes it (with its fleet summary beside it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return fleet_summary.write_report(report, path)


def fleet(root: Path, nodes: int = 4, reports: int = 3, *, faults: dict[int, list[str]] | None
          = None) -> int:
    """``nodes`` x ``reports`` quick and standard reports below ``root`` (node i's folder
    ``node-i``), a latest copy beside each node's newest; how many distinct reports."""
    count = 0
    for index in range(nodes):
        name = f"node-{index}"
        for run in range(reports):
            level = "quick" if run % 2 else "standard"
            report = synthetic_report(
                name, level=level, started_at=START + dt.timedelta(days=run),
                seed=f"{name}/{run}", samples=5,
                faults=(faults or {}).get(index, []) if run == reports - 1 else ())
            write(report, root / name / f"{level}-{run}.json")
            count += 1
            if run == reports - 1:
                write(report, root / name / f"{level}-latest.json")
    return count
