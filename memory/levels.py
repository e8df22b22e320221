"""Memory levels: level x gives each task slot 2^x × the base managed memory; None means no managed memory.

Justin (§4.1) allocates memory in doubling levels so that tasks map onto TaskManagers without
fragmentation. Here a TaskManager has one slot (reactive mode), so the level is the TaskManager's managed
memory; within a slot Flink hands managed memory only to operators that consume it (the RocksDB
backends of stateful operators), so stateless operators sharing the slot get none either way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

WRITE_BUFFER_MAX_MB = 64.0
"""RocksDB's MemTable in Flink's managed-memory split is at most 64 MB (one first-level SSTable)."""


def write_buffer_mb(managed_mb: float) -> float:
    """The MemTable share of a RocksDB instance's managed memory (Justin §3): the largest power of two
    strictly below half the memory, at most 64 MB (128 MB → 32, 256 → 64, 158 → 64)."""
    if managed_mb <= 0:
        return 0.0
    size = WRITE_BUFFER_MAX_MB
    while size >= managed_mb / 2 and size > 1:
        size /= 2
    return size


def block_cache_mb(managed_mb: float) -> float:
    """The block-cache share of the managed memory: what is left after the MemTable."""
    return max(managed_mb - write_buffer_mb(managed_mb), 0.0)


READING_SLACK = 4
"""Doublings beyond the lowest and the highest level within which a managed-memory reading is plausible
(16×: a job still at level 3 after `max_level` was lowered to 0 reads as plausible)."""


@dataclass(frozen=True)
class MemoryLevels:
    base_mb: float = 158.0
    """Managed memory per slot at level 0 (Justin's default 158 MB per slot)."""
    max_level: int = 3
    """Highest level: levels run 0..max_level (Justin's pseudo-code test `m + 1 < maxLevel` stops one
    below; here the option names the highest level a job may reach)."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.base_mb) and self.base_mb > 0):
            raise ValueError(f"base_mb must be > 0, got {self.base_mb!r}")
        if self.max_level < 0:
            raise ValueError(f"max_level must be >= 0, got {self.max_level!r}")

    def managed_mb(self, level: int | None) -> float:
        """Managed memory per slot at `level` (0 for None: no managed memory)."""
        if level is None:
            return 0.0
        if not 0 <= level <= self.max_level:
            raise ValueError(f"memory level {level} outside 0..{self.max_level}")
        return self.base_mb * 2**level

    def level_of(self, managed_mb: float | None) -> int | None:
        """The level whose memory is nearest (in doublings) to `managed_mb`; None for none or unknown.

        A deployment started with another managed size (say Flink's default) counts as the nearest level
        until the first memory decision sets an exact one.
        """
        if managed_mb is None or not math.isfinite(managed_mb) or managed_mb <= 0:
            return None
        return min(max(round(math.log2(managed_mb / self.base_mb)), 0), self.max_level)

    @property
    def all(self) -> range:
        return range(self.max_level + 1)

    @property
    def top_mb(self) -> float:
        return self.managed_mb(self.max_level)

    def plausible(self, managed_mb: float) -> bool:
        """Whether a managed-memory reading can be real: none (0), or within `READING_SLACK` doublings of
        the levels. Far outside (a query answering in bytes, a garbled sample) it is bad data: taken at face
        value it would price the current configuration wrongly and restart the job into another level."""
        if not math.isfinite(managed_mb) or managed_mb < 0:
            return False
        if managed_mb == 0:
            return True
        slack = 2.0**READING_SLACK
        return self.base_mb / slack <= managed_mb <= self.top_mb * slack

    def above_top(self, managed_mb: float) -> bool:
        """Whether `managed_mb` is nearer a level above `max_level` than the top level (in doublings): the
        job still runs with the memory of a higher `max_level` it was configured with before."""
        return managed_mb > 0 and math.log2(managed_mb / self.top_mb) > 0.5
