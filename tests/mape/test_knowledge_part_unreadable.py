"""A part of the stored knowledge that cannot be read starts fresh alone, said in one line: the rest is kept
(it used to move the whole store aside, and the snapshot failed the same way)."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from mape.knowledge import CORE_STATE, Knowledge, KnowledgeSettings
from mape.knowledge_store import KnowledgeStore
from messages.types import Decision


@dataclass
class _Counter:
    """A minimal extension state whose reader insists on its key."""

    count: int = 0
    new_records: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"count": self.count}

    @classmethod
    def from_dict(cls, data: dict) -> _Counter:
        return cls(int(data.get("count", 0)))


SETTINGS = KnowledgeSettings(extension_factories={"counter": _Counter.from_dict})


def _knowledge() -> Knowledge:
    knowledge = Knowledge.fresh(SETTINGS)
    knowledge.iteration = 500
    knowledge.cores.seed([(0.2, 0.3), (0.5, 0.6), (0.8, 0.9)])
    knowledge.record_rescale(1000.0, 4)
    knowledge.extensions["counter"].count = 7
    return knowledge


def _kept(knowledge: Knowledge, broken: str) -> None:
    """Every part but `broken` holds what `_knowledge` put in it."""
    if broken != "loop":
        assert knowledge.iteration == 500 and list(knowledge.rescale_times_s) == [1000.0]
    if broken != "cores":
        assert knowledge.cores.stats.n == 3
    if broken != "counter":
        assert knowledge.extensions["counter"].count == 7


def _unreadable(events: list[dict]) -> list[str]:
    return [e["part"] for e in events if e["event"] == "knowledge-store-part-unreadable"]


# (the plausibility ledger reads a wrong type as empty itself)
@pytest.mark.parametrize("part", [p for p in CORE_STATE if p != "plausibility"] + ["counter"])
def test_a_part_of_the_wrong_type_starts_fresh_alone(part):
    state = _knowledge().to_state()
    state[part] = 12345  # a hand edit, or what another version wrote under the key
    with capture_logs() as events:
        knowledge = Knowledge.from_state(state, SETTINGS)
    assert _unreadable(events) == [part]
    _kept(knowledge, part)
    fresh = Knowledge.fresh(SETTINGS).to_state()
    assert knowledge.to_state()[part] == fresh[part]


def _edit(database: str, key: str, edit) -> None:
    db = sqlite3.connect(database)
    (value,) = db.execute("SELECT value FROM state WHERE key = ?", (key,)).fetchone()
    db.execute("UPDATE state SET value = ? WHERE key = ?", (edit(value), key))
    db.commit()
    db.close()


def _forecaster_of_another_version(value: str) -> str:
    return json.dumps({**json.loads(value), "version": 999})


def _cores_truncated(value: str) -> str:
    state = json.loads(value)
    del state["stats"]["c_xy"]
    return json.dumps(state)


@pytest.mark.parametrize(
    ("key", "edit"),
    [
        ("forecaster", _forecaster_of_another_version),  # a downgrade
        ("cores", _cores_truncated),
        ("capacity", lambda value: value[: len(value) // 2]),  # not even JSON
    ],
)
def test_an_unreadable_part_in_the_store_and_its_snapshot_costs_that_part_only(tmp_path: Path, key, edit):
    path = str(tmp_path / "knowledge.db")
    store = KnowledgeStore(path)
    store.save(_knowledge(), Decision(60.0, 1, 2, "smallest-sufficient", ("because",)))
    store.close()
    for database in (path, f"{path}.snapshot"):
        _edit(database, key, edit)

    store = KnowledgeStore(path)
    with capture_logs() as events:
        knowledge = store.load(SETTINGS)
    assert store.damaged is None and not list(tmp_path.glob("*.corrupt-*"))
    assert _unreadable(events) == [key]
    _kept(knowledge, key)
    assert len(knowledge.recent_decisions) == 1
    store.save(knowledge, None)  # the fresh part replaces the unreadable one
    store.close()
    store = KnowledgeStore(path)
    with capture_logs() as events:
        store.load(SETTINGS)
    assert _unreadable(events) == []
    store.close()


def test_an_unreadable_decision_is_dropped_alone(tmp_path: Path):
    path = str(tmp_path / "knowledge.db")
    store = KnowledgeStore(path)
    for time_s in (60.0, 120.0):
        store.save(_knowledge(), Decision(time_s, 1, 2, "smallest-sufficient", ("because",)))
    store.close()
    db = sqlite3.connect(path)
    db.execute('UPDATE decisions SET body = \'{"time_s": "noon"}\' WHERE id = 1')
    db.commit()
    db.close()

    store = KnowledgeStore(path)
    with capture_logs() as events:
        knowledge = store.load(SETTINGS)
    assert store.damaged is None
    assert [d.time_s for d in knowledge.recent_decisions] == [120.0]
    assert [e["dropped_entries"] for e in events if e.get("part") == "decisions"] == [1]
    _kept(knowledge, "decisions")
    store.close()


def test_a_part_the_snapshot_still_reads_is_taken_from_it(tmp_path: Path):
    path = str(tmp_path / "knowledge.db")
    store = KnowledgeStore(path)
    store.save(_knowledge(), None)
    store.close()
    _edit(path, "cores", _cores_truncated)  # the store alone: the snapshot reads whole

    store = KnowledgeStore(path)
    with capture_logs() as events:
        knowledge = store.load(SETTINGS)
    assert store.damaged is not None and "resumed from snapshot" in store.damaged
    assert _unreadable(events) == []
    _kept(knowledge, "none")  # the cores included
    store.close()
