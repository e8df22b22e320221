"""What the loop learns about memory: per-level capacities, the operators' decision history, and the
level the job runs at. It is the memory extension's state in the knowledge (`Knowledge.extensions`,
mape/extensions.py), saved under "memory"; its decision records go to the store's `memory_decisions`.

The levels are numbers relative to `memory.base_mb` and bounded by `memory.max_level`, both of which the
next run may configure differently; so the state records the ones it was learned under, and `reconcile`
maps it onto the running configuration before it is used (capacities move with their MB; what no level
of the new configuration matches is dropped with one warning).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

import structlog

from capacity.model import CapacitySettings
from mape.knowledge import Knowledge
from mape.knowledge_store import KnowledgeStore
from memory.capacities import LevelCapacities
from memory.history import MemoryHistory, OperatorDecision, stored_decisions
from memory.levels import MemoryLevels
from messages.types import FailedMemoryChange, finite_number

MEMORY = "memory"
"""The memory extension's name: its key in `Knowledge.extensions` and in the saved state."""

LOG = structlog.get_logger("foresail.memory")

RETRY_FAILED_LEVEL_S = 3600.0
"""A level whose change timed out (its pods never came up with the memory) is tried again after this
long: the cluster may have room by then."""


@dataclass
class MemoryKnowledge:
    capacities: LevelCapacities = field(default_factory=LevelCapacities)
    history: MemoryHistory = field(default_factory=MemoryHistory)
    level: int | None = None
    """The memory level last observed or set (used while the backend cannot tell the managed memory);
    within 0..max_level once reconciled."""
    managed_mb: float | None = None
    """The managed memory per slot last observed or set: above the top level when the job still runs
    with the memory of a higher `max_level` it was configured with before."""
    base_mb: float | None = None
    """`memory.base_mb` the levels were learned under (None: not recorded, a store of an older version)."""
    max_level: int | None = None
    """`memory.max_level` the levels were learned under."""
    stateless_since_s: float | None = None
    """Loop time of the first of the windows in a row whose operators were reported and none showed state
    (None: the last window showed state, or none was reported)."""
    failed_changes: list[FailedMemoryChange] = field(default_factory=list)
    """Memory changes that timed out: the memory they asked for is not given again for a while
    (`unreachable_levels`)."""
    bad_reading: str | None = field(default=None, compare=False)
    """This window's implausible managed-memory reading, said in the decision (not saved)."""

    @property
    def new_records(self) -> list[OperatorDecision]:
        """This iteration's operator decisions, for the store's table (it clears the list once saved)."""
        return self.history.new_records

    def forget_seeded(self) -> None:
        """A capacity plan's per-level capacities turned out to be another job's (`Knowledge.check_seeded_job`):
        what no estimate of the daemon touched goes."""
        for model in self.capacities.models.values():
            model.forget_seeded()

    def to_dict(self) -> dict:
        return {
            "levels": self.capacities.to_dict(),
            "history": self.history.to_dict(),
            "level": self.level,
            "managed_mb": self.managed_mb,
            "base_mb": self.base_mb,
            "max_level": self.max_level,
            "stateless_since_s": self.stateless_since_s,
            "failed_changes": [asdict(f) for f in self.failed_changes],
        }

    @classmethod
    def from_dict(cls, data: dict, settings: CapacitySettings | None = None) -> MemoryKnowledge:
        return cls(
            capacities=LevelCapacities.from_dict(data.get("levels", {}), settings),
            history=MemoryHistory.from_dict(data.get("history", {})),
            level=_stored(data, "level", _is_level),
            managed_mb=_stored(data, "managed_mb", lambda v: finite_number(v) and v >= 0),
            base_mb=_stored(data, "base_mb", lambda v: finite_number(v) and v > 0),
            max_level=_stored(data, "max_level", _is_level),
            stateless_since_s=_stored(data, "stateless_since_s", lambda v: finite_number(v) and v >= 0),
            failed_changes=_failed_changes(data.get("failed_changes")),
        )

    def unreachable_levels(self, levels: MemoryLevels, now_s: float) -> frozenset[int]:
        """The levels not to be given now: those with at least the memory of a change that timed out in
        the last `RETRY_FAILED_LEVEL_S` (more memory per pod is no easier to schedule)."""
        recent = [
            f.managed_mb for f in self.failed_changes if 0 <= now_s - f.requested_s < RETRY_FAILED_LEVEL_S
        ]
        if not recent:
            return frozenset()
        return frozenset(level for level in levels.all if levels.managed_mb(level) >= min(recent) - 0.5)


def reconcile(memory: MemoryKnowledge, levels: MemoryLevels) -> None:
    """Maps the state onto the configured levels: by MB when `base_mb` changed, and the level into
    0..max_level (the MB the job runs with stays known, so the policy can step it down)."""
    base_mb = memory.base_mb or levels.base_mb
    if memory.managed_mb is not None and not levels.plausible(memory.managed_mb):
        # only live readings were judged: 1e300 stored restarted a level-1 job into the top level
        LOG.warning("memory-state-value-dropped", key="managed_mb", value=repr(memory.managed_mb)[:80])
        memory.managed_mb = None
    if memory.managed_mb is None and memory.level is not None:
        memory.managed_mb = base_mb * 2.0**memory.level
    if base_mb != levels.base_mb:
        _remap(memory, base_mb, levels)
    if memory.level is not None:
        memory.level = levels.level_of(memory.managed_mb)
    memory.base_mb, memory.max_level = levels.base_mb, levels.max_level


def _remap(memory: MemoryKnowledge, old_base_mb: float, levels: MemoryLevels) -> None:
    """Capacities and history levels move to the level of the same MB; where none has it, dropped."""
    shift = math.log2(old_base_mb / levels.base_mb)
    exact = abs(shift - round(shift)) < 1e-9
    step = round(shift) if exact else None

    def moved(level: int | None) -> int | None:
        if level is None or step is None or level + step < 0:
            raise ValueError(level)
        return level + step

    capacities, dropped = memory.capacities, 0
    for (level, scaleout), model in list(capacities.models.items()):
        del capacities.models[(level, scaleout)]
        try:
            capacities.models[(moved(level), scaleout)] = model
        except ValueError:
            dropped += 1
    for name, entry in list(memory.history.last.items()):
        try:
            memory.history.last[name] = _moved_decision(entry, moved)
        except ValueError:
            del memory.history.last[name]
            dropped += 1
    LOG.warning(
        "memory-levels-remapped",
        from_base_mb=old_base_mb,
        to_base_mb=levels.base_mb,
        level_shift=step,
        dropped_entries=dropped,
    )


def _moved_decision(entry: OperatorDecision, moved: Callable[[int | None], int | None]) -> OperatorDecision:
    return replace(
        entry,
        from_level=None if entry.from_level is None else moved(entry.from_level),
        to_level=None if entry.to_level is None else moved(entry.to_level),
    )


def _stored(data: dict, key: str, valid):
    """One stored scalar: None when absent; dropped with a warning when it fails `valid`."""
    value = data.get(key)
    if value is None or valid(value):
        return value
    LOG.warning("memory-state-value-dropped", key=key, value=repr(value)[:80])
    return None


MAX_STORED_LEVEL = 64
"""Far above any configured level (memory.max_level ≤ 8); 2000 stored overflowed 2**level every iteration."""


def _failed_changes(value: object) -> list[FailedMemoryChange]:
    """The stored timed-out changes; one that is not a (time, positive MB) pair is dropped with a warning."""
    entries = value if isinstance(value, list) else []
    kept = [
        FailedMemoryChange(float(e["requested_s"]), float(e["managed_mb"]))
        for e in entries
        if isinstance(e, dict)
        and finite_number(e.get("requested_s"))
        and finite_number(e.get("managed_mb"))
        and e["managed_mb"] > 0
    ]
    if len(kept) < len(entries) or not isinstance(value, list | None):
        LOG.warning("memory-state-value-dropped", key="failed_changes", value=repr(value)[:80])
    return kept


def _is_level(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_STORED_LEVEL


def memory_of(knowledge: Knowledge) -> MemoryKnowledge:
    """The memory part of the knowledge; a fresh one (default capacity settings) if the knowledge was built
    without the memory extension's factory (daemon/build.py registers it for the memory-aware policy)."""
    memory = knowledge.extensions.get(MEMORY)
    if memory is None:
        memory = knowledge.extensions[MEMORY] = MemoryKnowledge()
    return memory


def memory_decisions(store: KnowledgeStore, operator: str | None = None) -> list[OperatorDecision]:
    """Every operator's memory-relevant reconfigurations (or one operator's), oldest first."""
    entries = stored_decisions(list(store.records(MEMORY)))
    return [e for e in entries if operator is None or e.operator == operator]
