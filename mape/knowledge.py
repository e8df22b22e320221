"""Knowledge: what the loop has learned, and its durable store.

SQLite gives atomic, crash-safe commits (a `kill -9` at any moment leaves either the previous or the new
iteration's state, never a torn file), so each iteration is saved in one transaction.
"""

from __future__ import annotations

import json
import sqlite3
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from capacity.model import CapacityModel, CapacitySettings
from mape.types import Decision

RECENT_DECISIONS = 100


@dataclass
class Knowledge:
    """Everything that must survive a restart of the daemon."""

    capacity: CapacityModel = field(default_factory=CapacityModel)
    iteration: int = 0
    last_time_s: float | None = None
    last_rescale_s: float | None = None
    last_target_scaleout: int | None = None
    recent_decisions: deque[Decision] = field(default_factory=lambda: deque(maxlen=RECENT_DECISIONS))

    def loop_state(self) -> dict:
        return {
            "iteration": self.iteration,
            "last_time_s": self.last_time_s,
            "last_rescale_s": self.last_rescale_s,
            "last_target_scaleout": self.last_target_scaleout,
        }


class KnowledgeStore:
    """Persists `Knowledge` in a SQLite file; ':memory:' keeps it for the process only."""

    def __init__(self, path: str | Path, decision_history: int = 10_000) -> None:
        self.path = str(path)
        self.decision_history = decision_history
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("CREATE TABLE IF NOT EXISTS state (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS decisions (id INTEGER PRIMARY KEY AUTOINCREMENT, "
            "iteration INTEGER NOT NULL, time_s REAL NOT NULL, body TEXT NOT NULL)"
        )

    def load(self, capacity_settings: CapacitySettings | None = None) -> Knowledge:
        """The last committed knowledge, or a fresh one for an empty store."""
        state = dict(self._db.execute("SELECT key, value FROM state").fetchall())
        knowledge = Knowledge(capacity=CapacityModel(capacity_settings))
        if "capacity" in state:
            knowledge.capacity = CapacityModel.from_dict(json.loads(state["capacity"]), capacity_settings)
        if "loop" in state:
            loop = json.loads(state["loop"])
            knowledge.iteration = int(loop["iteration"])
            knowledge.last_time_s = loop["last_time_s"]
            knowledge.last_rescale_s = loop["last_rescale_s"]
            knowledge.last_target_scaleout = loop["last_target_scaleout"]
        rows = self._db.execute(
            "SELECT body FROM decisions ORDER BY id DESC LIMIT ?", (RECENT_DECISIONS,)
        ).fetchall()
        knowledge.recent_decisions.extend(Decision.from_dict(json.loads(body)) for (body,) in reversed(rows))
        return knowledge

    def save(self, knowledge: Knowledge, decision: Decision | None) -> None:
        """Write the iteration's knowledge (and its decision) in one transaction."""
        with self._transaction():
            self._db.executemany(
                "INSERT OR REPLACE INTO state (key, value) VALUES (?, ?)",
                [
                    ("capacity", json.dumps(knowledge.capacity.to_dict())),
                    ("loop", json.dumps(knowledge.loop_state())),
                ],
            )
            if decision is not None:
                self._db.execute(
                    "INSERT INTO decisions (iteration, time_s, body) VALUES (?, ?, ?)",
                    (knowledge.iteration, decision.time_s, json.dumps(decision.to_dict())),
                )
                self._db.execute(
                    "DELETE FROM decisions WHERE id <= (SELECT MAX(id) FROM decisions) - ?",
                    (self.decision_history,),
                )

    def decisions(self) -> list[Decision]:
        """The stored decision history, oldest first."""
        rows = self._db.execute("SELECT body FROM decisions ORDER BY id").fetchall()
        return [Decision.from_dict(json.loads(body)) for (body,) in rows]

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
