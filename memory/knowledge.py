"""What the loop learns about memory: per-level capacities, the operators' decision history, and the
level the job runs at. Persisted inside the knowledge store's state (see mape/knowledge.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from capacity.model import CapacitySettings
from memory.capacities import LevelCapacities
from memory.history import MemoryHistory


@dataclass
class MemoryKnowledge:
    capacities: LevelCapacities = field(default_factory=LevelCapacities)
    history: MemoryHistory = field(default_factory=MemoryHistory)
    level: int | None = None
    """The memory level last observed or set (used while the backend cannot tell the managed memory)."""

    def to_dict(self) -> dict:
        return {"levels": self.capacities.to_dict(), "history": self.history.to_dict(), "level": self.level}

    @classmethod
    def from_dict(cls, data: dict, settings: CapacitySettings | None = None) -> MemoryKnowledge:
        return cls(
            capacities=LevelCapacities.from_dict(data.get("levels", {}), settings),
            history=MemoryHistory.from_dict(data.get("history", {})),
            level=data.get("level"),
        )
