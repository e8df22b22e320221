"""The knowledge store: `Knowledge` in a SQLite file, crash-safe, with a snapshot beside it.

SQLite gives atomic, crash-safe commits (a `kill -9` at any moment leaves either the previous or the new
iteration's state, never a torn file), so each iteration is saved in one transaction with
`synchronous=FULL` and checkpointed into the main file before `save` returns: no saved iteration depends
on the `-wal` file surviving. The same writes then go into the snapshot beside it (`<path>.snapshot`,
copied whole with SQLite's backup once, then written into in a transaction of its own); it holds every
saved iteration even when an outside reader kept the checkpoint from completing. A store that fails
SQLite's integrity check or cannot be read back is moved aside (`<path>.corrupt-<time>-<pid>-<id>`) with a
loud warning, and the daemon resumes from the snapshot (or starts fresh); so does a store that is missing,
or behind its snapshot (a lost `-wal`). The snapshot holds every iteration whose `save` returned, so even a
file torn by a kill in the middle of a checkpoint, then a deleted `-wal`, loses nothing saved and never
causes a crash loop. A restore is written beside the store and renamed into place, so a full disk fails it
with one line (`StoreUnusable`) and keeps the snapshot. One daemon per store: a lock file beside the
store's real path (`<path>.lock`, flock) makes a second one, even through a symlink, fail at start with
`StoreBusy`. A SQLite file holding only other tables is someone else's database: refused with
`StoreUnusable`, untouched.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import structlog

from mape.knowledge import RECENT_DECISIONS, Knowledge, KnowledgeSettings, _restored
from messages.types import Decision
from recovery.tracker import ObservedRecovery

MODEL_BLOB = "forecaster_model"
ATTACHED = "attached:"
"""State keys of what the store keeps for others in the same transaction (e.g. the twin's job state)."""
BUSY_TIMEOUT_MS = 5_000
"""How long a write waits for another process's lock on the store (SQLite's busy timeout)."""
TABLES = frozenset({"state", "blobs", "decisions", "recoveries"})
"""The store's own tables: a SQLite file with tables but none of these is not a knowledge store."""


class StoreBusy(RuntimeError):
    """Another daemon holds the knowledge store."""


class StoreUnusable(StoreBusy):
    """The knowledge store cannot be used as it is (someone else's database, a restore the disk refused).
    A `StoreBusy` so that the daemon reports it the same way: one line on stderr, exit 1."""


class KnowledgeStore:
    """Persists `Knowledge` in a SQLite file; ':memory:' keeps it for the process only."""

    def __init__(
        self,
        path: str | Path,
        decision_history: int = 10_000,
        log: structlog.typing.FilteringBoundLogger | None = None,
        *,
        fresh: bool = False,
    ) -> None:
        """`fresh` deletes the store's files (snapshot included) once this daemon holds the lock, never
        while another one does."""
        self.path = str(path)
        self.snapshot_path = Path(f"{self.path}.snapshot")
        """The copy beside the store that a damaged or lost store resumes from (`_mirrored`)."""
        self.decision_history = decision_history
        self.log = log or structlog.get_logger("foresail.knowledge")
        self.attachments: dict[str, Callable[[], dict[str, Any]]] = {}
        """Named state providers saved with every iteration (read back with `attached`)."""
        self._lock_file = None
        self._checkpoint_busy = False
        self._tables: set[str] = set()
        """Tables checked and created on this connection (`_create_table`)."""
        self._mirror: sqlite3.Connection | None = None
        """The snapshot, open for writing each iteration's changes into it as well (see `_mirrored`)."""
        self._mirror_tables: set[str] = set()
        self.damaged: str | None = None
        """What happened to a damaged store found at the start (moved aside), for the console."""
        self.unreadable_parts: tuple[str, ...] = ()
        """Parts the last load could not read and started fresh, for the console."""
        if self.durable:
            if Path(self.path).is_dir():  # never moved aside as damaged: it is someone's folder
                raise IsADirectoryError(
                    errno.EISDIR, "the knowledge store must be a file, not a directory", path
                )
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            real = os.path.realpath(self.path)  # a symlink or another path to the same store: the same lock
            self._lock_file = _lock(Path(f"{real}.lock"), self.path)
        try:
            if fresh and self.durable:
                for file in {*_store_files(self.path), *_store_files(real)}:
                    if not file.is_symlink():  # a link to the store stays: the store it names is deleted
                        file.unlink(missing_ok=True)
            elif self.durable:
                _settle(self.snapshot_path)
                self._resume_if_behind()
            self._db = self._open()
        except BaseException:
            self._release()  # a store that could not be opened is not held
            raise

    def _open(self) -> sqlite3.Connection:
        """The store's connection, after checking its integrity (a damaged file is replaced, see above)."""
        try:
            return self._connect()
        except sqlite3.DatabaseError as error:
            if not _damaged(error):  # the file may be sound: the disk is full, or it cannot be written
                raise StoreUnusable(f"knowledge store {self.path} cannot be opened: {error}") from None
            self._replace_damaged(f"{type(error).__name__}: {error}")
        try:
            return self._connect()
        except sqlite3.Error as error:
            raise StoreUnusable(f"knowledge store {self.path} cannot be opened: {error}") from None

    def _connect(self) -> sqlite3.Connection:
        self._tables.clear()
        db = sqlite3.connect(
            self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
        )
        try:
            listed = db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            tables = {name for (name,) in listed if not name.startswith("sqlite_")}
            if tables and not tables & TABLES:  # checked before anything is written to the file
                raise StoreUnusable(
                    f"{self.path} is not a foresail knowledge store (it holds the tables "
                    f"{', '.join(sorted(tables))}); give knowledge.path a file of its own"
                )
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            check = db.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                raise sqlite3.DatabaseError(f"integrity check failed: {check}")
            for table in ("state", "blobs", "decisions", "recoveries"):
                self._create_table(db, table, self._tables)
        except BaseException:
            db.close()
            raise
        return db

    def _replace_damaged(self, reason: str) -> None:
        """Move the damaged store aside and put the last good snapshot (if any) in its place."""
        if not self.durable:
            raise sqlite3.DatabaseError(reason)
        self._close_mirror()
        aside = self._move_aside()
        restored = self._snapshot_sound()
        if restored:
            self._restore()
        resumed = "snapshot" if restored else "nothing: starting fresh"
        self.damaged = (
            f"knowledge store {self.path} damaged ({reason}): moved to {aside}; resumed from {resumed}"
        )
        self.log.error(
            "knowledge-store-damaged", path=self.path, reason=reason, moved_to=aside, resumed_from=resumed
        )

    def _move_aside(self) -> str:
        """Keep the store's files for inspection under a name no other move-aside takes."""
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        aside = f"{self.path}.corrupt-{stamp}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.replace(self.path + suffix, aside + suffix)
        return aside

    def _snapshot_sound(self) -> bool:
        return self.snapshot_path.is_file() and _sound(self.snapshot_path)

    def _restore(self) -> None:
        """Put the snapshot in the store's place: copied beside it, checked, renamed, so a full disk fails
        the restore (one line; the next start tries again) without leaving an empty store or losing the
        snapshot."""
        temporary = Path(f"{self.path}.restore.tmp")
        try:
            shutil.copyfile(self.snapshot_path, temporary)
            if not _sound(temporary):
                raise OSError("the copy fails the integrity check")
            for suffix in ("-wal", "-shm"):  # a store's companions must not be applied to another file
                Path(self.path + suffix).unlink(missing_ok=True)
            os.replace(temporary, self.path)
        except OSError as error:
            temporary.unlink(missing_ok=True)
            raise StoreUnusable(
                f"knowledge store {self.path} cannot be restored from {self.snapshot_path} ({error.strerror or error}); "
                "the snapshot is kept: fix the cause (e.g. free disk space) and start again"
            ) from None

    def _resume_if_behind(self) -> None:
        """Resume from a sound snapshot when the store is missing, or holds fewer iterations than it (its
        `-wal` lost while an outside reader had kept the checkpoint from completing): not overwrite it."""
        snapshot = self.snapshot_path
        if not snapshot.is_file():
            return
        missing = not Path(self.path).exists()
        wal = Path(f"{self.path}-wal")
        behind = (
            not missing
            and (not wal.exists() or wal.stat().st_size == 0)  # with its -wal the store is current
            and 0 <= _iteration(self.path) < _iteration(snapshot)
        )
        if not (missing or behind) or not _sound(snapshot):
            return
        reason = (
            "the store is missing" if missing else f"the store is behind it (moved to {self._move_aside()})"
        )
        self._restore()
        self.log.warning("knowledge-store-resumed-from-snapshot", path=self.path, reason=reason)

    @property
    def durable(self) -> bool:
        """Whether saving outlives the process (an in-memory store skips the costly model pickles)."""
        return self.path != ":memory:"

    def load(self, settings: KnowledgeSettings | None = None) -> Knowledge:
        """The last committed knowledge, or a fresh one for an empty store. A part that cannot be read is
        taken from the snapshot where the snapshot reads whole (the store moved aside as damaged), else that
        part alone starts fresh, said (another version's forecaster state is in both). A store whose
        content cannot be read back at all is treated as damaged (moved aside; the snapshot or a fresh
        start)."""
        settings = settings or KnowledgeSettings()
        try:
            return self._load(self._db, settings, strict=True)
        except Exception as error:
            if not self.durable:
                return self._load(self._db, settings)
            reason = f"unreadable content: {type(error).__name__}: {error}"
        if self._snapshot_reads_whole(settings):
            self._db.close()
            self._replace_damaged(reason)
            self._db = self._open()
        try:
            return self._load(self._db, settings)
        except Exception as error:
            self._db.close()
            self._replace_damaged(f"unreadable content: {type(error).__name__}: {error}")
            self._db = self._open()
        try:
            return self._load(self._db, settings)
        except Exception as again:  # the snapshot is unreadable too: start from nothing
            self._db.close()
            self.snapshot_path.unlink(missing_ok=True)
            self._replace_damaged(f"snapshot unreadable: {type(again).__name__}: {again}")
            self._db = self._open()
            return self._load(self._db, settings)

    def _snapshot_reads_whole(self, settings: KnowledgeSettings) -> bool:
        """Whether the snapshot is sound and every part of it can be read."""
        if not self._snapshot_sound():
            return False
        db = _read_only(self.snapshot_path)
        try:
            self._load(db, settings, strict=True).close()
        except Exception:  # whatever fails the strict read: the snapshot is no better than the store
            return False
        finally:
            db.close()
        return True

    def _load(self, db: sqlite3.Connection, settings: KnowledgeSettings, strict: bool = False) -> Knowledge:
        """Read part by part: a part that cannot be read raises when `strict`, else it is said and starts
        fresh, the rest kept (`Knowledge.from_state`); a decision that cannot be read is dropped, said."""
        log = self.log.bind(path=self.path)
        state = {}
        for key, value in db.execute("SELECT key, value FROM state"):
            if not key.startswith(ATTACHED):
                state[key] = _restored({key: value}, key, json.loads, lambda: None, None if strict else log)
        if isinstance(state.get("forecaster"), dict):
            row = db.execute("SELECT value FROM blobs WHERE key = ?", (MODEL_BLOB,)).fetchone()
            state["forecaster"]["model"] = row[0] if row else None
        unreadable: list[str] = []
        knowledge = Knowledge.from_state(state, settings, log, strict=strict, unreadable=unreadable)
        self.unreadable_parts = tuple(unreadable)
        rows = db.execute(
            "SELECT body FROM decisions ORDER BY id DESC LIMIT ?", (RECENT_DECISIONS,)
        ).fetchall()
        knowledge.recent_decisions.extend(_decisions([body for (body,) in reversed(rows)], log))
        return knowledge

    def attached(self, name: str) -> dict[str, Any] | None:
        """The state an attachment saved with the last iteration (None: never saved, or unreadable: said)."""
        row = self._db.execute("SELECT value FROM state WHERE key = ?", (ATTACHED + name,)).fetchone()
        try:
            return json.loads(row[0]) if row else None
        except (ValueError, TypeError, RecursionError) as error:  # damaged: every restart crashed on it
            self.log.warning("attached-state-unreadable", path=self.path, name=name, error=repr(error)[:200])
            return None

    def save(self, knowledge: Knowledge, decision: Decision | None) -> None:
        """Write the iteration's knowledge, decision and observed recoveries in one transaction."""
        state = knowledge.to_state(with_forecaster=self.durable)
        model = state["forecaster"].pop("model", None) if "forecaster" in state else None
        state.update({ATTACHED + name: provide() for name, provide in self.attachments.items()})
        rows = [(key, json.dumps(value)) for key, value in state.items()]
        journals = (
            [("decisions", knowledge.iteration, decision.time_s, decision.to_dict())] if decision else []
        )
        journals += [
            ("recoveries", knowledge.iteration, r.rescale_s, r.to_dict()) for r in knowledge.new_recoveries
        ]
        journals += [
            (_journal(name), knowledge.iteration, record.time_s, record.to_dict())
            for name, extension in knowledge.extensions.items()
            for record in extension.new_records
        ]

        def write(db: sqlite3.Connection, tables: set[str]) -> None:
            db.executemany("INSERT OR REPLACE INTO state (key, value) VALUES (?, ?)", rows)
            if "forecaster" in state:
                db.execute("INSERT OR REPLACE INTO blobs (key, value) VALUES (?, ?)", (MODEL_BLOB, model))
            for table, iteration, time_s, body in journals:
                self._create_table(db, table, tables)
                self._append(db, table, iteration, time_s, body)

        try:
            with self._transaction(self._db, self._tables):
                write(self._db, self._tables)
            if self.durable:
                self._checkpoint()
                self._mirrored(write)
        except BaseException:
            self._close_mirror()  # the snapshot may lack this iteration: the next save copies it whole
            raise
        knowledge.new_recoveries.clear()
        for extension in knowledge.extensions.values():
            extension.new_records.clear()

    def _checkpoint(self) -> None:
        """Move the committed iteration from the `-wal` into the store's file, unless a reader holds it."""
        self._db.execute("PRAGMA busy_timeout = 0")  # waiting does not end a reader's transaction
        try:
            busy = self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        finally:
            self._db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if busy and not self._checkpoint_busy:
            self.log.warning(
                "knowledge-store-checkpoint-busy",
                path=self.path,
                reason="another process reads the store: the last iterations stay in its -wal (the "
                "snapshot holds them)",
            )
        self._checkpoint_busy = bool(busy)

    def _mirrored(self, write: Callable[[sqlite3.Connection, set[str]], None]) -> None:
        """Bring the snapshot (the fallback for a damaged or lost store) to the iteration just saved.

        Copying the whole store every iteration wrote its size again each time (~6 MB a minute once
        `decision_history` fills), so the snapshot is copied once, then the same writes go into it in a
        transaction of its own: a few pages an iteration. It keeps a rollback journal (no `-wal`: the file
        holds all it has committed, as a copy must); a journal left by a crash is rolled back at the next
        start (`_settle`). Any failure in it (an outside reader's lock, a full disk, the snapshot deleted
        or replaced: SQLite refuses to write a file no longer at its path) falls back to a copy, and so
        does the save after one that failed once the store had committed (`save`).
        """
        if self._mirror is not None:
            try:
                with self._transaction(self._mirror, self._mirror_tables):
                    write(self._mirror, self._mirror_tables)
                return
            except sqlite3.Error as error:
                self.log.info(
                    "knowledge-snapshot-copied", path=self.path, reason=f"{type(error).__name__}: {error}"
                )
                self._close_mirror()
        self._snapshot()
        mirror = None
        try:
            mirror = sqlite3.connect(
                self.snapshot_path, timeout=0, isolation_level=None, check_same_thread=False
            )
            mirror.execute("PRAGMA journal_mode=DELETE")
            mirror.execute("PRAGMA synchronous=FULL")
        except sqlite3.Error:
            if mirror is not None:
                mirror.close()
            return  # the copy stands; the next save copies again
        self._mirror, self._mirror_tables = mirror, set()

    def _close_mirror(self) -> None:
        if self._mirror is not None:
            self._mirror.close()
            self._mirror = None

    def _snapshot(self) -> None:
        """A copy of the store beside it, renamed into place: SQLite's backup copies what was committed,
        even what a busy checkpoint left in the `-wal`."""
        temporary = Path(f"{self.path}.snapshot.tmp")
        temporary.unlink(missing_ok=True)
        target = sqlite3.connect(temporary)
        try:
            self._db.backup(target)
        except BaseException:
            target.close()
            temporary.unlink(missing_ok=True)
            raise
        target.close()
        os.replace(temporary, self.snapshot_path)

    def decisions(self) -> list[Decision]:
        """The stored decision history, oldest first."""
        rows = self._db.execute("SELECT body FROM decisions ORDER BY id").fetchall()
        return [Decision.from_dict(json.loads(body)) for (body,) in rows]

    def recoveries(self) -> list[ObservedRecovery]:
        """The stored observed recoveries (the last `decision_history`), oldest first."""
        rows = self._db.execute("SELECT body FROM recoveries ORDER BY id").fetchall()
        return [ObservedRecovery.from_dict(json.loads(body)) for (body,) in rows]

    def records(self, extension: str) -> list[dict]:
        """The stored records of an analysis extension (`ExtensionState.new_records`; the last
        `decision_history`), oldest first."""
        if _journal(extension) not in self._tables:
            self._close_mirror()  # a table created or moved aside here: the next save copies the store whole
        self._create_table(self._db, _journal(extension), self._tables)
        rows = self._db.execute(f"SELECT body FROM {_journal(extension)} ORDER BY id").fetchall()
        return [json.loads(body) for (body,) in rows]

    def close(self) -> None:
        self._close_mirror()
        self._db.close()
        self._release()

    def _release(self) -> None:
        if self._lock_file is not None:
            self._lock_file.close()  # releases the lock
            self._lock_file = None

    def _create_table(self, db: sqlite3.Connection, table: str, tables: set[str]) -> None:
        """Create one of the store's tables where it is missing. A table of that name with other columns
        (edited by hand, written by another program) is renamed aside and said (once: the snapshot, a copy
        of the store, follows quietly): left in place, every save would fail on it from then on, the
        knowledge of the iterations after it lost."""
        if table in tables:  # checked once per connection (each has its own set), not at every save
            return
        columns = _COLUMNS.get(table, _JOURNAL_COLUMNS)
        found = tuple(row[1] for row in db.execute(f"PRAGMA table_info({table})"))
        if found and found != tuple(column.split()[0] for column in columns):
            aside = _free_table_name(db, f"{table}_unreadable")
            db.execute(f"ALTER TABLE {table} RENAME TO {aside}")
            if db is not self._mirror:
                self.log.error(
                    "knowledge-store-table-moved-aside",
                    path=self.path,
                    table=table,
                    columns=list(found),
                    moved_to=aside,
                )
        db.execute(f"CREATE TABLE IF NOT EXISTS {table} ({', '.join(columns)})")
        tables.add(table)

    def _append(self, db: sqlite3.Connection, table: str, iteration: int, time_s: float, body: dict) -> None:
        """A row of a journal (decisions, recoveries, an extension's records), the oldest beyond
        `decision_history` dropped: a sidecar runs for months, and these are the audit's, not the plan's."""
        db.execute(
            f"INSERT INTO {table} (iteration, time_s, body) VALUES (?, ?, ?)",
            (iteration, time_s, json.dumps(body)),
        )
        db.execute(
            f"DELETE FROM {table} WHERE id <= (SELECT MAX(id) FROM {table}) - ?", (self.decision_history,)
        )

    @staticmethod
    @contextmanager
    def _transaction(db: sqlite3.Connection, tables: set[str]) -> Iterator[None]:
        db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            tables.clear()  # a table created in it is gone with it
            raise
        db.execute("COMMIT")


_JOURNAL_COLUMNS = (
    "id INTEGER PRIMARY KEY AUTOINCREMENT",
    "iteration INTEGER NOT NULL",
    "time_s REAL NOT NULL",
    "body TEXT NOT NULL",
)
"""A journal of per-iteration records (decisions, recoveries, an extension's records), capped at `decision_history`."""
_COLUMNS = {
    "state": ("key TEXT PRIMARY KEY", "value TEXT NOT NULL"),
    "blobs": ("key TEXT PRIMARY KEY", "value BLOB"),
}


def _damaged(error: sqlite3.DatabaseError) -> bool:
    """Whether an error opening the store says the file is damaged (corrupt, not a database, its integrity
    check failed), not that the disk or the file refuses to be written (full, an I/O error, read-only):
    moving a sound store aside for that would start the daemon afresh on the next open."""
    code = getattr(error, "sqlite_errorcode", None)
    if code is None:
        return not isinstance(error, sqlite3.OperationalError)
    return code & 0xFF in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)


def _free_table_name(db: sqlite3.Connection, stem: str) -> str:
    taken = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    return next(f"{stem}_{n}" for n in range(1, len(taken) + 2) if f"{stem}_{n}" not in taken)


def _journal(extension: str) -> str:
    """The table of an extension's records (`memory_decisions` for the memory extension)."""
    return f"{extension}_decisions"


def _store_files(path: str) -> list[Path]:
    """The store's files, snapshot included (what a fresh start deletes)."""
    suffixes = (
        "",
        "-wal",
        "-shm",
        "-journal",
        ".snapshot",
        ".snapshot-wal",
        ".snapshot-shm",
        ".snapshot-journal",
    )
    return [Path(path + suffix) for suffix in suffixes]


def _decisions(bodies: list[str], log: structlog.typing.FilteringBoundLogger) -> list[Decision]:
    """The stored recent decisions, read one by one: one that cannot be read is dropped with a warning."""
    decisions, dropped = [], 0
    for body in bodies:
        try:
            decisions.append(Decision.from_dict(json.loads(body)))
        except Exception:  # whatever a decision's reader raises costs that decision only
            dropped += 1
    if dropped:
        log.warning("knowledge-store-part-skipped", part="decisions", dropped_entries=dropped)
    return decisions


def _lock(lock_path: Path, store: str):
    """Hold an exclusive lock on `lock_path` for the life of the returned file, or raise `StoreBusy`."""
    handle = lock_path.open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "?"
        handle.close()
        raise StoreBusy(
            f"knowledge store {store} is in use by another foresail daemon (pid {holder}); stop it, or give "
            "this one its own knowledge.path"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


def _settle(snapshot: Path) -> None:
    """Roll back what a daemon killed while writing into its snapshot left (a hot `-journal`): the
    immutable reads below would take the half-written file as it is. A damaged snapshot is left to fail
    `_sound`; one that cannot be rolled back for another reason (it cannot be written) stops the start."""
    if not Path(f"{snapshot}-journal").exists() or not snapshot.is_file():
        return
    try:
        db = sqlite3.connect(snapshot, timeout=BUSY_TIMEOUT_MS / 1000)
        try:
            db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()  # a read rolls a hot journal back
        finally:
            db.close()
    except sqlite3.DatabaseError as error:
        if not _damaged(error):
            raise StoreUnusable(
                f"knowledge store snapshot {snapshot} holds a write a crash cut short, which cannot be rolled "
                f"back ({error}); fix the cause (e.g. the folder's permissions) and start again"
            ) from None


def _sound(path: Path) -> bool:
    """Whether a SQLite file without a live `-wal` (a snapshot, a restore's copy) opens and passes the
    integrity check (read as immutable: nothing is written beside it)."""
    try:
        db = _read_only(path)
        try:
            return db.execute("PRAGMA quick_check").fetchone()[0] == "ok"
        finally:
            db.close()
    except sqlite3.DatabaseError:
        return False


def _iteration(path: str | Path) -> int:
    """The loop iteration a store file without a live `-wal` holds (-1: none readable)."""
    try:
        db = _read_only(path)
        try:
            row = db.execute("SELECT value FROM state WHERE key = 'loop'").fetchone()
        finally:
            db.close()
        return int(json.loads(row[0])["iteration"]) if row else 0
    except (sqlite3.Error, ValueError, KeyError, TypeError, OverflowError):
        return -1


def _read_only(path: str | Path) -> sqlite3.Connection:
    """A read-only connection to a store file without a live `-wal`: immutable, so nothing is written
    beside it (its path percent-encoded: a `?` or `#` in it is part of the name)."""
    return sqlite3.connect(f"{Path(path).absolute().as_uri()}?mode=ro&immutable=1", uri=True)
