"""What the loop learns about memory: per-level capacities, the operators' decision history, and the
level the job runs at. It is the memory extension's state in the knowledge (`Knowledge.extensions`,
mape/extensions.py), saved under "memory"; its decision records go to the store's `memory_decisions`."""

from __future__ import annotations

from dataclasses import dataclass, field

from capacity.model import CapacitySettings
from mape.knowledge import Knowledge, KnowledgeStore
from memory.capacities import LevelCapacities
from memory.history import MemoryHistory, OperatorDecision

MEMORY = "memory"
"""The memory extension's name: its key in `Knowledge.extensions` and in the saved state."""


@dataclass
class MemoryKnowledge:
    capacities: LevelCapacities = field(default_factory=LevelCapacities)
    history: MemoryHistory = field(default_factory=MemoryHistory)
    level: int | None = None
    """The memory level last observed or set (used while the backend cannot tell the managed memory)."""

    @property
    def new_records(self) -> list[OperatorDecision]:
        """This iteration's operator decisions, for the store's table (it clears the list once saved)."""
        return self.history.new_records

    def to_dict(self) -> dict:
        return {"levels": self.capacities.to_dict(), "history": self.history.to_dict(), "level": self.level}

    @classmethod
    def from_dict(cls, data: dict, settings: CapacitySettings | None = None) -> MemoryKnowledge:
        return cls(
            capacities=LevelCapacities.from_dict(data.get("levels", {}), settings),
            history=MemoryHistory.from_dict(data.get("history", {})),
            level=data.get("level"),
        )


def memory_of(knowledge: Knowledge) -> MemoryKnowledge:
    """The memory part of the knowledge; a fresh one (default capacity settings) if the knowledge was built
    without the memory extension's factory (daemon/build.py registers it for the memory-aware policy)."""
    memory = knowledge.extensions.get(MEMORY)
    if memory is None:
        memory = knowledge.extensions[MEMORY] = MemoryKnowledge()
    return memory


def memory_decisions(store: KnowledgeStore, operator: str | None = None) -> list[OperatorDecision]:
    """Every operator's memory-relevant reconfigurations (or one operator's), oldest first."""
    entries = [OperatorDecision.from_dict(body) for body in store.records(MEMORY)]
    return [e for e in entries if operator is None or e.operator == operator]
