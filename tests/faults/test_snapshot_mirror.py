"""The snapshot beside the knowledge store is written into, not copied whole, every iteration: it holds what
the store holds, survives a daemon killed in the middle of writing it, and an outside reader of it."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from mape.knowledge_store import KnowledgeStore, StoreUnusable, _iteration
from messages.types import CompletedRescale, Decision
from recovery.tracker import ObservedRecovery
from tests.daemon.test_lifecycle_start import read_only
from tests.faults.test_knowledge_store import READER, _load, _save_iterations


def _content(path: Path) -> dict[str, list[tuple]]:
    db = sqlite3.connect(path)
    try:
        tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {table: db.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall() for table in sorted(tables)}
    finally:
        db.close()


def _copies(monkeypatch) -> list[int]:
    """Counts the snapshot's whole copies."""
    copies: list[int] = []
    copy = KnowledgeStore._snapshot

    def counted(store: KnowledgeStore) -> None:
        copies.append(1)
        copy(store)

    monkeypatch.setattr(KnowledgeStore, "_snapshot", counted)
    return copies


def test_the_snapshot_holds_what_the_store_holds_and_is_written_in_place(tmp_path, monkeypatch):
    path = tmp_path / "k.sqlite"
    snapshot = Path(f"{path}.snapshot")
    copies = _copies(monkeypatch)
    store = _save_iterations(path, 8, KnowledgeStore(path, decision_history=3))  # old rows deleted in both
    assert len(copies) == 1, "copied whole at the first save only, then written into"
    store.close()
    stored = _content(path)
    assert [row[1] for row in stored["decisions"]] == [6, 7, 8]
    assert _content(snapshot) == stored
    assert not Path(f"{snapshot}-journal").exists()


def test_a_daemon_killed_in_the_middle_of_its_snapshot_write_resumes_from_a_whole_iteration(tmp_path, fault):
    """Killed after the iteration's state went into the snapshot, before its decision did."""
    path = tmp_path / "k.sqlite"
    pid = os.fork()
    if pid == 0:
        try:
            store = _save_iterations(path, 4)
            append = KnowledgeStore._append

            def killed_at_the_snapshot(self, db, *rest):
                if db is self._mirror:
                    os._exit(0)
                append(self, db, *rest)

            KnowledgeStore._append = killed_at_the_snapshot
            _save_iterations(path, 5, store)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    for end in ("", "-wal", "-shm"):  # and the store is lost as well
        Path(f"{path}{end}").unlink(missing_ok=True)
    store = KnowledgeStore(path)
    knowledge = store.load()
    newest = store._db.execute("SELECT MAX(iteration) FROM decisions").fetchone()[0]
    store.close()
    fault(
        "knowledge store", "resumed" if knowledge.iteration == newest == 4 else "lost", "killed mid-snapshot"
    )
    assert knowledge.iteration == newest == 4


def _half_written_snapshot(path: Path) -> Path:
    """A store of 4 iterations whose snapshot a kill left with pages of an uncommitted write in it."""
    snapshot = Path(f"{path}.snapshot")
    _save_iterations(path, 4).close()
    pid = os.fork()
    if pid == 0:
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
    return snapshot


def test_a_half_written_snapshot_a_kill_left_is_rolled_back_at_the_start(tmp_path, fault):
    path = tmp_path / "k.sqlite"
    _half_written_snapshot(path)
    knowledge = _load(path)
    fault("knowledge store", "resumed" if knowledge.iteration == 4 else "lost", "killed writing the snapshot")
    assert knowledge.iteration == 4
    assert knowledge.downtime.observations_s("out")[-1] == 34.0


def test_a_half_written_snapshot_that_cannot_be_rolled_back_stops_the_start_in_one_line(tmp_path, fault):
    path = tmp_path / "k.sqlite"
    snapshot = _half_written_snapshot(path)
    with read_only(snapshot), pytest.raises(StoreUnusable) as refused:
        KnowledgeStore(path)
    message = str(refused.value)
    fault(
        "knowledge store",
        "clear-error" if "cannot be rolled back" in message else "lost",
        "snapshot unrollable",
    )
    assert str(snapshot) in message and "cannot be rolled back" in message and "\n" not in message
    assert _load(path).iteration == 4  # writable again: rolled back, resumed


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
    assert len([e for e in logs if e["event"] == "knowledge-snapshot-copied"]) == 1


def test_a_save_that_failed_after_the_store_committed_is_made_good_in_the_snapshot(tmp_path, monkeypatch):
    """The store holds the iteration, the snapshot not (the loop goes on after a failed save)."""
    path = tmp_path / "k.sqlite"
    store = _save_iterations(path, 2)
    mirrored = KnowledgeStore._mirrored
    failures = [OSError(28, "No space left on device")]

    def fails_once(self, write):
        if failures:
            raise failures.pop()
        mirrored(self, write)

    monkeypatch.setattr(KnowledgeStore, "_mirrored", fails_once)
    knowledge = store.load()
    knowledge.iteration += 1
    with pytest.raises(OSError):
        store.save(knowledge, Decision(180.0, 1, 1, "hold"))
    knowledge.iteration += 1
    store.save(knowledge, Decision(240.0, 1, 1, "hold"))
    store.close()
    assert _content(Path(f"{path}.snapshot")) == _content(path)


def test_a_journal_table_created_outside_a_save_reaches_the_snapshot(tmp_path):
    path = tmp_path / "k.sqlite"
    store = _save_iterations(path, 2)
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE memory_decisions (id INTEGER PRIMARY KEY, what TEXT)")  # another program's
    db.commit()
    db.close()
    assert store.records("memory") == [] and store.records("latency") == []
    _save_iterations(path, 3, store)
    store.close()
    assert "memory_decisions_unreadable_1" in _content(path)
    assert _content(Path(f"{path}.snapshot")) == _content(path)


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
