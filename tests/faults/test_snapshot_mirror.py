"""The snapshot beside the knowledge store is written into, not copied whole, every iteration: it holds what
the store holds, survives a daemon killed in the middle of writing it, and an outside reader of it."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from structlog.testing import capture_logs

from mape.knowledge import KnowledgeStore, _iteration
from messages.types import CompletedRescale
from recovery.tracker import ObservedRecovery
from tests.faults.test_knowledge_store import READER, _load, _save_iterations


def _content(path: Path) -> dict[str, list[tuple]]:
    db = sqlite3.connect(path)
    try:
        tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {table: db.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall() for table in sorted(tables)}
    finally:
        db.close()


def test_the_snapshot_holds_what_the_store_holds_and_is_written_in_place(tmp_path):
    path = tmp_path / "k.sqlite"
    snapshot = Path(f"{path}.snapshot")
    store = _save_iterations(path, 1, KnowledgeStore(path, decision_history=3))
    first = snapshot.stat().st_ino
    store = _save_iterations(path, 8, store)  # past the decision history: old rows are deleted in both
    assert snapshot.stat().st_ino == first, "copied whole again instead of written into"
    store.close()
    stored = _content(path)
    assert [row[1] for row in stored["decisions"]] == [6, 7, 8]
    assert _content(snapshot) == stored
    assert not Path(f"{snapshot}-journal").exists()


def test_a_daemon_killed_while_writing_its_snapshot_resumes_from_the_last_whole_iteration(tmp_path, fault):
    path = tmp_path / "k.sqlite"
    snapshot = Path(f"{path}.snapshot")
    _save_iterations(path, 4).close()
    pid = os.fork()
    if pid == 0:  # the daemon's write into the snapshot, killed before its commit
        try:
            db = sqlite3.connect(snapshot, isolation_level=None)
            db.execute("PRAGMA cache_size = 1")  # its pages reach the file before the commit
            db.execute("BEGIN IMMEDIATE")
            db.execute("UPDATE state SET value = '{\"iteration\": 999}' WHERE key = 'loop'")
            db.execute("INSERT OR REPLACE INTO blobs (key, value) VALUES ('x', ?)", (os.urandom(1 << 20),))
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert Path(f"{snapshot}-journal").exists()
    assert _iteration(snapshot) != 4, "read as it lies, the half-written snapshot is not iteration 4"
    for end in ("", "-wal", "-shm"):  # and the store is lost as well
        Path(f"{path}{end}").unlink(missing_ok=True)
    knowledge = _load(path)
    fault("knowledge store", "resumed" if knowledge.iteration == 4 else "lost", "killed writing the snapshot")
    assert knowledge.iteration == 4
    assert knowledge.downtime.observations_s("out")[-1] == 34.0


def test_an_outside_reader_of_the_snapshot_costs_a_copy_not_an_iteration(tmp_path):
    path = tmp_path / "k.sqlite"
    store = _save_iterations(path, 2)
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, f"{path}.snapshot"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert reader.stdout.readline() == "reading\n"
        with capture_logs() as logs:
            _save_iterations(path, 3, store)  # its lock refuses the writes into the snapshot
    finally:
        reader.kill()
        reader.wait()
    copied = [e for e in logs if e["event"] == "knowledge-snapshot-copied"]
    assert copied and "locked" in copied[0]["reason"]
    store.close()
    assert _iteration(Path(f"{path}.snapshot")) == 3
    assert _content(Path(f"{path}.snapshot")) == _content(path)


def test_a_snapshot_deleted_while_the_daemon_runs_is_written_again_at_the_next_save(tmp_path):
    path = tmp_path / "k.sqlite"
    snapshot = Path(f"{path}.snapshot")
    store = _save_iterations(path, 2)
    snapshot.unlink()  # an operator tidying up
    with capture_logs() as logs:
        _save_iterations(path, 3, store)
    store.close()
    assert _iteration(snapshot) == 3 and _content(snapshot) == _content(path)
    assert [e["reason"] for e in logs if e["event"] == "knowledge-snapshot-copied"] == [
        "the snapshot was removed or replaced"
    ]


def test_journal_rows_reach_the_snapshot_in_the_same_iteration(tmp_path):
    path = tmp_path / "k.sqlite"
    store = _save_iterations(path, 1)
    knowledge = store.load()
    knowledge.iteration += 1
    knowledge.remember_rescales((CompletedRescale(100.0, 130.0, "job"),))
    knowledge.new_recoveries.append(ObservedRecovery(100.0, "out", 30.0, 75.0, 90.0, 600.0, True, True))
    store.save(knowledge, None)
    store.close()
    assert len(_content(Path(f"{path}.snapshot"))["recoveries"]) == 1
    assert _content(Path(f"{path}.snapshot")) == _content(path)
