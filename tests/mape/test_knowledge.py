"""The knowledge store: everything learned comes back after a restart."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from capacity.model import valid_windows
from mape.knowledge import Knowledge, KnowledgeSettings
from mape.knowledge_store import KnowledgeStore
from messages.types import Decision, WorkerSeries
from recovery.tracker import ObservedRecovery


def _learned_knowledge() -> Knowledge:
    knowledge = Knowledge.fresh(KnowledgeSettings())
    stamps = np.arange(12) * 5.0
    workers = tuple(
        WorkerSeries(f"tm-{i}", stamps, np.linspace(0.3, 0.6, 12) + 0.01 * i, np.linspace(20e3, 45e3, 12))
        for i in range(3)
    )
    windows = valid_windows(workers, None, 60.0, 0.0)
    knowledge.capacity.learn(windows, 60.0, 3)
    knowledge.capacity.estimate(windows, 3, 6, 60.0)
    knowledge.iteration, knowledge.last_time_s = 7, 420.0
    knowledge.record_rescale(120.0, 2)
    knowledge.record_rescale(300.0, 3)
    knowledge.track_record.observe(300.0, 2, {2: 20e3, 3: 33e3}, trusted=True)
    knowledge.track_record.observe(360.0, 3, {2: 20e3, 3: 30e3}, trusted=True)  # pending: 33k for 3
    return knowledge


def test_round_trip_restores_capacity_and_loop_state(tmp_path: Path):
    path = tmp_path / "k.sqlite"
    store = KnowledgeStore(path)
    knowledge = _learned_knowledge()
    decision = Decision(420.0, 3, 4, "smallest-sufficient", ("because",))
    store.save(knowledge, decision)
    store.close()

    restored = KnowledgeStore(path).load()
    saved, loaded = knowledge.to_state(), restored.to_state()
    for part in ("loop", "capacity", "downtime", "recovery", "track_record"):
        assert loaded[part] == saved[part], part
    assert list(restored.recent_decisions) == [decision]
    assert (restored.last_rescale_s, restored.last_target_scaleout) == (300.0, 3)
    assert restored.rescales_since(100.0) == 2 and restored.rescales_since(120.0) == 1  # the budget's record
    assert restored.capacity.workers["tm-1@3"].stats == knowledge.capacity.workers["tm-1@3"].stats
    restored.track_record.observe(480.0, 3, {3: 30e3}, trusted=True)  # the comparison resumes
    assert list(restored.track_record.ratios) == [pytest.approx(1.1)]


def test_forecaster_downtimes_and_observed_recoveries_survive_a_restart(tmp_path: Path):
    path = tmp_path / "k.sqlite"
    store = KnowledgeStore(path)
    knowledge = Knowledge.fresh(KnowledgeSettings())
    stamps = np.arange(0.0, 600.0, 5.0)
    knowledge.forecaster.observe(stamps, 1_000.0 + stamps)
    before = knowledge.forecaster.forecast(600.0)
    knowledge.downtime.observe("out", 42.0)
    observed = ObservedRecovery(300.0, "out", 42.0, 120.0, 100.0, 600.0, True, True)
    knowledge.new_recoveries.append(observed)
    store.save(knowledge, None)
    assert knowledge.new_recoveries == []
    store.close()

    reopened = KnowledgeStore(path)
    restored = reopened.load()
    assert restored.downtime.observations_s("out") == [42.0]
    assert reopened.recoveries() == [observed]
    np.testing.assert_allclose(restored.forecaster.forecast(600.0).rates_rps, before.rates_rps)


def test_an_in_memory_store_skips_the_forecaster(tmp_path: Path):
    store = KnowledgeStore(":memory:")
    store.save(_learned_knowledge(), None)
    assert "forecaster" not in store._db.execute("SELECT group_concat(key) FROM state").fetchone()[0]


def test_decision_history_is_bounded(tmp_path: Path):
    store = KnowledgeStore(tmp_path / "k.sqlite", decision_history=5)
    knowledge = Knowledge.fresh(KnowledgeSettings())
    for i in range(12):
        knowledge.iteration = i
        store.save(knowledge, Decision(float(i), 1, 1, "hold"))
    assert [d.time_s for d in store.decisions()] == [7.0, 8.0, 9.0, 10.0, 11.0]


def test_the_recoveries_and_extension_journals_are_bounded_too(tmp_path: Path):
    """Only the decisions were capped: the soak probe found the recoveries and the memory journal growing by
    a row per rescale for as long as the sidecar runs."""
    from memory.history import OperatorDecision
    from memory.knowledge import MemoryKnowledge
    from recovery.tracker import ObservedRecovery

    store = KnowledgeStore(tmp_path / "k.sqlite", decision_history=5)
    knowledge = Knowledge.fresh(KnowledgeSettings())
    memory = knowledge.extensions.setdefault("memory", MemoryKnowledge())
    for i in range(12):
        knowledge.iteration = i
        knowledge.new_recoveries.append(
            ObservedRecovery(60.0 * i, "out", 20.0, 60.0, 70.0, 600.0, True, True)
        )
        memory.history.new_records.append(
            OperatorDecision("count", 60.0 * i, 2, 3, 0, 0, "long-lived", 0.9, 1e4)
        )
        store.save(knowledge, None)
    assert [r.rescale_s for r in store.recoveries()] == [420.0, 480.0, 540.0, 600.0, 660.0]
    assert [r["time_s"] for r in store.records("memory")] == [420.0, 480.0, 540.0, 600.0, 660.0]


def test_a_failed_transaction_leaves_the_previous_state(tmp_path: Path):
    store = KnowledgeStore(tmp_path / "k.sqlite")
    knowledge = _learned_knowledge()
    store.save(knowledge, None)
    knowledge.iteration = 99
    broken = Decision(1.0, 1, 1, "hold")
    object.__setattr__(broken, "reasons", (object(),))  # not JSON-serialisable
    with pytest.raises(TypeError):
        store.save(knowledge, broken)  # state rows were written first: they must be rolled back
    assert store.load().iteration == 7


def test_store_file_is_a_valid_sqlite_database(tmp_path: Path):
    path = tmp_path / "k.sqlite"
    KnowledgeStore(path).save(_learned_knowledge(), None)
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)


@pytest.mark.parametrize(
    ("stored", "loaded"),
    [(["source", "sink"], ("sink", "source")), ([1, "x"], None), ("ab", None), ([], None)],
)
def test_the_job_a_plan_seeded_the_store_for_survives_a_restart_and_garbage_is_ignored(stored, loaded):
    state = Knowledge.fresh(KnowledgeSettings()).to_state()
    state["loop"]["seeded_for"] = stored
    assert Knowledge.from_state(state, KnowledgeSettings()).seeded_for == loaded
