"""The fleet ledger on both engines (SQLite file, real PostgreSQL): ingest that loses nothing
and counts nothing twice, kills and concurrent ingests, migrations, refusal of a newer
ledger, hostile reports, secrets, and the reads (a card across hosts, a node's history, the
fleet view from the ledger equal to the one from the folder)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from nodegate import cli
from nodegate.ledger import schema as t
from nodegate.ledger.engine import _config, _engine, open_ledger, parse_target, revision_of
from nodegate.ledger.ingest import SEAM_PAUSE
from nodegate.redaction import forget_secrets, remember_secret
from nodegate.remediation.state import ActionRecord, NodeRemediation, Phase
from nodegate.report.model import dumps
from nodegate_lab.synthetic_fleet import synthetic_gpus, synthetic_report
from tests.conftest import ROOT
from tests.ledger.conftest import START, fleet, write

TABLES = ("nodes", "node_names", "boots", "runs", "gpus", "run_gpus", "placements", "results",
          "metrics", "events", "unreadable")


def main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def counts(db: str) -> dict[str, int]:
    engine = _engine(parse_target(db))
    try:
        with engine.connect() as conn:
            return {name: conn.execute(sa.select(sa.func.count()).select_from(
                t.metadata.tables[name])).scalar_one() for name in TABLES}
    finally:
        engine.dispose()


def ingest_cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "nodegate.cli", "ledger", "ingest", *argv],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})}, cwd=ROOT)


def test_ingest_is_idempotent(db: str, tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    distinct = fleet(tmp_path / "r", faults={1: ["nvlink-down@gpu3.link5"]})
    code, out, _ = main(capsys, "ledger", "ingest", str(tmp_path / "r"), "--db", db,
                        "--json")
    assert code == 0
    # every node's latest copy is the same report as its dated original: one row
    assert json.loads(out) | {"ledger": None} == {
        "ledger": None, "read": distinct + 4, "new": distinct, "already": 4, "unreadable": 0}
    first = counts(db)
    assert first["runs"] == distinct and first["nodes"] == 4 and first["gpus"] == 32
    assert first["results"] > 0  # the down link's FAIL, with its evidence
    code, out, _ = main(capsys, "ledger", "ingest", str(tmp_path / "r"), "--db", db)
    assert code == 0
    assert f"{distinct + 4} read, 0 new, {distinct + 4} already there, 0 unreadable" in out
    assert counts(db) == first


def test_a_killed_ingest_leaves_a_consistent_ledger_the_next_one_completes(
        db: str, tmp_path: Path) -> None:
    distinct = fleet(tmp_path / "r", nodes=3, reports=2)  # 6 reports + 3 latest copies
    marker = tmp_path / "paused"
    proc = ingest_cli(str(tmp_path / "r"), "--db", db, "--batch", "4",
                      env={SEAM_PAUSE: str(marker), "NODEGATE_LEDGER_SEAM_BATCH": "2"})
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the ingest never reached its second batch"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    after_kill = counts(db)
    # the first batch committed (4 files in path order: node-0's quick-1, its latest copy,
    # standard-0, node-1's quick-1: 3 reports); the second not at all
    assert after_kill["runs"] == 3
    assert after_kill["run_gpus"] == 3 * 8
    engine = _engine(parse_target(db))
    with engine.connect() as conn:
        orphans = conn.execute(sa.text(
            "SELECT count(*) FROM metrics WHERE run_id NOT IN (SELECT id FROM runs)")).scalar()
        assert orphans == 0
        if engine.dialect.name == "sqlite":
            assert conn.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"
    engine.dispose()
    done = ingest_cli(str(tmp_path / "r"), "--db", db, "--batch", "4")
    out, err = done.communicate(timeout=120)
    assert done.returncode == 0, err
    assert f"{distinct + 3} read, {distinct - 3} new, 6 already there" in out
    assert counts(db)["runs"] == distinct


def test_two_ingests_at_once(db: str, tmp_path: Path) -> None:
    distinct = fleet(tmp_path / "r", nodes=6, reports=3)
    procs = [ingest_cli(str(tmp_path / "r"), "--db", db, "--batch", "3", "--json")
             for _ in range(2)]
    outs = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        outs.append(json.loads(out))
    assert sum(o["new"] for o in outs) == distinct
    assert all(o["new"] + o["already"] == distinct + 6 for o in outs)
    final = counts(db)
    assert final["runs"] == distinct and final["nodes"] == 6 and final["gpus"] == 48
    assert final["run_gpus"] == distinct * 8


def test_a_ledger_of_the_first_schema_is_migrated_forward(db: str, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]
                                                           ) -> None:
    from alembic import command

    engine = _engine(parse_target(db))
    with engine.begin() as conn:
        command.upgrade(_config(conn), "0001")
        conn.execute(sa.text("INSERT INTO nodes (machine) VALUES ('0123456789abcdef0123456789"
                             "abcdef')"))
    with engine.connect() as conn:
        assert revision_of(conn) == "0001"
        assert not sa.inspect(conn).has_table("metric_daily")
    engine.dispose()
    fleet(tmp_path / "r", nodes=2, reports=1)
    code, _, err = main(capsys, "ledger", "ingest", str(tmp_path / "r"), "--db", db)
    assert code == 0, err
    ledger = open_ledger(db, create=False)
    with ledger.read() as conn:
        assert revision_of(conn) == t.HEAD
        assert sa.inspect(conn).has_table("metric_daily")
        machines = set(conn.scalars(sa.select(t.nodes.c.machine)))
    ledger.close()
    assert machines == {"0123456789abcdef0123456789abcdef", "name:node-0", "name:node-1"}


def test_a_ledger_newer_than_the_code_is_refused_unwritten(
        db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fleet(tmp_path / "r", nodes=1, reports=1)
    assert main(capsys, "ledger", "ingest", str(tmp_path / "r"), "--db", db)[0] == 0
    engine = _engine(parse_target(db))
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '9999'"))
    engine.dispose()
    before = counts(db)
    files = sorted(Path(db).parent.glob(Path(db).name + "*")) if "://" not in db else []
    stamps = {f: (f.stat().st_size, f.stat().st_mtime_ns, f.read_bytes()) for f in files}
    fleet(tmp_path / "more", nodes=2, reports=1)
    for argv in (("ledger", "ingest", str(tmp_path / "more"), "--db", db),
                 ("ledger", "node", "node-0", "--db", db), ("report", "--db", db)):
        code, _, err = main(capsys, *argv)
        assert code == 2, (argv, err)
        assert "'9999'" in err and "newer" in err
    assert counts(db) == before
    assert {f: (f.stat().st_size, f.stat().st_mtime_ns, f.read_bytes()) for f in files} == stamps
    engine = _engine(parse_target(db))
    with engine.connect() as conn:
        assert revision_of(conn) == "9999"
    engine.dispose()


def test_hostile_reports_are_error_evidence_and_the_batch_goes_on(
        db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "r"
    distinct = fleet(root, nodes=2, reports=2)
    (root / "node-1" / "garbage.json").write_text("{not json")
    (root / "node-1" / "deep.json").write_text("[" * 100000 + "]" * 100000)
    tampered = synthetic_report("node-0", level="quick", started_at=START, seed="t").to_dict()
    tampered["verdict"] = "PASS"
    tampered["counts"]["PASS"] += 5  # counts that disagree with the results
    (root / "node-0" / "tampered.json").write_text(dumps(tampered))
    os.mkfifo(root / "node-1" / "fifo.json")
    code, out, err = main(capsys, "ledger", "ingest", str(root), "--db", db, "--batch", "3")
    assert code == 1
    assert f"{distinct + 2 + 4} read, {distinct} new, 2 already there, 4 unreadable" in out
    assert "recorded as ERROR evidence" in err
    code, out, _ = main(capsys, "ledger", "node", "node-1", "--db", db, "--json")
    assert code == 0
    (machine,) = json.loads(out)["machines"]
    assert {u["report"] for u in machine["unreadable"]} == {
        "node-1/garbage.json", "node-1/deep.json", "node-1/fifo.json"}
    assert all(u["verdict"] == "ERROR" and u["error"] for u in machine["unreadable"])
    (other,) = json.loads(main(capsys, "ledger", "node", "node-0", "--db", db,
                               "--json")[1])["machines"]
    assert [u["report"] for u in other["unreadable"]] == ["node-0/tampered.json"]
    assert other["runs"]["count"] == 2


def test_secrets_are_never_stored(db: str, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Written as a node that did not know them would (no redaction at the writer): the
    ledger's own filter takes URL userinfo and every remembered credential out."""
    from nodegate.results import CheckResult, Severity, Verdict

    token = "Tok-5ecret-77"
    report = synthetic_report("node-s", level="quick", started_at=START, seed="s")
    bad = CheckResult(check="bmc_reachable", entity="node", measured=None, threshold=None,
                      unit="", verdict=Verdict.ERROR, severity=Severity.CRITICAL,
                      evidence={"url": "https://admin:hunter2pw@bmc.example/redfish/v1",
                                "reply": f"401 for token {token}"})
    report = dataclasses.replace(report, results=(*report.results, bad),
                                 labels={**report.labels,
                                         "note": f"https://ops:hunter2pw@x/{token}"})
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "quick.json").write_text(dumps(report.to_dict()))
    remember_secret(token)
    try:
        code, _, err = main(capsys, "ledger", "ingest", str(tmp_path / "r"), "--db", db)
    finally:
        forget_secrets()
    assert code == 0, err
    engine = _engine(parse_target(db))
    stored = []
    with engine.connect() as conn:
        for table in t.metadata.sorted_tables:
            for row in conn.execute(sa.select(table)):
                stored.extend(str(value) for value in row)
    engine.dispose()
    text = "\n".join(stored)
    assert "bmc.example" in text and "401 for token" in text  # the evidence is there
    assert "hunter2pw" not in text and token not in text
    if "://" not in db:
        for path in Path(db).parent.glob(Path(db).name + "*"):
            raw = path.read_bytes()
            assert b"hunter2pw" not in raw and token.encode() not in raw


def _view(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, _ = main(capsys, "report", *argv, "--json")
    assert code in (0, 1)
    data = json.loads(out)
    for key in ("root", "generated_at", "read_in_full"):  # where it was read from, and when
        data.pop(key)
    return dict(data, code=code)


def _cluster_check(root: Path, nodes: list[str], *, bad: str) -> None:
    """Each node's pair results in a report of its own, as ``nodegate cluster-check``
    writes them (as bench/fleet_report.py makes them)."""
    from nodegate.report.model import build
    from nodegate.results import CheckResult, Severity, Verdict

    start = START + dt.timedelta(days=5)
    for node in nodes:
        results = [CheckResult("cluster_pair_busbw", f"peer-{peer}",
                               12.0 if bad in (node, peer) else 180.0, {"min": 150.0}, "GB/s",
                               Verdict.FAIL if bad in (node, peer) else Verdict.PASS,
                               Severity.CRITICAL, {"pair": sorted([node, peer])})
                   for peer in nodes if peer != node]
        write(build(results, node=node, profile="xe9680-h100", level="standard",
                    started_at=start, duration_s=95.0, backend="nccl",
                    finished_at=start + dt.timedelta(seconds=95),
                    labels={"suite": "cluster-check", "slurm_node": node}),
              root / node / "cluster-check.json")


def test_report_from_the_ledger_equals_report_from_the_folder(
        db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "r"
    fleet(root, nodes=5, reports=3, faults={2: ["slow-gpu@gpu4"], 3: ["nvlink-down@gpu1.link2"]})
    (root / "node-4" / "broken.json").write_text("[]")
    _cluster_check(root, [f"node-{i}" for i in range(4)], bad="node-1")
    assert main(capsys, "ledger", "ingest", str(root), "--db", db)[0] == 1
    from_dir, from_db = _view(capsys, str(root)), _view(capsys, "--db", db)
    assert from_db == from_dir
    assert from_db["code"] == 1 and from_db["unreadable"]
    assert from_db["pairs"]["failing"]  # the cluster check's matrix, from the kept results
    assert any(node["failing"] for node in from_db["nodes"])
    assert sorted(len(node["history"]) for node in from_db["nodes"]) == [3, 4, 4, 4, 4]


def test_a_card_keeps_one_lifetime_across_hosts(db: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A card moves from node-a to node-b: one lifetime, its remediation follows it; a
    rename of a machine keeps the machine's history under both names."""
    root = tmp_path / "r"
    machine = "0123456789abcdef0123456789abcdef"
    cards_a = synthetic_gpus("node-a")
    moved = cards_a["gpu2"]["serial"]
    cards_b = synthetic_gpus("node-b")
    cards_b["gpu5"] = dict(cards_a["gpu2"], pci_bus_id="00000000:AB:00.0")
    first = synthetic_report("node-a", level="quick", started_at=START, seed="a",
                             gpus=cards_a, faults=["nvlink-down@gpu2.link1"])
    write(dataclasses.replace(first, machine_id=machine, sequence=1), root / "a" / "q1.json")
    renamed = synthetic_report("node-a", level="quick", seed="a2", gpus=cards_a,
                               started_at=START + dt.timedelta(days=1),
                               labels={"slurm_node": "node-a-renamed"})
    write(dataclasses.replace(renamed, machine_id=machine, sequence=2), root / "a" / "q2.json")
    write(synthetic_report("node-b", level="quick", seed="b", gpus=cards_b,
                           started_at=START + dt.timedelta(days=3)), root / "b" / "q1.json")
    state = NodeRemediation(node="node-a", phase=Phase.IN_SERVICE, history=[ActionRecord(
        action="reset_gpu", targets=["gpu2"], serials={"gpu2": moved},
        started_at=START + dt.timedelta(hours=2), boot_id=first.boot_id, outcome="done",
        finished_at=START + dt.timedelta(hours=3))])
    (root / "a" / "remediation.json").write_text(json.dumps(state.to_dict()))
    code, out, err = main(capsys, "ledger", "ingest", str(root), "--db", db)
    assert code == 0, err
    code, out, _ = main(capsys, "ledger", "gpu", moved, "--db", db, "--json")
    assert code == 0
    card = json.loads(out)
    assert card["hosts"] == ["node-a", "node-b"]
    assert [(p["host"], p["slot"]) for p in card["placements"]] == [
        ("node-a", "gpu2"), ("node-b", "gpu5")]
    assert card["runs"]["count"] == 3
    assert [f["entity"] for f in card["failures"]] == ["gpu2.link1"]
    assert len(card["remediations"]) == 1
    assert card["remediations"][0]["detail"]["action"] == "reset_gpu"
    code, text, _ = main(capsys, "ledger", "gpu", moved, "--db", db)
    assert code == 0 and "2 host(s), 3 run(s)" in text and "remediations: 1" in text
    code, out, _ = main(capsys, "ledger", "node", "node-a-renamed", "--db", db, "--json")
    assert code == 0
    (history,) = json.loads(out)["machines"]
    assert history["machine"] == machine
    assert [n["name"] for n in history["names"]] == ["node-a", "node-a-renamed"]
    assert history["runs"]["count"] == 2
    code, _, err = main(capsys, "ledger", "gpu", "no-such-serial", "--db", db)
    assert code == 2 and "no-such-serial" in err


def test_retention_keeps_old_metrics_as_daily_aggregates(
        db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fleet(tmp_path / "r", nodes=2, reports=2)
    assert main(capsys, "ledger", "ingest", str(tmp_path / "r"), "--db", db)[0] == 0
    before = counts(db)
    engine = _engine(parse_target(db))
    with engine.connect() as conn:
        key = conn.execute(sa.select(t.metrics.c.key, t.metrics.c.entity,
                                     sa.func.min(t.metrics.c.value),
                                     sa.func.max(t.metrics.c.value), sa.func.count())
                           .group_by(t.metrics.c.key, t.metrics.c.entity)
                           .order_by(t.metrics.c.key, t.metrics.c.entity)).first()
    code, out, _ = main(capsys, "ledger", "prune", "--older-than", "7", "--db", db)
    assert code == 0 and f"{before['metrics']} metric row(s)" in out
    after = counts(db)
    assert after["metrics"] == 0 and after["runs"] == before["runs"]
    with engine.connect() as conn:
        daily = conn.execute(sa.select(sa.func.sum(t.metric_daily.c.n),
                                       sa.func.min(t.metric_daily.c.min),
                                       sa.func.max(t.metric_daily.c.max))
                             .where(t.metric_daily.c.key == key[0],
                                    t.metric_daily.c.entity == key[1])).first()
        assert tuple(daily) == (key[4], key[2], key[3])
        days = set(conn.scalars(sa.select(t.metric_daily.c.day).distinct()))
    engine.dispose()
    assert days == {"2026-11-01", "2026-11-02"}


@pytest.mark.parametrize("target, says", [
    ("mysql://u:pw0rd@h/x", "unsupported database 'mysql'"),
    ("sqlite://", "in-memory"),
    ("/no/such/folder/ledger.sqlite", "folder does not exist"),
    ("postgresql+asyncpg://u@h/x", "psycopg 3"),
])
def test_a_bad_db_is_exit_2_naming_it(target: str, says: str, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "r").mkdir()
    code, _, err = main(capsys, "ledger", "ingest", str(tmp_path / "r"), "--db", target)
    assert code == 2 and says in err
    assert "pw0rd" not in err


def test_a_fifo_or_folder_for_the_ledger_is_refused(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    os.mkfifo(tmp_path / "fifo.sqlite")
    (tmp_path / "r").mkdir()
    for target in (tmp_path / "fifo.sqlite", tmp_path / "r"):
        code, _, err = main(capsys, "ledger", "ingest", str(tmp_path / "r"), "--db",
                            str(target))
        assert code == 2 and "not a regular file" in err and str(target) in err
    (tmp_path / "junk.sqlite").write_text("not a database at all " * 100)
    code, _, err = main(capsys, "ledger", "ingest", str(tmp_path / "r"), "--db",
                        str(tmp_path / "junk.sqlite"))
    assert code == 2 and "junk.sqlite" in err


def test_parsing_in_worker_processes_gives_the_same_ledger(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nodegate.ledger import ingest as ingest_module

    root = tmp_path / "r"
    fleet(root, nodes=3, reports=3, faults={0: ["nvlink-down@gpu3.link5"]})
    (root / "node-2" / "garbage.json").write_text("{")
    monkeypatch.setattr(ingest_module, "POOL_MIN_FILES", 0)
    answers = []
    for jobs in (1, 2):
        db = str(tmp_path / f"{jobs}.sqlite")
        ledger = open_ledger(db)
        done = ingest_module.ingest(ledger, root, batch=4, jobs=jobs)
        ledger.close()
        answers.append((vars(done), counts(db)))
    assert answers[0] == answers[1]
    assert answers[0][0] == {"read": 13, "new": 9, "already": 3, "unreadable": 1}


BLOCKED_RUN = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("sqlalchemy", "alembic", "psycopg"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Block())
from nodegate import cli
sys.exit(cli.main(sys.argv[1:]))
"""


def test_without_the_ledger_extra_it_says_which_extra_and_report_dir_still_runs(
        tmp_path: Path) -> None:
    fleet(tmp_path / "r", nodes=1, reports=1)
    for argv, code in (((("ledger", "ingest", str(tmp_path / "r"), "--db",
                           str(tmp_path / "l.sqlite"))), 3),
                       (("report", "--db", str(tmp_path / "l.sqlite")), 3),
                       (("report", str(tmp_path / "r"), "--json"), 0)):
        proc = subprocess.run([sys.executable, "-c", BLOCKED_RUN, *argv], capture_output=True,
                              text=True, timeout=120, cwd=ROOT, check=False)
        assert proc.returncode == code, (argv, proc.stderr)
        if code == 3:
            assert "pip install 'nodegate[ledger]'" in proc.stderr
    assert not (tmp_path / "l.sqlite").exists()
