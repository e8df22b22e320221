"""Knowledge: what the loop has learned, and its durable store.

SQLite gives atomic, crash-safe commits (a `kill -9` at any moment leaves either the previous or the new
iteration's state, never a torn file), so each iteration is saved in one transaction.
"""

from __future__ import annotations

import json
import sqlite3
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capacity.model import CapacityModel, CapacitySettings
from forecasting.online import ModelSource, WorkloadForecaster
from forecasting.types import ForecastSettings
from mape.types import Decision
from memory.history import OperatorDecision
from memory.knowledge import MemoryKnowledge
from recovery.downtime import DowntimeModel
from recovery.monitor import RecoveryMonitor
from recovery.tracker import ObservedRecovery

RECENT_DECISIONS = 100
MODEL_BLOB = "forecaster_model"


@dataclass(frozen=True)
class KnowledgeSettings:
    """How to build each learned model, fresh or from its saved state."""

    capacity: CapacitySettings = field(default_factory=CapacitySettings)
    forecast: ForecastSettings = field(default_factory=ForecastSettings)
    downtime_out_s: float = 30.0
    downtime_in_s: float = 15.0
    downtime_window: int = 20
    anomaly_k: float = 1.0
    observe_timeout_s: float | None = None
    executor: Callable[[], Executor | None] = lambda: None
    """Runs fits and recovery watches off the loop: None = a thread each; an inline one in simulations."""
    model_source: Callable[[], ModelSource | None] = lambda: None
    """Where the forecaster finds retrained models (the registry, forecasting/registry.py); None = none."""


@dataclass
class Knowledge:
    """Everything that must survive a restart of the daemon."""

    capacity: CapacityModel = field(default_factory=CapacityModel)
    forecaster: WorkloadForecaster = field(default_factory=lambda: WorkloadForecaster(ForecastSettings()))
    downtime: DowntimeModel = field(default_factory=DowntimeModel)
    recovery: RecoveryMonitor = field(default_factory=RecoveryMonitor)
    memory: MemoryKnowledge = field(default_factory=MemoryKnowledge)
    """Capacity per memory level and the operators' memory decisions (memory-aware policy only)."""
    iteration: int = 0
    last_time_s: float | None = None
    last_rescale_s: float | None = None
    last_target_scaleout: int | None = None
    recent_decisions: deque[Decision] = field(default_factory=lambda: deque(maxlen=RECENT_DECISIONS))
    new_recoveries: list[ObservedRecovery] = field(default_factory=list)
    """Recoveries observed this iteration: stored with it, then cleared."""

    @classmethod
    def fresh(cls, settings: KnowledgeSettings) -> Knowledge:
        return cls.from_state({}, settings)

    @classmethod
    def from_state(cls, state: dict[str, Any], settings: KnowledgeSettings) -> Knowledge:
        """Rebuild from `to_state()` output; missing parts start fresh."""
        monitor_options = {"timeout_s": settings.observe_timeout_s, "k_std": settings.anomaly_k}
        forecaster_state = state.get("forecaster")
        knowledge = cls(
            capacity=CapacityModel.from_dict(state.get("capacity", {}), settings.capacity),
            forecaster=(
                WorkloadForecaster.from_state(
                    forecaster_state,
                    settings.forecast,
                    settings.executor(),
                    model_source=settings.model_source(),
                )
                if forecaster_state
                else WorkloadForecaster(
                    settings.forecast, settings.executor(), model_source=settings.model_source()
                )
            ),
            downtime=(
                DowntimeModel.from_dict(state["downtime"])
                if "downtime" in state
                else DowntimeModel(settings.downtime_out_s, settings.downtime_in_s, settings.downtime_window)
            ),
            recovery=(
                RecoveryMonitor.from_dict(state["recovery"], settings.executor(), **monitor_options)
                if "recovery" in state
                else RecoveryMonitor(settings.executor(), **monitor_options)
            ),
            memory=MemoryKnowledge.from_dict(state.get("memory", {}), settings.capacity),
        )
        loop = state.get("loop", {})
        knowledge.iteration = int(loop.get("iteration", 0))
        knowledge.last_time_s = loop.get("last_time_s")
        knowledge.last_rescale_s = loop.get("last_rescale_s")
        knowledge.last_target_scaleout = loop.get("last_target_scaleout")
        return knowledge

    def to_state(self, with_forecaster: bool = True) -> dict[str, Any]:
        """JSON-serialisable parts by key; the forecaster's fitted model rides along as bytes."""
        state: dict[str, Any] = {
            "capacity": self.capacity.to_dict(),
            "downtime": self.downtime.to_dict(),
            "recovery": self.recovery.to_dict(),
            "memory": self.memory.to_dict(),
            "loop": {
                "iteration": self.iteration,
                "last_time_s": self.last_time_s,
                "last_rescale_s": self.last_rescale_s,
                "last_target_scaleout": self.last_target_scaleout,
            },
        }
        if with_forecaster:
            state["forecaster"] = self.forecaster.state_dict()
        return state

    def close(self) -> None:
        """Stop background work (pending fits and watches are abandoned; their inputs are saved)."""
        self.forecaster.close()
        self.recovery.close()


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
        self._db.execute("CREATE TABLE IF NOT EXISTS blobs (key TEXT PRIMARY KEY, value BLOB)")
        for table in ("decisions", "recoveries", "memory_decisions"):
            self._db.execute(
                f"CREATE TABLE IF NOT EXISTS {table} (id INTEGER PRIMARY KEY AUTOINCREMENT, "
                "iteration INTEGER NOT NULL, time_s REAL NOT NULL, body TEXT NOT NULL)"
            )

    @property
    def durable(self) -> bool:
        """Whether saving outlives the process (an in-memory store skips the costly model pickles)."""
        return self.path != ":memory:"

    def load(self, settings: KnowledgeSettings | None = None) -> Knowledge:
        """The last committed knowledge, or a fresh one for an empty store."""
        state = {key: json.loads(value) for key, value in self._db.execute("SELECT key, value FROM state")}
        if "forecaster" in state:
            row = self._db.execute("SELECT value FROM blobs WHERE key = ?", (MODEL_BLOB,)).fetchone()
            state["forecaster"]["model"] = row[0] if row else None
        knowledge = Knowledge.from_state(state, settings or KnowledgeSettings())
        rows = self._db.execute(
            "SELECT body FROM decisions ORDER BY id DESC LIMIT ?", (RECENT_DECISIONS,)
        ).fetchall()
        knowledge.recent_decisions.extend(Decision.from_dict(json.loads(body)) for (body,) in reversed(rows))
        return knowledge

    def save(self, knowledge: Knowledge, decision: Decision | None) -> None:
        """Write the iteration's knowledge, decision and observed recoveries in one transaction."""
        state = knowledge.to_state(with_forecaster=self.durable)
        model = state["forecaster"].pop("model", None) if "forecaster" in state else None
        with self._transaction():
            self._db.executemany(
                "INSERT OR REPLACE INTO state (key, value) VALUES (?, ?)",
                [(key, json.dumps(value)) for key, value in state.items()],
            )
            if "forecaster" in state:
                self._db.execute(
                    "INSERT OR REPLACE INTO blobs (key, value) VALUES (?, ?)", (MODEL_BLOB, model)
                )
            if decision is not None:
                self._append("decisions", knowledge.iteration, decision.time_s, decision.to_dict())
                self._db.execute(
                    "DELETE FROM decisions WHERE id <= (SELECT MAX(id) FROM decisions) - ?",
                    (self.decision_history,),
                )
            for recovery in knowledge.new_recoveries:
                self._append("recoveries", knowledge.iteration, recovery.rescale_s, recovery.to_dict())
            for entry in knowledge.memory.history.new_records:
                self._append("memory_decisions", knowledge.iteration, entry.time_s, entry.to_dict())
        knowledge.new_recoveries.clear()
        knowledge.memory.history.new_records.clear()

    def decisions(self) -> list[Decision]:
        """The stored decision history, oldest first."""
        rows = self._db.execute("SELECT body FROM decisions ORDER BY id").fetchall()
        return [Decision.from_dict(json.loads(body)) for (body,) in rows]

    def recoveries(self) -> list[ObservedRecovery]:
        """Every observed recovery, oldest first."""
        rows = self._db.execute("SELECT body FROM recoveries ORDER BY id").fetchall()
        return [ObservedRecovery.from_dict(json.loads(body)) for (body,) in rows]

    def memory_decisions(self, operator: str | None = None) -> list[OperatorDecision]:
        """Every operator's memory-relevant reconfigurations (or one operator's), oldest first."""
        rows = self._db.execute("SELECT body FROM memory_decisions ORDER BY id").fetchall()
        entries = [OperatorDecision.from_dict(json.loads(body)) for (body,) in rows]
        return [e for e in entries if operator is None or e.operator == operator]

    def close(self) -> None:
        self._db.close()

    def _append(self, table: str, iteration: int, time_s: float, body: dict) -> None:
        self._db.execute(
            f"INSERT INTO {table} (iteration, time_s, body) VALUES (?, ?, ?)",
            (iteration, time_s, json.dumps(body)),
        )

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
