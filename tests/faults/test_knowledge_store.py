"""The knowledge store survives: kill -9 (a hundred times), a deleted `-wal`, a damaged file, a second
daemon (also through a symlink or with --fresh), an outside reader, a full disk at a restore, a rescale
entry from a newer version, a journal table edited to other columns, a full disk at the first open, someone else's database, a stored time past the trace, and a resumed twin
that continues the job's backlog."""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import structlog
from structlog.testing import capture_logs

from config.schema import Config
from daemon.runtime import _resume_twin, run_daemon
from mape.knowledge import Knowledge, KnowledgeSettings
from mape.knowledge_store import KnowledgeStore, StoreBusy, StoreUnusable
from messages.types import CompletedRescale, Decision
from simulator.twin import Twin

REPO = Path(__file__).resolve().parents[2]


def _save_iterations(path: Path, count: int, store: KnowledgeStore | None = None) -> KnowledgeStore:
    store = store or KnowledgeStore(path)
    knowledge = Knowledge.fresh(KnowledgeSettings())
    for i in range(1, count + 1):
        knowledge.iteration, knowledge.last_time_s = i, 60.0 * i
        knowledge.downtime.observe("out", 30.0 + i)
        store.save(knowledge, Decision(60.0 * i, 1, 1, "hold"))
    return store


def _killed_after_saving(path: Path, count: int) -> None:
    """A daemon process that saved `count` iterations and was then killed (no close, no clean exit)."""
    pid = os.fork()
    if pid == 0:
        try:
            _save_iterations(path, count)
        finally:
            os._exit(0)  # like kill -9: nothing is closed or flushed by Python
    os.waitpid(pid, 0)


def test_a_deleted_wal_after_a_kill_loses_no_saved_iteration(tmp_path, fault):
    path = tmp_path / "k.sqlite"
    _killed_after_saving(path, 5)
    Path(f"{path}-wal").unlink(missing_ok=True)
    Path(f"{path}-shm").unlink(missing_ok=True)
    knowledge = KnowledgeStore(path).load()
    fault("knowledge store", "resumed" if knowledge.iteration == 5 else "lost", "deleted -wal after kill -9")
    assert knowledge.iteration == 5 and knowledge.downtime.observations_s("out")[-1] == 35.0


def _garbage(path: Path) -> None:
    path.write_bytes(os.urandom(8192))


def _truncated(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])


def _bad_state(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute("UPDATE state SET value = '{\"workers\": 17' WHERE key = 'capacity'")
    db.commit()
    db.close()


def _overwritten_pages(path: Path) -> None:
    with path.open("r+b") as handle:
        handle.seek(4096)
        handle.write(b"\xde\xad" * 2048)


DAMAGE = {
    "garbage": _garbage,
    "truncated": _truncated,
    "bad-state": _bad_state,
    "torn-page": _overwritten_pages,
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_store_is_moved_aside_loudly_and_the_snapshot_resumes(tmp_path, damage, fault):
    path = tmp_path / "k.sqlite"
    _save_iterations(path, 6).close()
    DAMAGE[damage](path)
    with capture_logs() as logs:
        store = KnowledgeStore(path)
        knowledge = store.load()
    store.close()
    errors = [e for e in logs if e["event"] == "knowledge-store-damaged"]
    aside = list(tmp_path.glob("k.sqlite.corrupt-*"))
    outcome = "resumed" if knowledge.iteration == 6 else "lost"
    fault("knowledge store", outcome, f"damaged store: {damage}")
    assert errors and errors[0]["log_level"] == "error" and errors[0]["resumed_from"] == "snapshot"
    assert aside, "the damaged file is kept for inspection"
    assert knowledge.iteration == 6  # the snapshot holds every saved iteration


def test_a_damaged_store_without_a_good_snapshot_starts_fresh(tmp_path, fault):
    path = tmp_path / "k.sqlite"
    _save_iterations(path, 3).close()
    _garbage(path)
    _garbage(Path(f"{path}.snapshot"))
    with capture_logs() as logs:
        knowledge = KnowledgeStore(path).load()
    fault("knowledge store", "held" if knowledge.iteration == 0 else "crashed", "damaged store and snapshot")
    assert knowledge.iteration == 0
    assert [e["resumed_from"] for e in logs if e["event"] == "knowledge-store-damaged"] == [
        "nothing: starting fresh"
    ]


def test_a_second_daemon_on_the_same_store_exits_with_a_clear_message(tmp_path, fault, capsys):
    path = tmp_path / "k.sqlite"
    first = KnowledgeStore(path)  # a running daemon holds it
    config = Config.model_validate({"knowledge": {"path": str(path)}, "logging": {"level": "error"}})
    code = run_daemon(config, max_iterations=1)
    err = capsys.readouterr().err
    fault("knowledge store", "clear-error" if code == 1 and "in use" in err else "crashed", "second daemon")
    assert code == 1 and err.count("\n") == 1 and "in use by another foresail daemon" in err
    with pytest.raises(StoreBusy):
        KnowledgeStore(path)
    first.close()
    KnowledgeStore(path).close()  # free again once the first one stops


def test_another_process_holding_the_store_is_refused(tmp_path, capsys):
    """The lock holds across processes (a forked holder stands in for the first daemon)."""
    path = tmp_path / "k.sqlite"
    ready_r, ready_w = os.pipe()
    release_r, release_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            store = KnowledgeStore(path)
            os.write(ready_w, b"x")
            os.read(release_r, 1)
            store.close()
        finally:
            os._exit(0)
    try:
        assert os.read(ready_r, 1) == b"x"
        config = Config.model_validate({"knowledge": {"path": str(path)}, "logging": {"level": "error"}})
        code = run_daemon(config, max_iterations=1)
    finally:
        os.write(release_w, b"x")
        os.waitpid(pid, 0)
    assert code == 1 and f"(pid {pid})" in capsys.readouterr().err
    KnowledgeStore(path).close()  # the holder is gone: free again


def _load(path: Path) -> Knowledge:
    """What a daemon starting on `path` resumes from (the store closed again, its lock released)."""
    store = KnowledgeStore(path)
    try:
        return store.load()
    finally:
        store.close()


def _aside(directory: Path) -> list[Path]:
    """The damaged stores kept for inspection (their -wal/-shm companions left out)."""
    return [p for p in directory.glob("*.corrupt-*") if not p.name.endswith(("-wal", "-shm"))]


def test_a_fresh_start_never_wipes_a_store_another_daemon_holds(tmp_path, fault):
    path = tmp_path / "k.sqlite"
    running = _save_iterations(path, 3)
    with pytest.raises(StoreBusy):
        KnowledgeStore(path, fresh=True)
    running.close()
    kept = _load(path).iteration
    fault("knowledge store", "held" if kept == 3 else "lost", "--fresh while another daemon runs")
    assert kept == 3
    fresh = KnowledgeStore(path, fresh=True)  # nobody holds it now: it starts afresh, snapshot included
    assert fresh.load().iteration == 0 and not Path(f"{path}.snapshot").exists()
    fresh.close()


def test_a_missing_store_resumes_from_its_snapshot(tmp_path, fault):
    path = tmp_path / "k.sqlite"
    _save_iterations(path, 4).close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    with capture_logs() as logs:
        knowledge = _load(path)
    fault(
        "knowledge store", "resumed" if knowledge.iteration == 4 else "lost", "store deleted, snapshot kept"
    )
    assert knowledge.iteration == 4
    assert [e["log_level"] for e in logs if e["event"] == "knowledge-store-resumed-from-snapshot"] == [
        "warning"
    ]


def test_a_second_daemon_through_a_symlink_is_refused(tmp_path, fault):
    path = tmp_path / "k.sqlite"
    first = KnowledgeStore(path)
    link = tmp_path / "link.sqlite"
    link.symlink_to(path)
    try:
        with pytest.raises(StoreBusy, match="in use by another foresail daemon"):
            KnowledgeStore(link)
    finally:
        first.close()
    fault("knowledge store", "clear-error", "second daemon through a symlink")
    KnowledgeStore(link).close()  # free again once the first one stops


READER = (
    "import sqlite3, sys; db = sqlite3.connect(sys.argv[1], isolation_level=None); db.execute('BEGIN'); "
    "db.execute('SELECT count(*) FROM state').fetchone(); print('reading', flush=True); sys.stdin.read()"
)
"""An operator's sqlite3 shell or a backup tool: a read transaction held until it is killed."""


def test_an_outside_reader_then_a_lost_wal_loses_no_saved_iteration(tmp_path, fault):
    path = tmp_path / "k.sqlite"
    store = _save_iterations(path, 2)
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert reader.stdout.readline() == "reading\n"
        with capture_logs() as logs:
            _save_iterations(path, 5, store)  # the checkpoints cannot complete: iterations stay in the -wal
        store.close()
    finally:
        reader.kill()  # no clean close: it would checkpoint the -wal into the store
        reader.wait()
    assert Path(f"{path}-wal").stat().st_size > 0
    Path(f"{path}-wal").unlink()
    Path(f"{path}-shm").unlink(missing_ok=True)
    knowledge = _load(path)
    fault("knowledge store", "resumed" if knowledge.iteration == 5 else "lost", "outside reader, lost -wal")
    assert knowledge.iteration == 5
    busy = [e for e in logs if e["event"] == "knowledge-store-checkpoint-busy"]
    assert [e["log_level"] for e in busy] == ["warning"]  # once, not every iteration


def test_a_restore_the_disk_refuses_is_one_clear_error_and_keeps_the_snapshot(tmp_path, monkeypatch, fault):
    path = tmp_path / "k.sqlite"
    _save_iterations(path, 6).close()
    _garbage(path)

    def disk_full(source, target, *args, **kwargs):
        Path(target).write_bytes(b"")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(target))

    monkeypatch.setattr("mape.knowledge_store.shutil.copyfile", disk_full)
    with pytest.raises(StoreUnusable) as refused:
        KnowledgeStore(path)
    message = str(refused.value)
    assert str(path) in message and "No space left on device" in message and "\n" not in message
    monkeypatch.undo()  # space freed: the next start resumes from the kept snapshot
    knowledge = _load(path)
    fault("knowledge store", "resumed" if knowledge.iteration == 6 else "lost", "disk full at a restore")
    assert knowledge.iteration == 6 and len(_aside(tmp_path)) == 1


def test_two_stores_moved_aside_in_one_second_are_both_kept(tmp_path, monkeypatch):
    path = tmp_path / "k.sqlite"
    second = time.gmtime()
    monkeypatch.setattr(time, "gmtime", lambda *_: second)  # both moves within the same second
    for iterations in (4, 5):
        store = _save_iterations(path, iterations)
        store.close()
        store._move_aside()
    assert len(_aside(tmp_path)) == 2


def test_a_rescale_entry_a_newer_version_wrote_costs_only_itself(tmp_path, fault):
    path = tmp_path / "k.sqlite"
    store = KnowledgeStore(path)
    knowledge = Knowledge.fresh(KnowledgeSettings())
    knowledge.iteration = 7
    knowledge.remember_rescales(
        (CompletedRescale(100.0, 130.0, "job"), CompletedRescale(200.0, 215.0, "job"))
    )
    store.save(knowledge, None)
    store.close()
    first, second = ({**r.__dict__} for r in knowledge.rescales)
    entries = [{**first, "new_field": 1}, {"requested_s": "soon", "granularity": "job"}, second]
    for file in (path, Path(f"{path}.snapshot")):
        db = sqlite3.connect(file)
        db.execute("UPDATE state SET value = ? WHERE key = 'rescales'", (json.dumps(entries),))
        db.commit()
        db.close()
    with capture_logs() as logs:
        loaded = _load(path)
    fault(
        "knowledge store", "resumed" if loaded.iteration == 7 else "lost", "rescale entry of a newer version"
    )
    assert loaded.iteration == 7 and [r.downtime_s for r in loaded.rescales] == [30.0, 15.0]
    skipped = [e for e in logs if e["event"] == "knowledge-store-part-skipped"]
    assert [(e["log_level"], e["dropped_entries"], e["ignored_keys"]) for e in skipped] == [
        ("warning", 1, ["new_field"])
    ]
    assert not _aside(tmp_path)


def test_a_journal_edited_to_other_columns_is_moved_aside_and_saving_goes_on(tmp_path, fault):
    path = tmp_path / "k.sqlite"
    _save_iterations(path, 2).close()
    db = sqlite3.connect(path)
    db.execute("DROP TABLE decisions")
    db.execute("CREATE TABLE decisions (id INTEGER PRIMARY KEY, note TEXT)")
    db.execute("INSERT INTO decisions (note) VALUES ('kept by hand')")
    db.execute("CREATE TABLE memory_decisions (id INTEGER PRIMARY KEY, what TEXT)")
    db.commit()
    db.close()
    with capture_logs() as logs:
        store = _save_iterations(path, 3)
        records = store.records("memory")
    saved = [d.time_s for d in store.decisions()]
    store.close()
    fault(
        "knowledge store",
        "resumed" if saved == [60.0, 120.0, 180.0] else "lost",
        "a journal of other columns",
    )
    assert saved == [60.0, 120.0, 180.0] and records == []
    moved = [(e["table"], e["moved_to"]) for e in logs if e["event"] == "knowledge-store-table-moved-aside"]
    assert moved == [
        ("decisions", "decisions_unreadable_1"),
        ("memory_decisions", "memory_decisions_unreadable_1"),
    ]
    db = sqlite3.connect(path)
    assert db.execute("SELECT note FROM decisions_unreadable_1").fetchall() == [("kept by hand",)]
    db.close()
    assert _load(path).iteration == 3


def test_a_disk_that_refuses_writes_at_the_first_open_moves_nothing_aside(tmp_path, fault):
    """A full disk (here: a file-size limit, which SQLite meets as an I/O error) is no damaged store: the
    sound store and its snapshot stay where they are, and the open fails with one line."""
    path = tmp_path / "k.sqlite"
    _save_iterations(path, 3).close()
    opener = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "from mape.knowledge_store import KnowledgeStore, StoreUnusable\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\n"
        "try:\n"
        f"    KnowledgeStore({str(path)!r})\n"
        "except StoreUnusable as error:\n"
        "    print(error)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", opener], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    refused = "cannot be opened: disk I/O error" in result.stdout
    fault(
        "knowledge store",
        "clear-error" if refused and not _aside(tmp_path) else "moved aside",
        "a full disk at the first open",
    )
    assert refused and result.stdout.count("\n") == 1, result
    assert not _aside(tmp_path)
    assert _load(path).iteration == 3


def test_someone_elses_sqlite_database_is_refused_and_left_untouched(tmp_path, fault, capsys):
    path = tmp_path / "app.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE users (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT)")
    db.execute("INSERT INTO users (name) VALUES ('ada')")
    db.commit()
    db.close()
    before = path.read_bytes()
    config = Config.model_validate({"knowledge": {"path": str(path)}, "logging": {"level": "error"}})
    code = run_daemon(config, max_iterations=1)
    err = capsys.readouterr().err
    fault("knowledge store", "clear-error" if code == 1 else "crashed", "someone else's SQLite database")
    assert code == 1 and err.count("\n") == 1 and f"{path} is not a foresail knowledge store" in err
    assert path.read_bytes() == before and not Path(f"{path}-wal").exists() and not _aside(tmp_path)
    with pytest.raises(StoreUnusable, match="users"):
        KnowledgeStore(path)


def test_a_stored_time_past_the_trace_end_does_not_hang_the_start(tmp_path, fault):
    path = tmp_path / "k.sqlite"
    store = KnowledgeStore(path)
    knowledge = Knowledge.fresh(KnowledgeSettings())
    knowledge.iteration, knowledge.last_time_s = 9, 1e12
    store.save(knowledge, None)
    store.close()
    config = Config.model_validate({"knowledge": {"path": str(path)}, "logging": {"level": "error"}})
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(run_daemon(config, max_iterations=5)), daemon=True)
    thread.start()
    thread.join(60)
    fault("knowledge store", "held" if codes == [0] else "unbounded", "stored time past the trace end")
    assert codes == [0]
    assert KnowledgeStore(path).load().iteration == 9


def test_twin_snapshot_and_restore_continue_the_same_job():
    trace = np.r_[np.full(600, 20_000.0), np.full(1_200, 30_000.0)]
    original = Twin(trace, parallelism=4, seed=3)
    original.advance_to(900)
    original.scale_to(6, 900)
    original.advance_to(910)  # in the middle of the restart
    state = json.loads(json.dumps(original.snapshot()))  # as stored
    resumed = Twin(trace, parallelism=state["parallelism"], seed=3)
    resumed.restore(state)
    assert resumed.backlog_records == original.backlog_records > 0
    assert (resumed.running, resumed.restarts, resumed.now_s) == (original.running, original.restarts, 910.0)
    for t in (950, 1_200, 1_800):
        original.advance_to(t)
        resumed.advance_to(t)
        assert resumed.backlog_records == original.backlog_records
        assert resumed.records_processed == original.records_processed


def test_a_restarted_daemon_finds_the_twins_backlog(tmp_path, fault):
    """kill -9 while records pile up (a job held at 1 worker under load): the next daemon starts from
    that backlog, not from one it re-invents."""
    trace = tmp_path / "trace.csv"
    trace.write_text("second|count\n" + "".join(f"{i}|50000\n" for i in range(0, 7_200, 60)))
    path = tmp_path / "k.sqlite"
    config = Config.model_validate(
        {
            "twin": {"workload": str(trace), "initial_scaleout": 1},
            "scaling": {"min_scaleout": 1, "max_scaleout": 1},
            "forecast": {"min_history_s": 86_400, "max_history_s": 86_400},
            "knowledge": {"path": str(path)},
            "logging": {"level": "error"},
        }
    )
    pid = os.fork()
    if pid == 0:
        try:
            run_daemon(config, max_iterations=10)
        finally:
            os._exit(0)  # no clean save at exit: what kill -9 leaves after the 10th iteration
    os.waitpid(pid, 0)
    store = KnowledgeStore(path)
    saved = store.attached("twin")
    knowledge = store.load()
    store.close()
    backlog = saved["log_end"] - saved["position"]
    assert knowledge.iteration == 10 and backlog > 1e6

    world = _resume_twin(
        config, saved, knowledge.last_target_scaleout, knowledge.last_time_s, structlog.get_logger()
    )
    fault("knowledge store", "resumed" if world.twin.backlog_records == backlog else "lost", "twin backlog")
    assert world.twin.backlog_records == backlog
    assert world.twin.now_s == knowledge.last_time_s


@pytest.mark.parametrize("damage", ["garbage{", "[" * 100_000 + "]" * 100_000], ids=["garbage", "deep"])
def test_a_damaged_twin_state_is_replayed_not_a_crash_at_every_start(tmp_path, damage, fault):
    """json.loads on the stored twin state raised out of every restart; only --fresh (losing the
    knowledge) got past it."""
    path, audit = tmp_path / "k.sqlite", tmp_path / "a.jsonl"
    config = Config.model_validate({"knowledge": {"path": str(path)}, "logging": {"level": "warning"}})
    assert run_daemon(config, max_iterations=2, audit_log=str(audit)) == 0
    db = sqlite3.connect(path)
    db.execute("UPDATE state SET value = ? WHERE key = 'attached:twin'", (damage,))
    db.commit()
    db.close()
    code = run_daemon(config, max_iterations=4, audit_log=str(audit))
    store = KnowledgeStore(path)
    iteration = store.load().iteration
    store.close()
    fault(
        "knowledge store", "resumed" if code == 0 and iteration == 6 else "lost", f"twin state {damage[:8]}"
    )
    assert code == 0 and iteration == 6  # 2 before, 4 after: the knowledge kept
    said = [json.loads(line) for line in audit.read_text().splitlines()]
    assert [e["name"] for e in said if e["event"] == "attached-state-unreadable"] == ["twin"]


@pytest.mark.slow
def test_kill_9_at_random_points_a_hundred_times_loses_nothing(tmp_path, fault):
    result = subprocess.run(
        [sys.executable, "-m", "tests.faults.kill_harness", "--kills", "100", "--seed", "18",
         "--dir", str(tmp_path), "--delete-wal-every", "4"],
        capture_output=True, text=True, timeout=600, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.splitlines()[-1])
    for _ in range(summary["kills"] - summary["lost"]):
        fault("kill -9", "resumed")
    for _ in range(summary["lost"]):
        fault("kill -9", "lost")
    assert summary["lost"] == 0, summary["problems"]
    assert summary["kills_with_progress"] >= 20 and summary["iterations_end"] >= 100  # it really ran
