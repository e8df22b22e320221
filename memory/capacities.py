"""Capacity knowledge per memory level, and per (scale-out, memory level) where the cache makes it so.

A worker processes a different number of records per CPU second at each level (its cache hit rate
changes), so lines learned at one level say nothing about another: each level keeps its own
`CapacityModel`. For an operator that reads through the block cache, the hit rate also moves with the
scale-out (each worker's share of the state shrinks as workers are added), so its lines do not carry over
from one scale-out to the next either: such a job keeps one model per (level, scale-out) configuration,
and capacities between configurations come from the cache curve (memory/curve.py). A level the job has
never run at has no model and offers no capacities.
"""

from __future__ import annotations

import structlog

from capacity.model import CapacityModel, CapacitySettings

LOG = structlog.get_logger("foresail.memory")

Key = tuple[int, int | None]
"""(memory level, scale-out); scale-out None: one model shared by every scale-out of the level."""

BALANCE_SMOOTHING = 0.3
"""EWMA weight of the newest balance seen at a scale-out."""


class LevelCapacities:
    """(level, scale-out) → CapacityModel, created on first use and persisted with the knowledge."""

    def __init__(self, settings: CapacitySettings | None = None) -> None:
        self.settings = settings or CapacitySettings()
        self.models: dict[Key, CapacityModel] = {}
        self.balance: dict[int, float] = {}
        """Per scale-out, mean over max of the workers' throughputs: how evenly the keys spread (1 = even).
        A skewed job saturates when its busiest worker does, so its capacity is n × balance × a worker's."""

    def observe_balance(self, scaleout: int, balance: float) -> None:
        if not 0 < balance <= 1:
            return
        seen = self.balance.get(scaleout)
        self.balance[scaleout] = (
            balance if seen is None else (1 - BALANCE_SMOOTHING) * seen + BALANCE_SMOOTHING * balance
        )

    def balance_at(self, scaleout: int) -> float:
        """The balance seen at this scale-out, else at the nearest one seen (1 for a single worker)."""
        if scaleout <= 1:
            return 1.0
        if scaleout in self.balance:
            return self.balance[scaleout]
        seen = [n for n in self.balance if n > 1]
        if not seen:
            return 1.0
        return self.balance[min(seen, key=lambda n: (abs(n - scaleout), n))]

    def model(self, level: int, scaleout: int | None = None) -> CapacityModel:
        """The model of the level (or of one configuration), fresh the first time the job runs there."""
        key = (level, scaleout)
        if key not in self.models:
            self.models[key] = CapacityModel(self.settings)
        return self.models[key]

    def known_levels(self, max_level: int | None = None) -> list[int]:
        """Levels with a capacity observed at some scale-out, up to `max_level` (the store may hold levels a
        higher `memory.max_level` of an earlier run reached: kept, but not offered)."""
        return sorted(
            {
                level
                for (level, _), model in self.models.items()
                if model.observed and (max_level is None or level <= max_level)
            }
        )

    def observed(self, level: int) -> dict[int, float]:
        """Capacity per scale-out observed at `level` (reliable estimates where a model has any); a
        configuration's own model wins over the level's shared one."""
        result: dict[int, float] = {}
        for (model_level, scaleout), model in sorted(
            self.models.items(), key=lambda kv: kv[0][1] is not None
        ):
            if model_level != level:
                continue
            trusted = {n: k for n, k in model.observed.items() if k.reliable} or model.observed
            result.update(
                (n, k.capacity_rps) for n, k in trusted.items() if scaleout is None or n == scaleout
            )
        return result

    def estimates(
        self, max_scaleout: int, now_s: float, skip: int | None = None, max_level: int | None = None
    ) -> dict[int, dict[int, float]]:
        """Capacity per scale-out of every known level (up to `max_level`) but `skip`, from each level's
        shared model."""
        result = {}
        for level in self.known_levels(max_level):
            model = self.models.get((level, None))
            if level == skip or model is None or not model.observed:
                continue
            result[level] = dict(model.estimate([], 0, max_scaleout, now_s).per_scaleout_rps)
        return result

    def to_dict(self) -> dict:
        return {
            "models": {_name(key): model.to_dict() for key, model in self.models.items()},
            "balance": {str(n): b for n, b in self.balance.items()},
        }

    @classmethod
    def from_dict(cls, data: dict, settings: CapacitySettings | None = None) -> LevelCapacities:
        capacities = cls(settings)
        for name, model in data.get("models", {}).items():
            key = _key(name)
            if key[0] < 0 or (key[1] is not None and key[1] < 1):  # level -1 failed every refine
                LOG.warning("memory-capacity-entry-dropped", key=name)
                continue
            capacities.models[key] = CapacityModel.from_dict(model, capacities.settings)
        capacities.balance = _balances(data.get("balance", {}))
        return capacities


def _balances(stored: dict) -> dict[int, float]:
    """The stored balances that `observe_balance` would have accepted (a scale-out ≥ 1, a balance in
    (0, 1]); the rest dropped with one warning: a balance above 1 promises more than n even workers."""
    balances, dropped = {}, 0
    for n, b in stored.items():
        try:
            scaleout, balance = int(n), float(b)
        except (TypeError, ValueError):
            dropped += 1
            continue
        if scaleout >= 1 and 0 < balance <= 1:
            balances[scaleout] = balance
        else:
            dropped += 1
    if dropped:
        LOG.warning("memory-balance-entries-dropped", dropped_entries=dropped)
    return balances


def _name(key: Key) -> str:
    level, scaleout = key
    return str(level) if scaleout is None else f"{level}@{scaleout}"


def _key(name: str) -> Key:
    level, _, scaleout = name.partition("@")
    return int(level), (int(scaleout) if scaleout else None)
