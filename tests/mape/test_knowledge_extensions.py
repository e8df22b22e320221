"""Extension state in the knowledge (mape/extensions.py): saved by name, rebuilt by its factory, its records
journaled in the iteration's transaction; mape knows nothing of what the extension holds."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from mape.knowledge import Knowledge, KnowledgeSettings
from mape.knowledge_store import KnowledgeStore
from messages.types import Decision


@dataclass(frozen=True)
class _Note:
    time_s: float
    text: str

    def to_dict(self) -> dict:
        return {"time_s": self.time_s, "text": self.text}


@dataclass
class _Counter:
    count: int = 0
    new_records: list[_Note] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"count": self.count}

    @classmethod
    def from_dict(cls, data: dict) -> _Counter:
        return cls(count=int(data.get("count", 0)))


SETTINGS = KnowledgeSettings(extension_factories={"counter": _Counter.from_dict})


def test_extension_state_and_records_survive_a_restart(tmp_path: Path):
    path = tmp_path / "k.sqlite"
    store = KnowledgeStore(path)
    knowledge = store.load(SETTINGS)
    assert knowledge.extensions == {"counter": _Counter()}  # built by its factory from nothing saved
    knowledge.extensions["counter"].count = 3
    knowledge.extensions["counter"].new_records.append(_Note(60.0, "first"))
    store.save(knowledge, Decision(60.0, 2, 2, "hold", ()))
    assert knowledge.extensions["counter"].new_records == []  # journaled once, then forgotten
    knowledge.extensions["counter"].new_records.append(_Note(120.0, "second"))
    store.save(knowledge, None)
    store.close()

    store = KnowledgeStore(path)
    restored = store.load(SETTINGS)
    assert restored.extensions["counter"].count == 3
    assert store.records("counter") == [
        {"time_s": 60.0, "text": "first"},
        {"time_s": 120.0, "text": "second"},
    ]
    assert store.records("other") == []
    without = store.load(KnowledgeSettings())  # a loop without the extension ignores its state
    assert without.extensions == {}
    store.close()


def test_a_failed_save_keeps_the_records_for_the_next_one(tmp_path: Path):
    store = KnowledgeStore(tmp_path / "k.sqlite")
    knowledge = store.load(SETTINGS)
    knowledge.extensions["counter"].new_records.append(_Note(60.0, "kept"))
    knowledge.extensions["broken"] = _Counter(new_records=[_Note(60.0, "x")])
    knowledge.extensions["broken"].to_dict = lambda: {"unserialisable": object()}
    with pytest.raises(TypeError):
        store.save(knowledge, None)
    assert store.records("counter") == []
    del knowledge.extensions["broken"]
    store.save(knowledge, None)
    assert store.records("counter") == [{"time_s": 60.0, "text": "kept"}]
    store.close()


@pytest.mark.parametrize("name", ["capacity", "loop", "forecaster", "not a name"])
def test_an_extension_cannot_take_a_core_key_or_an_unsafe_name(name: str):
    with pytest.raises(ValueError, match="knowledge extension name"):
        KnowledgeSettings(extension_factories={name: _Counter.from_dict})


def test_fresh_knowledge_has_no_extension_state():
    assert Knowledge().extensions == {} and Knowledge.fresh(KnowledgeSettings()).extensions == {}
